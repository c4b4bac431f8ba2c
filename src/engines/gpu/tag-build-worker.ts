/** A worker thread of the GPU tag index's build (tag-build.ts): signatures and splits over shared arrays. */
import { parentPort } from 'node:worker_threads';
import { BITS, type BuildReply, type BuildTask, signaturesOf, splitAll, splitStep } from './tag-build.js';

let sig: Uint32Array = new Uint32Array(0);
let order: Uint32Array = new Uint32Array(0);
let offsets: Uint32Array = new Uint32Array(0);
let tags: Uint32Array = new Uint32Array(0);
const counts = new Float64Array(BITS);

function answer(task: BuildTask): BuildReply {
  switch (task.kind) {
    case 'init':
      sig = new Uint32Array(task.sig);
      order = new Uint32Array(task.order);
      offsets = new Uint32Array(task.offsets);
      tags = new Uint32Array(task.tags);
      return { kind: 'done' };
    case 'signatures':
      signaturesOf(sig, offsets, tags, task.from, task.to);
      return { kind: 'done' };
    case 'step': {
      const r = splitStep(sig, order, task.part, task.rule, counts);
      return { kind: 'step', partition: r.partition, next: r.next };
    }
    case 'all':
      return { kind: 'all', parts: splitAll(sig, order, task.part, task.rule) };
  }
}

parentPort!.on('message', (task: BuildTask) => {
  let reply: BuildReply;
  try {
    reply = answer(task);
  } catch (e) {
    reply = { kind: 'error', message: e instanceof Error ? e.message : String(e) };
  }
  parentPort!.postMessage(reply);
});
