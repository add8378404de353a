// The conformance runner's pure parts: the registry list that moves the
// suite's images, the plan of which images are made here, the images
// themselves, the run's plan (selection, lanes, resuming), the JUnit
// reading and the summary.

import { describe, expect, test } from "bun:test";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { checkImageBundle } from "../../internal/containerd/mod.ts";
import { tempDir } from "../../internal/testing/mod.ts";
import { conformanceImage, hostToolsLayer, imageOnHost, imagePlan, lddPaths, parseImageList, PRELOADED_SOURCES, repoListYaml, REGISTRY_KEYS } from "./images.ts";
import { focusOf, QUICK_TESTS } from "./quick.ts";
import { lanes, mergeResults, reportFiles, reportName, runStamp, selectTests, settled } from "./plan.ts";
import { parseJunit, summaryText } from "./summary.ts";

const HOST = "10.77.0.1:5000";

describe("images", () => {
  test("the registry list moves every registry the suite knows under the launcher's host", () => {
    const yaml = repoListYaml(HOST);
    expect(yaml.split("\n")).toEqual([...Object.entries(REGISTRY_KEYS).map(([key, path]) => `${key}: ${HOST}/${path}`), ""]);
    expect(yaml).toContain(`e2eRegistry: ${HOST}/e2e-test-images\n`);
  });

  test("the listed images are read one a line, deduplicated, and split into repository and tag on the host", () => {
    const refs = parseImageList(`${HOST}/e2e-test-images/agnhost:2.56\n\nI1201 some log line\n${HOST}/e2e-test-images/agnhost:2.56\n${HOST}/k8s/pause:3.10.1\nregistry.k8s.io/other:1\n`);
    expect(refs).toEqual([`${HOST}/e2e-test-images/agnhost:2.56`, `${HOST}/k8s/pause:3.10.1`, "registry.k8s.io/other:1"]);
    expect(imageOnHost(refs[0]!, HOST)).toEqual({ ref: refs[0]!, repository: "e2e-test-images/agnhost", tag: "2.56" });
    expect(imageOnHost("registry.k8s.io/other:1", HOST)).toBeUndefined();
    expect(imageOnHost(`${HOST}/x@sha256:abc`, HOST)).toBeUndefined();
  });

  test("agnhost, busybox, pause and nginx are made here; the private and invalid registries' and every other image are named as missing", () => {
    const names = [
      `${HOST}/e2e-test-images/agnhost:2.56`,
      `${HOST}/e2e-test-images/busybox:1.37.0-1`,
      `${HOST}/k8s/pause:3.10.1`,
      `${HOST}/private/agnhost:2.6`,
      `${HOST}/invalid/busybox:1`,
      `${HOST}/e2e-test-images/httpd:2.4.38-4`,
      `${HOST}/e2e-test-images/nginx:1.27.0-2`,
      `${HOST}/e2e-test-images/nautilus:1.9.0`,
      `${HOST}/e2e-test-images/kitten:1.9`,
      `${HOST}/e2e-test-images/nonewprivs:1.4`,
    ].map((r) => imageOnHost(r, HOST)!);
    const plan = imagePlan(names);
    expect(plan.made.map((m) => [m.repository, m.source])).toEqual([
      ["e2e-test-images/agnhost", "agnhost"],
      ["e2e-test-images/busybox", "busybox"],
      ["k8s/pause", "pause"],
      ["e2e-test-images/nginx", "nginx"],
      ["e2e-test-images/nautilus", "nautilus"],
      ["e2e-test-images/kitten", "kitten"],
      ["e2e-test-images/nonewprivs", "nonewprivs"],
    ]);
    // Those built on another's layers are pulled, not preloaded.
    expect(plan.made.filter((m) => PRELOADED_SOURCES.has(m.source)).map((m) => m.source)).toEqual(["agnhost", "busybox", "pause", "nginx"]);
    expect(plan.missing.map((m) => m.repository)).toEqual(["private/agnhost", "invalid/busybox", "e2e-test-images/httpd"]);
  });

  test("the agnhost image runs /agnhost with pause as its default, over busybox's shell; one bundle names every tag, its layers once", async () => {
    const binaries = { agnhost: new Uint8Array(100_000).fill(7), busybox: new Uint8Array([4, 5]), pause: new Uint8Array([6]) };
    const tar = conformanceImage("agnhost", [`${HOST}/e2e-test-images/agnhost:2.56`, `${HOST}/e2e-test-images/agnhost:2.66.1`], binaries);
    const text = new TextDecoder("latin1").decode(tar);
    expect(text).toContain('"Entrypoint":["/agnhost"]');
    expect(text).toContain('"Cmd":["pause"]');
    expect(text).toContain("bin/sh");
    // What the tests rely on besides the binary: /agnhost-2 (the command-override test), the image's own user and group.
    expect(text).toMatch(/agnhost-2\0[^]*agnhost\0/);
    expect(text).toContain("user-defined-in-image:x:1000:1000:");
    expect(text).toContain("group-defined-in-image:x:50000:user-defined-in-image");
    expect(text).toContain(`"io.containerd.image.name":"${HOST}/e2e-test-images/agnhost:2.56"`);
    expect(text).toContain(`"io.containerd.image.name":"${HOST}/e2e-test-images/agnhost:2.66.1"`);
    // Both names point at the one manifest, as ctl image list will show it.
    using dir = tempDir();
    writeFileSync(join(dir.path, "agnhost.tar"), tar);
    const digests = (await checkImageBundle(join(dir.path, "agnhost.tar"))).digests!;
    expect([...digests.keys()]).toEqual([`${HOST}/e2e-test-images/agnhost:2.56`, `${HOST}/e2e-test-images/agnhost:2.66.1`]);
    expect(new Set(digests.values()).size).toBe(1);
    expect([...digests.values()][0]).toMatch(/^sha256:[0-9a-f]{64}$/);
    // The second tag costs an index entry, not a second copy of agnhost.
    expect(tar.length - conformanceImage("agnhost", [`${HOST}/e2e-test-images/agnhost:2.56`], binaries).length).toBeLessThan(2048);
  });
});

