// How the node reaches the cluster's curators: the local one first when this
// node runs the control plane, then the others from the directory. Calls
// move on to the next curator when one is unreachable or not the leader.

import type { KeyObject, X509Certificate } from "node:crypto";
import { dialAsNode, type CuratorClient } from "../cluster/mod.ts";
import { RpcError, Status } from "../rpc/mod.ts";

export interface CuratorConnection {
  /** Curator addresses (host:port), best first. */
  targets: string[];
  credentials: { ca: X509Certificate; certificate: X509Certificate; privateKey: KeyObject };
}

/** How long a curator gets to accept a connection before the next one is tried. */
export const CURATOR_CONNECT_TIMEOUT_MS = 3_000;

export class NoCuratorError extends Error {
  override name = "NoCuratorError";
}

function worthTryingElsewhere(err: unknown): boolean {
  return err instanceof RpcError && (err.code === Status.UNAVAILABLE || err.code === Status.DEADLINE_EXCEEDED);
}

/** Calls `call` with a client of each curator in turn until one succeeds. */
export async function withCurator<T>(connection: CuratorConnection, call: (client: CuratorClient) => Promise<T>): Promise<T> {
  const failures: string[] = [];
  for (const target of connection.targets) {
    const client = dialAsNode(target, connection.credentials);
    try {
      if (!(await client.ready(CURATOR_CONNECT_TIMEOUT_MS))) {
        failures.push(`${target}: no connection within ${CURATOR_CONNECT_TIMEOUT_MS / 1000} s`);
        continue;
      }
      return await call(client);
    } catch (err) {
      if (!worthTryingElsewhere(err)) throw err;
      failures.push(`${target}: ${(err as RpcError).details}`);
    } finally {
      client.close();
    }
  }
  throw new NoCuratorError(`no curator answered (${failures.join("; ") || "none known"})`);
}
