// Process-level tests of the network runnable against a real DHCP server.
//
//   namespace SERVER_NS                        namespace CLIENT_NS
//   dnsmasq ── SERVER_LINK 10.213.7.1/24 ═veth═ CLIENT_LINK ── netns_driver.ts
//                                                               (Network.run under a supervisor,
//                                                                prints each published address)
//
// Both ends live in namespaces this file creates, with names unique to the
// run, so nothing reaches the host's network. They are removed in afterAll,
// with every process started in them. Needs root; skipped if namespaces
// cannot be created.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { eventually, tempDir } from "../testing/mod.ts";
import type { NodeAddress } from "./mod.ts";

const DNSMASQ = "/usr/sbin/dnsmasq";
const DRIVER = join(import.meta.dir, "netns_driver.ts");
const RUN_ID = `${process.pid.toString(36)}${Math.random().toString(36).slice(2)}`.slice(0, 7);
const SERVER_NS = `nodecore-dhcps-${RUN_ID}`;
const CLIENT_NS = `nodecore-dhcpc-${RUN_ID}`;
/** Interface names are at most 15 bytes. */
const SERVER_LINK = `dhs${RUN_ID}`;
const CLIENT_LINK = `dhc${RUN_ID}`;
const SUBNET = "10.213.7";
const SERVER_ADDRESS = `${SUBNET}.1`;
const DNS_SERVER = `${SUBNET}.53`;
const FIRST_RANGE = { first: 100, last: 150 };
const SECOND_RANGE = { first: 160, last: 200 };
/** dnsmasq's shortest lease. */
const DNSMASQ_LEASE = "2m";
/** The driver's lease second in the renewal test: a 2 min lease renews every 0.6 s. */
const FAST_SECOND_MS = 10;

/** dnsmasq pings an address for a few seconds before it offers it. */
const LEASE_TIMEOUT_MS = 20_000;
const DNSMASQ_START_TIMEOUT_MS = 5_000;
const PROCESS_STOP_TIMEOUT_MS = 5_000;
const TEST_TIMEOUT_MS = 60_000;

const namespaces: string[] = [];
const processes: Subprocess[] = [];
const scratch = tempDir("nodecore-network-test-");

function run(command: string[]): { ok: boolean; stdout: string; stderr: string } {
  try {
    const result = Bun.spawnSync(command, { stdout: "pipe", stderr: "pipe" });
    return { ok: result.exitCode === 0, stdout: result.stdout.toString(), stderr: result.stderr.toString() };
  } catch (err) {
    return { ok: false, stdout: "", stderr: (err as Error).message };
  }
}

function mustRun(command: string[]): string {
  const result = run(command);
  if (!result.ok) throw new Error(`${command.join(" ")} failed: ${result.stderr.trim()}`);
  return result.stdout;
}

/** Creates the two namespaces; returns why the tests must be skipped, if they must. */
function createNamespaces(): string | undefined {
  if (process.getuid?.() !== 0) return "creating network namespaces needs root";
  for (const name of [SERVER_NS, CLIENT_NS]) {
    const result = run(["ip", "netns", "add", name]);
    if (!result.ok) {
      removeNamespaces();
      return `cannot create network namespace ${name}: ${result.stderr.trim()}`;
    }
    namespaces.push(name);
  }
  return undefined;
}

function removeNamespaces(): void {
  for (const name of namespaces.splice(0)) {
    // Anything still running in our namespace was started by this file.
    for (const pid of run(["ip", "netns", "pids", name]).stdout.split(/\s+/).filter(Boolean)) {
      try {
        process.kill(Number(pid), "SIGKILL");
      } catch {}
    }
    run(["ip", "netns", "del", name]);
  }
}

const skipReason = createNamespaces();
if (skipReason !== undefined) console.warn(`skipping network namespace tests: ${skipReason}`);

async function stopProcess(proc: Subprocess): Promise<number | null> {
  if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGTERM");
  const timer = setTimeout(() => proc.kill("SIGKILL"), PROCESS_STOP_TIMEOUT_MS);
  try {
    return await proc.exited;
  } finally {
    clearTimeout(timer);
  }
}

afterAll(async () => {
  await Promise.all(processes.splice(0).map(stopProcess));
  removeNamespaces();
  scratch[Symbol.dispose]();
});

