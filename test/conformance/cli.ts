// `bun run conformance`: Kubernetes's own [Conformance] tests against a
// launched nodecore cluster (`bun run cluster --name NAME`, left running).
//
//   bun run conformance [--cluster NAME] [--mode quick|full] [--focus RE] [--skip RE]
//                       [--parallel N] [--resume] [--list-images]
//
//   build (or find cached) e2e.test, agnhost and nnp ─▶ the images the suite
//   lists, made here, pushed to the launcher's registry, and the big ones
//   imported onto every worker (images.ts) ─▶ the tests to run and their lanes (plan.ts) ─▶
//   e2e.test processes inside the cluster's network namespace, as the
//   owner (its kubeconfig), their progress shown ─▶ out/conformance/<run>/
//   junit-<stamp>-<lane>.xml, e2e-<lane>.log, summary.txt ─▶ `ctl cluster
//   health` afterwards
//
// quick is the fixed list in quick.ts; full is every [Conformance] test.
// --focus and --skip narrow either (JavaScript regular expressions over the
// tests' names). --parallel runs the tests not marked [Serial] in N
// e2e.test processes at once, then the [Serial] ones alone. --resume keeps
// the reports already in the run's directory and runs only the tests they
// did not settle (an interrupted test runs again); without it a run starts
// afresh. Exits 0 when every test passed and the cluster is healthy after.

import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { REPO_ROOT } from "../../image/mod.ts";
import { checkImageBundle } from "../../internal/containerd/mod.ts";
import { readBusybox, HOST_BUSYBOX } from "../../image/oci.ts";
import { buildComponent, component } from "../../image/upstream/mod.ts";
import { goEnv } from "../../image/upstream/go.ts";
import { run } from "../../image/exec.ts";
import { runHostCommand } from "../launch/host_command.ts";
import { NETNS_DIR, namespaceName } from "../launch/network_namespace.ts";
import { CTL_BINARY, KUBECTL_BINARY } from "../launch/ctl_wrapper.ts";
import { CLUSTER_REGISTRY_USER, pushToRegistry } from "../launch/registry.ts";
import {
  AGNHOST_HOST_TOOLS,
  DIG_PACKAGES,
  digTools,
  GLIBC_DNS_HOST_TOOLS,
  PRELOADED_SOURCES,
  conformanceImage,
  hostToolsLayer,
  imageOnHost,
  imagePlan,
  NGINX_DEBIAN_PACKAGE,
  nginxTools,
  parseImageList,
  repoListYaml,
  unpackDebianPackage,
} from "./images.ts";
import { lanes, mergeResults, reportFiles, reportName, runStamp, selectTests, settled } from "./plan.ts";
import { QUICK_TESTS, focusOf } from "./quick.ts";
import { parseJunit, summaryText } from "./summary.ts";

const { values } = parseArgs({
  options: {
    cluster: { type: "string", default: "dev" },
    mode: { type: "string", default: "quick" },
    focus: { type: "string" },
    skip: { type: "string" },
    parallel: { type: "string", default: "1" },
    resume: { type: "boolean", default: false },
    "list-images": { type: "boolean", default: false },
  },
  strict: true,
});

function fail(message: string): never {
  console.error(`conformance: ${message}`);
  process.exit(2);
}

const started = performance.now();
const elapsed = () => `${((performance.now() - started) / 1000).toFixed(0)} s`;
const say = (line: string) => console.log(`conformance [${elapsed()}] ${line}`);

if (values.mode !== "quick" && values.mode !== "full") fail(`--mode is quick or full, not '${values.mode}'`);
const parallel = Number(values.parallel);
if (!/^\d+$/.test(values.parallel) || parallel < 1 || parallel > 16) fail(`--parallel is a whole number from 1 to 16, not '${values.parallel}'`);
for (const flag of ["focus", "skip"] as const) {
  const re = values[flag];
  if (re === undefined) continue;
  try {
    new RegExp(re);
  } catch (err) {
    fail(`--${flag} is not a regular expression: ${(err as Error).message}`);
  }
}

