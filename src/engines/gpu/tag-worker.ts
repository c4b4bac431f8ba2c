/**
 * A worker thread of the GPU tag index (tag-pool.ts): signatures and splits of the build
 * (tag-build.ts) and verification of batches (tag-verify.ts), over shared arrays.
 */
import { parentPort } from 'node:worker_threads';
import { BITS, signaturesOf, splitAll, splitStep } from './tag-build.js';
import type { TagReply, TagTask } from './tag-pool.js';
import { type VerifyTables, verifyHits } from './tag-verify.js';

let sig: Uint32Array = new Uint32Array(0);
let order: Uint32Array = new Uint32Array(0);
let offsets: Uint32Array = new Uint32Array(0);
let tags: Uint32Array = new Uint32Array(0);
let tables: VerifyTables | null = null;
const counts = new Float64Array(BITS);

function answer(task: TagTask): [TagReply, ArrayBuffer[]] {
  switch (task.kind) {
    case 'init':
      sig = new Uint32Array(task.sig);
      order = new Uint32Array(task.order);
      offsets = new Uint32Array(task.offsets);
      tags = new Uint32Array(task.tags);
      return [{ kind: 'done' }, []];
    case 'signatures':
      signaturesOf(sig, offsets, tags, task.from, task.to);
      return [{ kind: 'done' }, []];
    case 'step': {
      const r = splitStep(sig, order, task.part, task.rule, counts);
      return [{ kind: 'step', partition: r.partition, next: r.next }, []];
    }
    case 'all':
      return [{ kind: 'all', parts: splitAll(sig, order, task.part, task.rule) }, []];
    case 'tables':
      tables = {
        setOff: new Uint32Array(task.setOff),
        setTags: new Uint32Array(task.setTags),
        keyOff: new Uint32Array(task.keyOff),
        keyList: new Uint32Array(task.keyList),
        keyValues: task.keyValues === null ? null : new Uint32Array(task.keyValues),
        order: new Uint32Array(task.order),
      };
      return [{ kind: 'done' }, []];
    case 'verify': {
      if (tables === null) throw new Error('verify before tables');
      const r = verifyHits(tables, task.qOff, task.qTags, task.data, task.head, task.hits, task.unique);
      return [{ kind: 'verified', offsets: r.offsets, keys: r.keys, falseHits: r.falseHits }, [r.offsets.buffer as ArrayBuffer, r.keys.buffer as ArrayBuffer]];
    }
  }
}

parentPort!.on('message', (task: TagTask) => {
  let reply: TagReply;
  let transfer: ArrayBuffer[] = [];
  try {
    [reply, transfer] = answer(task);
  } catch (e) {
    reply = { kind: 'error', message: e instanceof Error ? e.message : String(e) };
  }
  parentPort!.postMessage(reply, transfer);
});