/** Collects a stream's lines as they arrive. */
function collectLines(stream: ReadableStream<Uint8Array>, into: string[]): void {
  void (async () => {
    const decoder = new TextDecoder();
    let pending = "";
    for await (const chunk of stream) {
      pending += decoder.decode(chunk, { stream: true });
      const lines = pending.split("\n");
      pending = lines.pop()!;
      into.push(...lines);
    }
    if (pending) into.push(pending);
  })();
}

function spawnIn(namespace: string, command: string[]): { proc: Subprocess<"ignore", "pipe", "pipe">; stdout: string[]; stderr: string[] } {
  const proc = Bun.spawn(["ip", "netns", "exec", namespace, ...command], { stdin: "ignore", stdout: "pipe", stderr: "pipe" });
  processes.push(proc);
  const stdout: string[] = [];
  const stderr: string[] = [];
  collectLines(proc.stdout, stdout);
  collectLines(proc.stderr, stderr);
  return { proc, stdout, stderr };
}

let dnsmasq: Subprocess | undefined;

async function startDnsmasq(range: { first: number; last: number }, name: string): Promise<void> {
  if (dnsmasq !== undefined) await stopProcess(dnsmasq);
  const started = spawnIn(SERVER_NS, [
    DNSMASQ,
    "--no-daemon",
    "--conf-file=/dev/null",
    "--port=0",
    `--interface=${SERVER_LINK}`,
    "--bind-interfaces",
    "--dhcp-authoritative",
    `--dhcp-range=${SUBNET}.${range.first},${SUBNET}.${range.last},255.255.255.0,${DNSMASQ_LEASE}`,
    `--dhcp-option=option:router,${SERVER_ADDRESS}`,
    `--dhcp-option=option:dns-server,${DNS_SERVER}`,
    `--dhcp-leasefile=${join(scratch.path, `${name}.leases`)}`,
    `--pid-file=${join(scratch.path, `${name}.pid`)}`,
    "--log-facility=-",
    "--log-dhcp",
  ]);
  dnsmasq = started.proc;
  await eventually(() => expect(started.stderr.join("\n")).toContain("DHCP, IP range"), {
    timeoutMs: DNSMASQ_START_TIMEOUT_MS,
    what: "dnsmasq start",
  });
}

type DriverLine = { address: NodeAddress | null } | { error: string };

function startDriver(args: string[] = []) {
  const { proc, stdout, stderr } = spawnIn(CLIENT_NS, [process.execPath, DRIVER, ...args]);
  const lines = () => stdout.filter((l) => l.trim()).map((l) => JSON.parse(l) as DriverLine);
  const addresses = () => lines().flatMap((l) => ("address" in l ? [l.address] : []));
  return { proc, stderr, lines, addresses };
}

function hostPart(address: string): number {
  expect(address.startsWith(`${SUBNET}.`)).toBe(true);
  return Number(address.split(".")[3]);
}

