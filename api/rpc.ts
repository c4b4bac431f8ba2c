/**
 * The bridge between protobuf-es descriptors (generated from proto/, the only API definition) and
 * @grpc/grpc-js, which wants a ServiceDefinition of paths and (de)serialisers. Also the package
 * definition @grpc/reflection reads: the serialized FileDescriptorProtos of our files and imports.
 */
import * as grpc from '@grpc/grpc-js';
import { create, fromBinary, isMessage, toBinary, type DescFile, type DescMessage, type DescMethod, type DescService, type MessageShape } from '@bufbuild/protobuf';
import { FileDescriptorProtoSchema } from '@bufbuild/protobuf/wkt';
import { DeviceService } from './gen/ambit/v1/device_pb.js';
import { OpsService } from './gen/ambit/v1/ops_pb.js';
import { PublisherService } from './gen/ambit/v1/publisher_pb.js';

export const SERVICES: readonly DescService[] = [DeviceService, PublisherService, OpsService];

/** A grpc-js ServiceDefinition for a protobuf-es service descriptor. */
/**
 * A request the server could not decode. grpc-js answers a throwing deserializer with INTERNAL;
 * handing the handler this marker instead lets it answer INVALID_ARGUMENT, as for any bad input.
 */
export interface Malformed {
  readonly malformed: true;
  readonly reason: string;
}

export function isMalformed(v: unknown): v is Malformed {
  return typeof v === 'object' && v !== null && (v as { malformed?: unknown }).malformed === true;
}

/**
 * The server side: requests that fail to decode arrive as `Malformed`. `fast`: per method, a
 * decoder for its hottest message layouts that returns null for anything else (fast-decode.ts).
 */
export function grpcServerDefinition(service: DescService, fast: Readonly<Record<string, (bytes: Buffer) => unknown>> = {}): grpc.ServiceDefinition {
  const def = grpcDefinition(service) as Record<string, grpc.MethodDefinition<unknown, unknown>>;
  for (const m of service.methods) def[m.localName] = { ...def[m.localName], requestDeserialize: requestDecoder(m, fast[m.localName]) };
  return def as grpc.ServiceDefinition;
}

/**
 * A method's request decoder for a server: `fast` first (when given; null from it means "not a
 * layout it knows"), then the generic reader; bytes that fail to decode come back as `Malformed`.
 */
export function requestDecoder(m: DescMethod, fast?: (bytes: Buffer) => unknown): (bytes: Buffer) => unknown {
  const generic = deserializer(m.input);
  const decode = fast === undefined ? generic : (bytes: Buffer) => fast(bytes) ?? generic(bytes);
  return (bytes: Buffer) => {
    try {
      return decode(bytes);
    } catch (err) {
      return { malformed: true, reason: `malformed ${m.input.typeName} message: ${err instanceof Error ? err.message : String(err)}` } satisfies Malformed;
    }
  };
}

export function grpcDefinition(service: DescService): grpc.ServiceDefinition {
  const def: Record<string, grpc.MethodDefinition<unknown, unknown>> = {};
  for (const m of service.methods) {
    def[m.localName] = {
      path: `/${service.typeName}/${m.name}`,
      originalName: m.name,
      requestStream: m.methodKind === 'client_streaming' || m.methodKind === 'bidi_streaming',
      responseStream: m.methodKind === 'server_streaming' || m.methodKind === 'bidi_streaming',
      requestSerialize: serializer(m.input),
      requestDeserialize: deserializer(m.input),
      responseSerialize: serializer(m.output),
      responseDeserialize: deserializer(m.output),
    };
  }
  return def as grpc.ServiceDefinition;
}

function serializer<D extends DescMessage>(schema: D): (value: unknown) => Buffer {
  // Accepts a message, a plain init object (as protobuf-es `create` does), so callers may write
  // `{ message: { case: 'location', value: { lat, lon } } }` without wrapping each level, or the
  // message's bytes already encoded.
  return (value) => {
    // Bytes are a message the server encoded itself (a notification frame shared by recipients).
    if (value instanceof Uint8Array) return Buffer.isBuffer(value) ? value : Buffer.from(value.buffer, value.byteOffset, value.byteLength);
    const msg = isMessage(value, schema) ? value : create(schema, value as never);
    const bytes = toBinary(schema, msg as MessageShape<D>);
    return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  };
}

function deserializer<D extends DescMessage>(schema: D): (bytes: Buffer) => MessageShape<D> {
  return (bytes) => fromBinary(schema, bytes);
}

/** A client constructor for a service (for the SDK, tests and benchmarks). */
export function grpcClient(service: DescService): grpc.ServiceClientConstructor {
  return grpc.makeGenericClientConstructor(grpcDefinition(service), service.typeName);
}

/** The package definition @grpc/reflection expects: every file our services use, serialized. */
export function reflectionPackage(services: readonly DescService[] = SERVICES): Record<string, { fileDescriptorProtos: Buffer[] }> {
  const files = new Map<string, DescFile>();
  const visit = (f: DescFile): void => {
    if (files.has(f.name)) return;
    files.set(f.name, f);
    for (const d of f.dependencies) visit(d);
  };
  for (const s of services) visit(s.file);
  const protos = [...files.values()].map((f) => {
    const bytes = toBinary(FileDescriptorProtoSchema, f.proto);
    return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  });
  const pkg: Record<string, { fileDescriptorProtos: Buffer[] }> = {};
  for (const s of services) pkg[s.typeName] = { fileDescriptorProtos: protos };
  return pkg;
}