// The cluster, as the launcher left it.
const clusterDir = join(REPO_ROOT, "out", "cluster", values.cluster);
const namespace = namespaceName(values.cluster);
if (!existsSync(join(NETNS_DIR, namespace))) fail(`cluster ${values.cluster} is not running (no network namespace ${namespace}); launch it with: bun run cluster --name ${values.cluster}`);
const kubeconfig = join(clusterDir, "kubeconfig");
if (!existsSync(kubeconfig)) fail(`cluster ${values.cluster} has no owner kubeconfig (${kubeconfig}): its Kubernetes has not started yet`);
const registryDir = join(clusterDir, "registry");
const registryConfig = join(registryDir, "registry.yml");
if (!existsSync(registryConfig)) fail(`cluster ${values.cluster} has no registry (${registryConfig}): launch it with the launcher, which starts one`);
const registryHost = /^\s*addr:\s*(\S+)\s*$/m.exec(readFileSync(registryConfig, "utf8"))?.[1];
if (!registryHost) fail(`${registryConfig} names no address`);
const inNamespace = (argv: string[]) => ["ip", "netns", "exec", namespace, ...argv];

// The suite.
say(`building (or finding) the conformance suite of Kubernetes ${component("conformance").version}`);
const suite = await buildComponent(component("conformance"), (line) => say(line)).catch((err: Error) => fail(err.message));
const e2eTest = join(suite.dir, "e2e.test");
say(suite.built ? `built the suite in ${suite.seconds.toFixed(0)} s: ${suite.dir}` : `the suite is cached: ${suite.dir}`);

const runDir = join(REPO_ROOT, "out", "conformance", `${values.cluster}-${values.mode}`);
mkdirSync(runDir, { recursive: true });
const repoList = join(runDir, "repo-list.yaml");
writeFileSync(repoList, repoListYaml(registryHost));
const suiteEnv = { ...process.env, KUBE_TEST_REPO_LIST: repoList } as Record<string, string>;

// The quick list must name tests the suite has: a renamed test would
// otherwise drop out of the run without a word.
const conformanceList = Bun.spawnSync([e2eTest, "--list-conformance-tests"], { stdout: "pipe", stderr: "pipe" });
if (conformanceList.exitCode !== 0) fail(`e2e.test --list-conformance-tests exited with ${conformanceList.exitCode}`);
const codenames = new Set((Bun.YAML.parse(conformanceList.stdout.toString()) as { codename: string }[]).map((t) => t.codename));
const unknown = QUICK_TESTS.filter((name) => !codenames.has(name));
if (unknown.length > 0) fail(`the quick list (test/conformance/quick.ts) names ${unknown.length} test(s) this suite does not have: ${unknown.join("; ")}`);
say(`the suite has ${codenames.size} [Conformance] tests`);