describe("images built on others' layers", () => {
  /** The layer digests an OCI tarball's manifest names, in order. */
  const layersOf = (tar: Uint8Array) => {
    const text = new TextDecoder("latin1").decode(tar);
    const manifest = /\{"schemaVersion":2,"mediaType":"application\/vnd\.oci\.image\.manifest\.v1\+json".*?"layers":(\[.*?\])/.exec(text)![1]!;
    return (JSON.parse(manifest) as { digest: string }[]).map((l) => l.digest);
  };
  const binaries = { agnhost: new Uint8Array(50_000).fill(7), busybox: new Uint8Array([4, 5]), pause: new Uint8Array([6]), nnp: new Uint8Array([8, 9]) };

  test("nautilus and kitten are agnhost's very layers and their page, served by agnhost's test-webserver; refused without the module's source", () => {
    using dir = tempDir();
    const html = join(dir.path, "test", "images", "nautilus", "html");
    mkdirSync(html, { recursive: true });
    writeFileSync(join(html, "nautilus.jpg"), "JPEG");
    writeFileSync(join(html, "data.json"), '{"image": "nautilus.jpg"}');
    const agnhost = conformanceImage("agnhost", [`${HOST}/e2e-test-images/agnhost:2.56`], binaries);
    const nautilus = conformanceImage("nautilus", [`${HOST}/e2e-test-images/nautilus:1.9.0`], { ...binaries, moduleDir: dir.path });
    const [base, extra] = [layersOf(agnhost), layersOf(nautilus)];
    expect(extra).toHaveLength(base.length + 1);
    expect(extra.slice(0, base.length)).toEqual(base);
    const text = new TextDecoder("latin1").decode(nautilus);
    expect(text).toContain('"Entrypoint":["/agnhost"]');
    expect(text).toContain('"Cmd":["test-webserver"]');
    expect(text).toMatch(/nautilus\.jpg\0[^]*JPEG/);
    expect(() => conformanceImage("kitten", [`${HOST}/e2e-test-images/kitten:1.9`], { ...binaries, moduleDir: dir.path })).toThrow(/kitten\.jpg is missing/);
    expect(() => conformanceImage("nautilus", [`${HOST}/e2e-test-images/nautilus:1.9.0`], binaries)).toThrow(/module's source/);
  });

  test("glibc-dns-testing: agnhost's busybox layer and the DNS tools, dash its sh; refused without them", () => {
    const dnsTools = [{ kind: "file" as const, path: "usr/bin/dig", mode: 0o755, contents: new Uint8Array([1]) }];
    const agnhost = conformanceImage("agnhost", [`${HOST}/e2e-test-images/agnhost:2.56`], binaries);
    const dns = conformanceImage("glibc-dns-testing", [`${HOST}/e2e-test-images/glibc-dns-testing:2.1.1`], { ...binaries, dnsTools });
    expect(layersOf(dns)[0]).toBe(layersOf(agnhost)[0]!);
    const text = new TextDecoder("latin1").decode(dns);
    expect(text).toContain("usr/bin/dig");
    expect(text).not.toMatch(/bin\/sh\0[^]{0,150}busybox/);
    expect(() => conformanceImage("glibc-dns-testing", [`${HOST}/e2e-test-images/glibc-dns-testing:2.1.1`], binaries)).toThrow(/dig, getent, sh/);
  });

  test("nonewprivs: busybox's layer and nnp, setuid root, its command", () => {
    const busybox = conformanceImage("busybox", [`${HOST}/e2e-test-images/busybox:1.37.0-1`], binaries);
    const nonewprivs = conformanceImage("nonewprivs", [`${HOST}/e2e-test-images/nonewprivs:1.4`], binaries);
    expect(layersOf(nonewprivs)[0]).toBe(layersOf(busybox)[0]!);
    const text = new TextDecoder("latin1").decode(nonewprivs);
    expect(text).toContain('"Cmd":["nnp"]');
    // The tar header's mode field: 0004755.
    expect(text).toMatch(/usr\/local\/bin\/nnp\0+0004755\0/);
    expect(() => conformanceImage("nonewprivs", [`${HOST}/e2e-test-images/nonewprivs:1.4`], { ...binaries, nnp: undefined })).toThrow(/nnp/);
  });
});

describe("the nginx image", () => {
  test("Debian's nginx in the foreground on port 80, its workers as the image's nginx user, logging to the container's output; refused without nginx's files", () => {
    const nginx = [{ kind: "file" as const, path: "usr/sbin/nginx", mode: 0o755, contents: new Uint8Array([1, 2, 3]) }];
    const binaries = { agnhost: new Uint8Array([1]), busybox: new Uint8Array([4, 5]), pause: new Uint8Array([6]), nginx };
    const text = new TextDecoder("latin1").decode(conformanceImage("nginx", [`${HOST}/e2e-test-images/nginx:1.27.0-2`], binaries));
    expect(text).toContain('"Cmd":["nginx","-g","daemon off;"]');
    expect(text).toContain("usr/sbin/nginx");
    expect(text).toMatch(/listen 80;/);
    expect(text).toMatch(/user nginx;/);
    expect(text).toContain("nginx:x:101:101:");
    expect(text).toContain("error_log /dev/stderr");
    expect(text).toContain("access_log /dev/stdout;");
    // The temp directories Debian's build names (nginx -V) and the page.
    expect(text).toContain("var/lib/nginx");
    expect(text).toContain("usr/share/nginx/html/index.html");
    expect(() => conformanceImage("nginx", [`${HOST}/e2e-test-images/nginx:1.27.0-2`], { ...binaries, nginx: undefined })).toThrow(/nginx's files/);
  });
});

describe("host tools in agnhost's image", () => {
  test("a library ldd cannot find is an error naming it, not a tool left without it", () => {
    expect(() => lddPaths("\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x1)\n\tliblmdb.so.0 => not found\n")).toThrow("ldd finds no liblmdb.so.0");
  });

  test("an unpacked package's libraries are looked for first and go where the package puts them; the host's stay at theirs", () => {
    using dir = tempDir();
    const [tool, root] = [join(dir.path, "bind9-dnsutils"), join(dir.path, "bind9-libs")];
    mkdirSync(join(tool, "usr/bin"), { recursive: true });
    writeFileSync(join(tool, "usr/bin/dig"), "");
    const asked: string[][] = [];
    const layer = hostToolsLayer([{ path: join(tool, "usr/bin/dig"), debianPackage: "bind9-dnsutils", as: "/usr/bin/dig", libraryRoots: [tool, root] }], {
      read: (path) => new TextEncoder().encode(path),
      ldd: (_path, libraryPath) => {
        asked.push([...libraryPath]);
        return `\tlibdns.so => ${root}/usr/lib/x86_64-linux-gnu/libdns.so (0x1)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x2)\n\t/lib64/ld-linux-x86-64.so.2 (0x3)\n`;
      },
    });
    expect(asked[0]).toContain(`${root}/usr/lib/x86_64-linux-gnu`);
    const files = new Map(layer.filter((e) => e.kind === "file").map((e) => [e.path, new TextDecoder().decode(e.contents)]));
    expect(files.get("usr/bin/dig")).toBe(join(tool, "usr/bin/dig"));
    expect(files.get("usr/lib/x86_64-linux-gnu/libdns.so")).toBe(`${root}/usr/lib/x86_64-linux-gnu/libdns.so`);
    expect(files.get("lib/x86_64-linux-gnu/libc.so.6")).toBe("/lib/x86_64-linux-gnu/libc.so.6");
    expect([...files.keys()].some((f) => f.includes(dir.path.slice(1)))).toBe(false);
  });

  test("ldd's output gives the libraries' paths and the loader, not the vDSO", () => {
    const output = `\tlinux-vdso.so.1 (0x00007ffd)\n\tlibcurl.so.4 => /lib/x86_64-linux-gnu/libcurl.so.4 (0x00007f01)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f02)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f03)\n`;
    expect(lddPaths(output)).toEqual(["/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libcurl.so.4", "/lib64/ld-linux-x86-64.so.2"]);
  });

  test("a real host binary comes with every library it loads, at its own path, and its directories", () => {
    // /bin/ls is dynamic on every Debian host; curl on one set up by test/setup.sh.
    const layer = hostToolsLayer([{ path: "/bin/ls", debianPackage: "coreutils" }]);
    const files = layer.filter((e) => e.kind === "file").map((e) => e.path);
    expect(files).toContain("bin/ls");
    expect(files.some((f) => /^lib(64)?\/.*ld-linux-x86-64\.so\.2$/.test(f))).toBe(true);
    expect(files.some((f) => /libc\.so\.6$/.test(f))).toBe(true);
    for (const file of files) expect(layer.some((e) => e.kind === "dir" && file.startsWith(`${e.path}/`))).toBe(true);
    // A tool may sit elsewhere in the image than on the host.
    expect(hostToolsLayer([{ path: "/bin/ls", debianPackage: "coreutils", as: "/usr/bin/list" }]).some((e) => e.kind === "file" && e.path === "usr/bin/list")).toBe(true);
    expect(() => hostToolsLayer([{ path: "/usr/bin/no-such-tool", debianPackage: "nothing" }])).toThrow("/usr/bin/no-such-tool is missing on this host: install Debian's nothing (test/setup.sh does)");
  });
});

describe("the quick list", () => {
  test("has about twenty distinct [Conformance] tests, and its focus matches each name exactly", () => {
    expect(QUICK_TESTS.length).toBeGreaterThanOrEqual(18);
    expect(new Set(QUICK_TESTS).size).toBe(QUICK_TESTS.length);
    const focus = new RegExp(focusOf(QUICK_TESTS));
    for (const name of QUICK_TESTS) {
      expect(name).toContain("[Conformance]");
      expect(focus.test(name)).toBe(true);
      expect(focus.test(` ${name}`)).toBe(true);
      expect(focus.test(`${name} and more`)).toBe(false);
      expect(focus.test(`x${name}`)).toBe(false);
    }
  });
});

describe("results", () => {
  const xml = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="4" disabled="0" errors="0" failures="1" time="12.5">
  <testsuite name="Kubernetes e2e suite" tests="4">
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="1.2"></testcase>
    <testcase name="[It] [sig-node] Pods should be submitted and removed [Conformance] [NodeConformance] [sig-node, NodeConformance, Conformance]" classname="Kubernetes e2e suite" status="passed" time="8.5"></testcase>
    <testcase name="[It] [sig-node] Not selected [sig-node]" classname="Kubernetes e2e suite" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
    <testcase name="[It] [sig-network] DNS should provide DNS for the cluster [Conformance] [sig-network, Conformance]" classname="Kubernetes e2e suite" status="failed" time="3.0">
      <failure message="timed out &quot;waiting&quot;" type="failed">[FAILED] timed out waiting for &lt;dns&gt;
line 2
line 3
line 4
line 5
line 6</failure>
    </testcase>
    <testcase name="[It] [sig-node] Stopped [Conformance] [sig-node, Conformance]" classname="Kubernetes e2e suite" status="interrupted" time="4.0"><failure message="interrupted" type="interrupted">[INTERRUPTED] Interrupted by User</failure></testcase>
    <testcase name="[It] [sig-apps] Something [Conformance] [sig-apps, Conformance]" classname="Kubernetes e2e suite" status="skipped" time="0.1"><skipped message="skipped - no second node"></skipped></testcase>
  </testsuite>
</testsuites>`;

  test("the specs are read with their state, time and a failure's first five lines; the suite's own nodes and the specs left out are not tests", () => {
    const results = parseJunit(xml);
    expect(results.map((r) => [r.name, r.state, r.seconds])).toEqual([
      ["[sig-node] Pods should be submitted and removed [Conformance] [NodeConformance]", "passed", 8.5],
      ["[sig-network] DNS should provide DNS for the cluster [Conformance]", "failed", 3],
      ["[sig-node] Stopped [Conformance]", "interrupted", 4],
      ["[sig-apps] Something [Conformance]", "skipped", 0.1],
    ]);
    expect(results[1]!.failure).toBe("[FAILED] timed out waiting for <dns>\nline 2\nline 3\nline 4\nline 5");
  });

  test("the summary counts, gives the rate, names the missing images and each failure", () => {
    const text = summaryText(parseJunit(xml), { title: "t", wallSeconds: 120, missingImages: ["a:1"] });
    expect(text).toContain("passed 1, failed 1, skipped 1, interrupted 1 (of 4)");
    expect(text).toContain("wall time 2.0 min; 1.00 tests per minute");
    expect(text).toContain("images not made here (1): a:1");
    expect(text).toContain("FAILED [sig-network] DNS should provide DNS for the cluster [Conformance] (3.0 s)\n    [FAILED] timed out waiting for <dns>");
  });
});

describe("the run's plan", () => {
  const names = ["[sig-a] one [Conformance]", "[sig-b] two [Serial] [Conformance]", "[sig-a] three [Conformance]", "[sig-c] four [Conformance]", "[sig-d] five [Disruptive] [Serial] [Conformance]"];

  test("--focus and --skip narrow the names, and --resume leaves out what a report settled", () => {
    expect(selectTests(names, { focus: /sig-a/ })).toEqual(["[sig-a] one [Conformance]", "[sig-a] three [Conformance]"]);
    expect(selectTests(names, { skip: /Serial/ })).toEqual(["[sig-a] one [Conformance]", "[sig-a] three [Conformance]", "[sig-c] four [Conformance]"]);
    expect(selectTests(names, { focus: /sig-a/, done: new Set(["[sig-a] one [Conformance]"]) })).toEqual(["[sig-a] three [Conformance]"]);
  });

  test("lanes deal the tests round-robin and keep the [Serial] ones apart, with no empty lane", () => {
    expect(lanes(names, 2)).toEqual({
      parallel: [["[sig-a] one [Conformance]", "[sig-c] four [Conformance]"], ["[sig-a] three [Conformance]"]],
      serial: ["[sig-b] two [Serial] [Conformance]", "[sig-d] five [Disruptive] [Serial] [Conformance]"],
    });
    expect(lanes(names, 8).parallel).toHaveLength(3);
    expect(lanes(names, 1).parallel).toEqual([["[sig-a] one [Conformance]", "[sig-a] three [Conformance]", "[sig-c] four [Conformance]"]]);
    expect(() => lanes(names, 0)).toThrow("lanes: 0, not a whole number of at least 1");
  });

  test("reports merge in order, a later result winning; an interrupted test is not settled", () => {
    const first = [
      { name: "a", state: "failed" as const, seconds: 1 },
      { name: "b", state: "interrupted" as const, seconds: 2 },
    ];
    const second = [
      { name: "b", state: "passed" as const, seconds: 3 },
      { name: "c", state: "interrupted" as const, seconds: 1 },
    ];
    expect(mergeResults([first, second]).map((r) => [r.name, r.state])).toEqual([
      ["a", "failed"],
      ["b", "passed"],
      ["c", "interrupted"],
    ]);
    expect(settled(mergeResults([first, second]))).toEqual(new Set(["a", "b"]));
  });

  test("report files are named by the run's stamp and lane and read oldest first; other files are not reports", () => {
    const stamp = runStamp(new Date("2026-12-02T02:15:07.123Z"));
    expect(stamp).toBe("20261202T021507Z");
    expect(reportName(stamp, "serial")).toBe("junit-20261202T021507Z-serial.xml");
    expect(reportFiles(["junit-20261202T021507Z-2.xml", "junit.xml", "e2e-1.log", "junit-20261201T235900Z-1.xml", "junit-20261202T021507Z-serial.xml"])).toEqual([
      "junit-20261201T235900Z-1.xml",
      "junit-20261202T021507Z-2.xml",
      "junit-20261202T021507Z-serial.xml",
    ]);
  });
});
