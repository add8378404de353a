// The node's services as it reports them to the cluster: each worker
// reports its own line; the status-push worker sends the whole board.

import { create } from "@bufbuild/protobuf";
import { ServiceStatusSchema, type ServiceStatus } from "../../proto/gen/common/common_pb.ts";
import { Value } from "../event/mod.ts";

export class ServiceBoard {
  private readonly lines = new Map<string, ServiceStatus>();
  /** Read by the status push. */
  readonly value = new Value<ServiceStatus[]>();

  report(name: string, state: string, message = ""): void {
    const current = this.lines.get(name);
    if (current && current.state === state && current.message === message) return;
    this.lines.set(name, create(ServiceStatusSchema, { name, state, message }));
    this.publish();
  }

  /** Takes a line off the board (a service that no longer applies to this node). */
  withdraw(name: string): void {
    if (this.lines.delete(name)) this.publish();
  }

  private publish(): void {
    this.value.set([...this.lines.values()].sort((a, b) => a.name.localeCompare(b.name)));
  }
}
