import { describe, expect, test } from "bun:test";
import { CONTROLLER_MEMORY_MIB, WORKER_MEMORY_MIB } from "../../image/mod.ts";
import { MAX_VCPUS, MIN_CONTROLLER_MEMORY_MIB, MIN_CONTROLLER_VCPUS, MIN_WORKER_MEMORY_MIB, sizeVms } from "./vm_sizing.ts";

describe("VMs sized to their host", () => {
  const twoCores = { cpus: 2, memoryMiB: 24 * 1024 };

  test("one VM on two cores keeps both, with its default memory, and no warning", () => {
    const sized = sizeVms(1, twoCores);
    expect([sized.controllerCpus, sized.controllerMemoryMiB, sized.warnings]).toEqual([2, CONTROLLER_MEMORY_MIB, []]);
    expect(sized.summary).toBe(`each VM gets 2 vCPUs (this host's 2 cores shared among 1 VM, 1 to ${MAX_VCPUS} each) and ${CONTROLLER_MEMORY_MIB} MiB`);
  });

  test("three VMs on two cores: the controller keeps a control plane's two vCPUs, the workers get one each, and all are told they share the cores", () => {
    const sized = sizeVms(3, twoCores);
    expect([sized.controllerCpus, sized.workerCpus, sized.controllerMemoryMiB, sized.workerMemoryMiB]).toEqual([MIN_CONTROLLER_VCPUS, 1, CONTROLLER_MEMORY_MIB, WORKER_MEMORY_MIB]);
    expect(sized.summary).toStartWith("node1 (the controller) gets 2 vCPUs, every other VM 1 (this host's 2 cores shared among 3 VMs, 1 to 4 each, and the controller at least 2)");
    expect(sized.warnings).toEqual([
      "3 VMs with 2 vCPUs for node1 and 1 for each other on 2 host cores: 4 vCPUs share them (2.0×); expect slow starts, and Kubernetes' control plane may miss its deadlines under load",
    ]);
  });

  test("on one core the controller gets the one vCPU there is", () => {
    const sized = sizeVms(3, { cpus: 1, memoryMiB: 24 * 1024 });
    expect([sized.controllerCpus, sized.workerCpus]).toEqual([1, 1]);
  });

  test("a big host gives each VM its share, up to the most a VM gets", () => {
    expect([sizeVms(3, { cpus: 8, memoryMiB: 64 * 1024 }).controllerCpus, sizeVms(3, { cpus: 8, memoryMiB: 64 * 1024 }).workerCpus]).toEqual([2, 2]);
    expect(sizeVms(1, { cpus: 64, memoryMiB: 64 * 1024 }).controllerCpus).toBe(MAX_VCPUS);
    expect([sizeVms(3, { cpus: 64, memoryMiB: 64 * 1024 }).controllerCpus, sizeVms(3, { cpus: 64, memoryMiB: 64 * 1024 }).workerCpus]).toEqual([MAX_VCPUS, MAX_VCPUS]);
    expect(sizeVms(3, { cpus: 8, memoryMiB: 64 * 1024 }).warnings).toEqual([]);
  });

  test("memory is scaled down to fit the host, never below what a node needs, and a host too small is warned about", () => {
    const sized = sizeVms(4, { cpus: 8, memoryMiB: 8 * 1024 });
    expect(sized.controllerMemoryMiB + 3 * sized.workerMemoryMiB).toBeLessThanOrEqual(6 * 1024);
    expect(sized.controllerMemoryMiB).toBeGreaterThanOrEqual(MIN_CONTROLLER_MEMORY_MIB);
    expect(sized.warnings).toEqual([]);
    const tiny = sizeVms(5, { cpus: 1, memoryMiB: 4 * 1024 });
    expect([tiny.controllerMemoryMiB, tiny.workerMemoryMiB]).toEqual([MIN_CONTROLLER_MEMORY_MIB, MIN_WORKER_MEMORY_MIB]);
    expect(tiny.warnings.length).toBe(2);
    expect(tiny.warnings[1]).toMatch(/^the VMs take 6144 MiB together, more than 75% of this host's 4096 MiB/);
  });

  test("what the user asked for wins, and is warned about the same", () => {
    const sized = sizeVms(3, twoCores, { cpus: 2, memoryMiB: 1024 });
    expect([sized.controllerCpus, sized.workerCpus, sized.controllerMemoryMiB, sized.workerMemoryMiB]).toEqual([2, 2, 1024, 1024]);
    expect(sized.summary).toStartWith("each VM gets 2 vCPUs (as asked (--cpus))");
    expect(sized.warnings[0]).toStartWith("3 VMs with 2 vCPUs each on 2 host cores: 6 vCPUs share them (3.0×)");
  });

  test("a node count that is not a positive whole number is refused", () => {
    expect(() => sizeVms(0, twoCores)).toThrow(RangeError);
  });
});
