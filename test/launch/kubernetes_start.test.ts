import { describe, expect, test } from "bun:test";
import { readyzFailing } from "./kubernetes_start.ts";

describe("the launcher's wait for the apiserver", () => {
  test("names the /readyz checks that still fail, from kubectl's error (its body quoted, the lines escaped)", () => {
    // As kubectl get --raw /readyz says it while the apiserver starts.
    const kubectl =
      'Error from server (InternalError): an error on the server ("[+]ping ok\\n[+]log ok\\n[-]etcd failed: reason withheld\\n[+]informer-sync ok\\n[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\\nreadyz check failed") has prevented the request from succeeding';
    expect(readyzFailing(kubectl)).toBe("failing: etcd, poststarthook/rbac/bootstrap-roles");
  });

  test("an answer that names no failing check is shown by its first line", () => {
    expect(readyzFailing("Unable to connect to the server: net/http: TLS handshake timeout\nmore")).toBe("Unable to connect to the server: net/http: TLS handshake timeout");
  });
});