// The images.
const lister = Bun.spawn([e2eTest, "--list-images"], { env: suiteEnv, stdout: "pipe", stderr: "pipe" });
const [listed, listErrors] = await Promise.all([new Response(lister.stdout).text(), new Response(lister.stderr).text(), lister.exited]);
if (lister.exitCode !== 0) fail(`e2e.test --list-images exited with ${lister.exitCode}: ${listErrors.trim().split("\n").at(-1)}`);
const refs = parseImageList(listed);
const names = refs.map((ref) => imageOnHost(ref, registryHost));
const elsewhere = refs.filter((_, i) => names[i] === undefined);
const plan = imagePlan(names.filter((n) => n !== undefined));
const missing = [...plan.missing.map((m) => m.ref), ...elsewhere];
if (values["list-images"]) {
  for (const m of plan.made) console.log(`made here  ${m.ref}  (${m.source})`);
  for (const m of missing) console.log(`missing    ${m}`);
  process.exit(0);
}
say(`the suite lists ${refs.length} images: ${plan.made.length} made here, ${missing.length} not (the tests that need those fail, and the summary names them)`);
let tools;
let nginx;
let dnsTools;
try {
  // Debian's packages, fetched from the archive once and kept beside the runs.
  const debs = join(REPO_ROOT, "out", "conformance", "debs");
  const dig = digTools(DIG_PACKAGES.map((name) => unpackDebianPackage(name, debs)));
  tools = hostToolsLayer([...AGNHOST_HOST_TOOLS, ...dig]);
  dnsTools = hostToolsLayer([...GLIBC_DNS_HOST_TOOLS, ...dig]);
  if (plan.made.some((m) => m.source === "nginx")) nginx = hostToolsLayer(nginxTools(unpackDebianPackage(NGINX_DEBIAN_PACKAGE, debs)));
} catch (err) {
  fail((err as Error).message);
}
// The Kubernetes module's source, where the suite's build left it: nautilus's and kitten's pages.
// image/exec.ts's run, as the build runs go: this process's environment with goEnv's.
const modcache = await run(["go", "env", "GOMODCACHE"], { env: goEnv() }).catch((err: Error) => fail(`go env GOMODCACHE: ${err.message}`));
const moduleDir = join(modcache.stdout.trim(), `k8s.io/kubernetes@${component("conformance").version}`);
const binaries = {
  agnhost: readFileSync(join(suite.dir, "agnhost")),
  nnp: readFileSync(join(suite.dir, "nnp")),
  busybox: readBusybox(HOST_BUSYBOX),
  pause: readFileSync(join(REPO_ROOT, "out", "pause")),
  tools,
  nginx,
  dnsTools,
  moduleDir,
};
const registry = { dir: registryDir, host: registryHost, username: CLUSTER_REGISTRY_USER, password: readFileSync(join(registryDir, "password"), "utf8").trim() };
const ctl = (...args: string[]) => runHostCommand(inNamespace([CTL_BINARY, "--config", join(clusterDir, "owner"), ...args]), { okExitCodes: [0, 1, 2, 3] });
for (const image of plan.made) {
  const tarball = join(runDir, `${image.repository.replaceAll("/", "_")}_${image.tag}.oci.tar`);
  writeFileSync(tarball, conformanceImage(image.source, [image.ref], binaries));
  await pushToRegistry(registry, tarball, `${image.repository}:${image.tag}`, (argv) => runHostCommand(inNamespace(argv))).catch((err: Error) =>
    fail(`pushing ${image.ref}: ${err.message.split("\n")[0]}`),
  );
  say(`pushed ${image.ref}`);
}
// Also onto every worker, as an operator preloads an air-gapped cluster
// (ctl image import): pulled by the first test that needs it, a 20 MiB
// layer took over 5 min to unpack under emulation, and that test's pod
// start timed out. One bundle per source names all its tags (agnhost's
// two are one image), and a worker that holds them all already, the same
// image by digest, is left be.
const holding = await ctl("image", "list", "--json");
if (holding.exitCode !== 0) fail(`ctl image list: ${holding.stderr.trim().split("\n")[0]}`);
const held = (JSON.parse(holding.stdout) as { node: string; images: { name: string; digest: string }[] }[]).map((l) => ({
  node: l.node,
  digests: new Map(l.images.map((i) => [i.name, i.digest])),
}));
for (const source of [...new Set(plan.made.map((m) => m.source))].filter((source) => PRELOADED_SOURCES.has(source))) {
  const refs = plan.made.filter((m) => m.source === source).map((m) => m.ref);
  const bundle = join(runDir, `import-${source}.oci.tar`);
  writeFileSync(bundle, conformanceImage(source, refs, binaries));
  // The digests ctl image list will show for it: checked as ctl and the node check it.
  const wanted = (await checkImageBundle(bundle)).digests!;
  const lacking = held.filter((h) => refs.some((ref) => h.digests.get(ref) !== wanted.get(ref))).map((h) => h.node);
  if (lacking.length === 0) {
    say(`every worker holds ${refs.join(", ")} already`);
    continue;
  }
  const importing = performance.now();
  const imported = await ctl("image", "import", bundle, ...lacking.flatMap((node) => ["--node", node]));
  if (imported.exitCode !== 0) fail(`ctl image import ${refs.join(", ")}: ${imported.stderr.trim().split("\n").at(-1)}`);
  say(`imported ${refs.join(", ")} onto ${lacking.length} worker${lacking.length === 1 ? "" : "s"} in ${((performance.now() - importing) / 1000).toFixed(0)} s`);
}

// What runs, and where (plan.ts).
const allNames = values.mode === "quick" ? [...QUICK_TESTS] : [...codenames];
const existing = reportFiles(readdirSync(runDir));
if (!values.resume) for (const f of existing) rmSync(join(runDir, f));
const earlier = values.resume ? existing.map((f) => parseJunit(readFileSync(join(runDir, f), "utf8"))) : [];
const selection = {
  ...(values.focus === undefined ? {} : { focus: new RegExp(values.focus) }),
  ...(values.skip === undefined ? {} : { skip: new RegExp(values.skip) }),
};
const selected = selectTests(allNames, selection);
if (selected.length === 0) fail(`--focus and --skip leave none of the ${values.mode} mode's ${allNames.length} tests`);
const toRun = selectTests(selected, { done: settled(mergeResults(earlier)) });
if (values.resume)
  say(`resuming: ${existing.length} earlier report${existing.length === 1 ? "" : "s"} settled ${selected.length - toRun.length} of the ${selected.length} tests; ${toRun.length} to run`);