describe.skipIf(skipReason !== undefined)("network in a network namespace", () => {
  beforeAll(async () => {
    if (!existsSync(DNSMASQ)) throw new Error(`${DNSMASQ} is missing: apt-get install -y dnsmasq-base`);
    mustRun(["ip", "-n", SERVER_NS, "link", "add", SERVER_LINK, "type", "veth", "peer", "name", CLIENT_LINK, "netns", CLIENT_NS]);
    mustRun(["ip", "-n", SERVER_NS, "addr", "add", `${SERVER_ADDRESS}/24`, "dev", SERVER_LINK]);
    mustRun(["ip", "-n", SERVER_NS, "link", "set", SERVER_LINK, "up"]);
    await startDnsmasq(FIRST_RANGE, "first");
  });

  test(
    "network names the interface and the errno when it cannot bring one up",
    async () => {
      const driver = startDriver(["--interface", "nosuch0"]);
      const line = await eventually(() => driver.lines().find((l) => "error" in l) ?? false);
      expect(line).toEqual({ error: "could not bring up nosuch0: ioctl SIOCGIFFLAGS: ENODEV (No such device)" });
      expect(await stopProcess(driver.proc)).toBe(0);
    },
    TEST_TIMEOUT_MS,
  );

  test(
    "network gets an address by DHCP and configures the interface, its default route and lo",
    async () => {
      const driver = startDriver();
      const [address] = await eventually(() => driver.addresses().length > 0 && driver.addresses(), {
        timeoutMs: LEASE_TIMEOUT_MS,
        what: "first lease",
      });
      expect(address).toMatchObject({
        interface: CLIENT_LINK, // found in /sys/class/net, not named
        prefixLength: 24,
        router: SERVER_ADDRESS,
        dnsServers: [DNS_SERVER],
        dhcpServer: SERVER_ADDRESS,
        leaseSeconds: 120,
      });
      const host = hostPart(address!.address);
      expect(host).toBeGreaterThanOrEqual(FIRST_RANGE.first);
      expect(host).toBeLessThanOrEqual(FIRST_RANGE.last);

      expect(mustRun(["ip", "-n", CLIENT_NS, "-4", "-o", "addr", "show", "dev", CLIENT_LINK])).toContain(`inet ${address!.address}/24 `);
      expect(mustRun(["ip", "-n", CLIENT_NS, "-4", "route", "show", "default"])).toContain(`default via ${SERVER_ADDRESS} dev ${CLIENT_LINK}`);
      expect(mustRun(["ip", "-n", CLIENT_NS, "-4", "-o", "addr", "show", "dev", "lo"])).toContain("inet 127.0.0.1/8 ");
      expect(mustRun(["ip", "-n", CLIENT_NS, "-o", "link", "show", "lo"])).toContain("UP");
      await eventually(() => expect(readFileSync(join(scratch.path, "first.leases"), "utf8")).toContain(address!.address));
      expect(driver.stderr.some((l) => l.includes(`waiting for DHCP lease on ${CLIENT_LINK}`))).toBe(true);
      expect(driver.stderr.some((l) => l.includes(`got address ${address!.address}/24 via DHCP from ${SERVER_ADDRESS}`))).toBe(true);

      expect(await stopProcess(driver.proc)).toBe(0);
      // Cancellation leaves the address in place.
      expect(mustRun(["ip", "-n", CLIENT_NS, "-4", "-o", "addr", "show", "dev", CLIENT_LINK])).toContain(`inet ${address!.address}/24 `);
    },
    TEST_TIMEOUT_MS,
  );

  test(
    "network renews its lease and replaces an address the server no longer grants",
    async () => {
      const driver = startDriver(["--second-ms", String(FAST_SECOND_MS)]);
      const [first] = await eventually(() => driver.addresses().length > 0 && driver.addresses(), {
        timeoutMs: LEASE_TIMEOUT_MS,
        what: "first lease",
      });
      await eventually(() => expect(driver.stderr.some((l) => l.includes(`renewed lease of ${first!.address}/24`))).toBe(true));

      // A server with another range refuses to extend the old lease.
      await startDnsmasq(SECOND_RANGE, "second");
      const second = await eventually(
        () => {
          const addresses = driver.addresses();
          const lost = addresses.indexOf(null);
          return (lost > 0 && addresses.slice(lost + 1).find((a) => a !== null)) ?? false;
        },
        { timeoutMs: LEASE_TIMEOUT_MS, what: "lease from the second server" },
      );
      const refused = `lost ${first!.address} on ${CLIENT_LINK}: server refused to extend the lease`;
      expect(driver.stderr.some((l) => l.includes(refused))).toBe(true);
      const host = hostPart(second!.address);
      expect(host).toBeGreaterThanOrEqual(SECOND_RANGE.first);
      expect(host).toBeLessThanOrEqual(SECOND_RANGE.last);

      const addresses = mustRun(["ip", "-n", CLIENT_NS, "-4", "-o", "addr", "show", "dev", CLIENT_LINK]);
      expect(addresses).toContain(`inet ${second!.address}/24 `);
      expect(addresses).not.toContain(`inet ${first!.address}/`);
      expect(mustRun(["ip", "-n", CLIENT_NS, "-4", "route", "show", "default"])).toContain(`default via ${SERVER_ADDRESS} dev ${CLIENT_LINK}`);
      expect(await stopProcess(driver.proc)).toBe(0);
    },
    TEST_TIMEOUT_MS,
  );
});
