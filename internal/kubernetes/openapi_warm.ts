// The OpenAPI documents kubectl validates against, built as soon as the
// apiserver is ready instead of on a user's first `kubectl apply`.
//
// The apiserver builds its OpenAPI documents lazily, on the first request
// for each, and keeps them. kubectl apply asks for them before it sends
// anything: the v3 document of each object's group, and, for a `kind:
// List` (what `kubectl get -o yaml` writes), the whole v2 document, the
// largest of all. Under software emulation building the v2 document took
// longer than the apiserver's own 60 s request deadline, so a user's first
// apply of a List failed with "the server was unable to return a response
// in the time allotted" (a clean-clone CI run, 2026-11-28). The build goes
// on after that deadline and is kept, so asking once at each start, and
// again until it is answered, moves the cost from the user's first command
// to the apiserver's start, where nobody waits on it.
//
//   apiserver ready ─▶ GET /openapi/v2 (protobuf, as kubectl asks) ─▶ GET /openapi/v3/api/v1
//                      each until answered 200 (a 504 means "still building")

import type { Logger } from "../log/mod.ts";
import { privateKeyPem, toPem } from "../pki/mod.ts";
import { sleep } from "../supervisor/mod.ts";
import type { Credential } from "./pki.ts";

/** The documents, and the media type kubectl asks each in. */
export const WARMED_DOCUMENTS = [
  { path: "/openapi/v2", accept: "application/com.github.proto-openapi.spec.v2@v1.0+protobuf" },
  { path: "/openapi/v3/api/v1", accept: "application/json" },
] as const;
/** One request's bound: past the apiserver's own 60 s, which answers 504 while the build goes on. */
const REQUEST_TIMEOUT_MS = 90_000;
const RETRY_PAUSE_MS = 2_000;
/** Tries per document: an apiserver that cannot build it is left to the user's request, which says why. */
const TRIES = 10;

/** Asks the apiserver at `url` for each warmed document until it answers; logs how long the whole took. */
export async function warmOpenApi(url: string, as: { ca: Credential["certificate"]; client: Credential }, signal: AbortSignal, logger: Logger): Promise<void> {
  const started = performance.now();
  const tls = { ca: toPem(as.ca), cert: toPem(as.client.certificate), key: privateKeyPem(as.client.privateKey) };
  for (const document of WARMED_DOCUMENTS) {
    let last = "";
    for (let tried = 1; ; tried++) {
      try {
        const response = await fetch(`${url}${document.path}`, {
          headers: { accept: document.accept },
          signal: AbortSignal.any([signal, AbortSignal.timeout(REQUEST_TIMEOUT_MS)]),
          tls,
        } as RequestInit);
        await response.arrayBuffer();
        if (response.ok) break;
        last = `HTTP ${response.status}`;
      } catch (error) {
        if (signal.aborted) return;
        last = (error as Error).message;
      }
      if (tried >= TRIES) {
        logger.warn("the apiserver did not build an OpenAPI document kubectl validates against; the first kubectl apply that needs it waits for it", { path: document.path, tries: tried, last });
        return;
      }
      await sleep(RETRY_PAUSE_MS, signal);
    }
  }
  logger.info("the apiserver's OpenAPI documents are built (kubectl apply validates against them)", { ms: Math.round(performance.now() - started) });
}