const { parallel: laneTests, serial } = lanes(toRun, parallel);
const stamp = runStamp(new Date());

let done = 0;
let failedSoFar = 0;
/** One e2e.test process over exactly `tests`, with its own report and log. */
async function runLane(lane: string, tests: readonly string[]): Promise<void> {
  const junit = join(runDir, reportName(stamp, lane));
  const logFile = join(runDir, `e2e-${lane}.log`);
  const argv = [
    e2eTest,
    `--kubeconfig=${kubeconfig}`,
    "--provider=skeleton",
    `--ginkgo.focus=${focusOf(tests)}`,
    `--ginkgo.junit-report=${junit}`,
    "--ginkgo.no-color",
    "--ginkgo.v",
    // The suite's own bound is an hour; a full run on emulated VMs is longer.
    "--ginkgo.timeout=24h",
    `--kubectl-path=${KUBECTL_BINARY}`,
  ];
  say(`lane ${lane}: ${tests.length} test${tests.length === 1 ? "" : "s"}; e2e.test's output: ${logFile}`);
  const child = Bun.spawn(inNamespace(argv), { env: suiteEnv, stdout: "pipe", stderr: "pipe" });
  const log = Bun.file(logFile).writer();
  const follow = async (stream: ReadableStream<Uint8Array>) => {
    let rest = "";
    for await (const chunk of stream) {
      log.write(chunk);
      rest += new TextDecoder().decode(chunk);
      const lines = rest.split("\n");
      rest = lines.pop()!;
      for (const line of lines) {
        // ginkgo -v ends each spec with a line that starts with its mark.
        if (/^• \[[\d.]+ seconds\]/.test(line) || /^• \[FAILED\]/.test(line) || /^S \[SKIPPED\]/.test(line)) {
          done++;
          if (line.includes("FAILED")) failedSoFar++;
          say(`${done} of ${toRun.length} tests done, ${failedSoFar} failed (lane ${lane})`);
        }
      }
    }
  };
  await Promise.all([follow(child.stdout), follow(child.stderr), child.exited]);
  await log.end();
  if (!existsSync(junit)) say(`lane ${lane}: e2e.test wrote no report (exit ${child.exitCode}); see ${logFile}`);
}

say(`running ${toRun.length} of the ${values.mode} mode's tests: ${laneTests.length} lane${laneTests.length === 1 ? "" : "s"} at once${serial.length ? `, then ${serial.length} [Serial] alone` : ""}`);
await Promise.all(laneTests.map((tests, i) => runLane(String(i + 1), tests)));
if (serial.length > 0) await runLane("serial", serial);

// Every report of the run's directory: this run's, and those it resumed.
const reports = reportFiles(readdirSync(runDir)).map((f) => parseJunit(readFileSync(join(runDir, f), "utf8")));
const results = mergeResults(reports).filter((r) => selected.includes(r.name));
const wall = (performance.now() - started) / 1000;
const title = `nodecore conformance, ${values.mode}, cluster ${values.cluster}, Kubernetes ${component("conformance").version}, --parallel ${parallel}, ${new Date().toISOString()}`;
const summary = summaryText(results, { title, wallSeconds: wall, missingImages: missing });
writeFileSync(join(runDir, "summary.txt"), summary);
process.stdout.write(summary);
if (results.length === 0) fail(`e2e.test reported no tests; see the e2e-*.log files in ${runDir}`);
const unreported = selected.filter((name) => !results.some((r) => r.name === name));
if (unreported.length > 0) say(`${unreported.length} selected test${unreported.length === 1 ? " was" : "s were"} not reported (a lane that ended early): run again with --resume`);

// No test may leave the cluster unhealthy.
const health = await ctl("cluster", "health");
say(`ctl cluster health after the run (exit ${health.exitCode}):\n${health.stdout.trim()}${health.stderr.trim() ? `\n${health.stderr.trim()}` : ""}`);
process.exit(results.some((r) => r.state === "failed" || r.state === "interrupted") || unreported.length > 0 || health.exitCode !== 0 ? 1 : 0);
