// A service implementation from only the methods a caller cares about.
//
// Monogon's fakes embed the generated UnimplementedCuratorServer and write
// only the methods a test calls; this is that for protobuf-es services. A
// fake that serves a few methods of a large service then says so, instead of
// a page of handlers that return `{}` and hide a call the test never meant
// to answer.

import type { DescService } from "@bufbuild/protobuf";
import { UnimplementedError } from "./errors.ts";
import type { ServiceImpl } from "./service.ts";

/**
 * A full implementation of `service` from `impl`: every method that `impl`
 * does not give answers UNIMPLEMENTED, naming itself ("Curator/Watch is not
 * implemented"); a stream fails before its first message.
 */
export function partialService<S extends DescService>(service: S, impl: Partial<ServiceImpl<S>>): ServiceImpl<S> {
  const full: Record<string, unknown> = { ...impl };
  for (const method of service.methods) {
    if (full[method.localName] !== undefined) continue;
    const unimplemented = () => new UnimplementedError(`${service.name}/${method.name} is not implemented`);
    switch (method.methodKind) {
      case "unary":
      case "client_streaming":
        full[method.localName] = async () => {
          throw unimplemented();
        };
        break;
      case "server_streaming":
      case "bidi_streaming":
        full[method.localName] = async function* () {
          throw unimplemented();
        };
        break;
      default: {
        const kind: never = method.methodKind;
        throw new Error(`${service.name}/${method.name}: unknown method kind ${String(kind)}`);
      }
    }
  }
  return full as ServiceImpl<S>;
}
