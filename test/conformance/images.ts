// The images the conformance suite's pods run, served by the launcher's
// registry. The suite names each image by an upstream registry
// (registry.k8s.io/e2e-test-images/agnhost:2.x, ...); KUBE_TEST_REPO_LIST
// moves every registry the suite knows onto the launcher's, so that the
// names keep their path and tag:
//
//   e2e.test --list-images ─▶ registry.k8s.io/e2e-test-images/agnhost:2.x, ...
//        │                      (with KUBE_TEST_REPO_LIST set: <registry>/e2e-test-images/agnhost:2.x)
//        ▼ imagePlan
//   made here: agnhost (built from k8s.io/kubernetes/test/images/agnhost, with
//              busybox for the shell the tests exec), busybox, pause, nginx
//              (Debian's, from its package)
//   missing:   every other image, named with the tests that need it
//        ▼ pushImages (skopeo, the registry's CA and login)
//   <registry>/e2e-test-images/agnhost:2.x ...
//
// The nodes pull them with the login the launcher gave the cluster
// (`ctl cluster registry set`), as they pull a user's image.

import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { busyboxLayer, ociImage, pauseImage, type TarEntry } from "../../image/oci.ts";

/** The keys of the suite's registry list (test/utils/image/manifest.go's RegistryList) and the path each gets on the launcher's registry. */
export const REGISTRY_KEYS = {
  gcAuthenticatedRegistry: "authenticated",
  e2eRegistry: "e2e-test-images",
  promoterE2eRegistry: "e2e-test-images",
  buildImageRegistry: "build-image",
  invalidRegistry: "invalid",
  gcEtcdRegistry: "k8s",
  gcRegistry: "k8s",
  sigStorageRegistry: "sig-storage",
  privateRegistry: "private",
  microsoftRegistry: "microsoft",
  dockerLibraryRegistry: "library",
} as const;

/** KUBE_TEST_REPO_LIST's file: every registry the suite knows, moved under `host`. */
export function repoListYaml(host: string): string {
  return Object.entries(REGISTRY_KEYS)
    .map(([key, path]) => `${key}: ${host}/${path}`)
    .join("\n")
    .concat("\n");
}

/** One image reference split into what the registry serves: repository (path under the host) and tag. */
export interface ImageName {
  ref: string;
  repository: string;
  tag: string;
}

/** Splits `<host>/<path>:<tag>` (the suite's mapped names) into repository and tag; undefined for another host. */
export function imageOnHost(ref: string, host: string): ImageName | undefined {
  if (!ref.startsWith(`${host}/`)) return undefined;
  const rest = ref.slice(host.length + 1);
  const colon = rest.lastIndexOf(":");
  if (colon <= 0 || rest.includes("@")) return undefined;
  return { ref, repository: rest.slice(0, colon), tag: rest.slice(colon + 1) };
}

/** The images the suite lists (`e2e.test --list-images`: one reference a line). */
export function parseImageList(text: string): string[] {
  return [
    ...new Set(
      text
        .split("\n")
        .map((l) => l.trim())
        .filter((l) => /^[\w.-]+(:\d+)?\/\S+:\S+$/.test(l)),
    ),
  ].sort();
}

/** How an image the suite names is made here. */
export type ImageSource = "agnhost" | "busybox" | "pause" | "nginx" | "nautilus" | "kitten" | "nonewprivs" | "glibc-dns-testing";

/** The last part of a listed repository that each source makes. */
const SOURCE_OF: Record<string, ImageSource> = {
  agnhost: "agnhost",
  busybox: "busybox",
  pause: "pause",
  nginx: "nginx",
  nautilus: "nautilus",
  kitten: "kitten",
  nonewprivs: "nonewprivs",
  "glibc-dns-testing": "glibc-dns-testing",
};

/**
 * The sources imported onto every worker before a run (ctl image import):
 * the images most tests start from, whose big layers took minutes to
 * unpack when pulled. The others are pulled by the tests that need them,
 * as a user's image is: nautilus and kitten are agnhost's layers and one
 * small one, nonewprivs busybox's and one small one, so a worker that
 * holds those has only the small layer to fetch.
 */
export const PRELOADED_SOURCES: ReadonlySet<ImageSource> = new Set(["agnhost", "busybox", "pause", "nginx", "glibc-dns-testing"]);

/** The web pages of upstream's nautilus and kitten images (the kubectl Update Demo tests), in the Kubernetes module's source. */
export function updateDemoPages(moduleDir: string, source: "nautilus" | "kitten"): TarEntry[] {
  const dir = join(moduleDir, "test", "images", source, "html");
  const image = `${source}.jpg`;
  for (const file of [image, "data.json"]) if (!existsSync(join(dir, file))) throw new Error(`${join(dir, file)} is missing: the Kubernetes module's source is where the suite's build left it`);
  return [image, "data.json"].map((file): TarEntry => ({ kind: "file", path: file, mode: 0o644, contents: new Uint8Array(readFileSync(join(dir, file))) }));
}

/** Each listed image's source, or missing: the last part of its repository decides. */
export function imagePlan(names: readonly ImageName[]): { made: (ImageName & { source: ImageSource })[]; missing: ImageName[] } {
  const made: (ImageName & { source: ImageSource })[] = [];
  const missing: ImageName[] = [];
  for (const name of names) {
    const last = name.repository.split("/").at(-1)!;
    const source: ImageSource | undefined = SOURCE_OF[last];
    if (source && !name.repository.startsWith(`${REGISTRY_KEYS.privateRegistry}/`) && !name.repository.startsWith(`${REGISTRY_KEYS.invalidRegistry}/`)) made.push({ ...name, source });
    else missing.push(name);
  }
  return { made, missing };
}

/** The busybox applets the suite's commands call, linked beside busybox in its images. */
const SUITE_APPLETS = [
  "sh",
  "ls",
  "cat",
  "echo",
  "sleep",
  "test",
  "seq",
  "wget",
  // not nc: busybox's lacks -v and -t; agnhost has netcat-openbsd (AGNHOST_HOST_TOOLS)
  "nslookup",
  "ip",
  "ps",
  "grep",
  "hostname",
  "mkdir",
  "touch",
  "rm",
  "stat",
  "id",
  "env",
  "date",
  "uname",
  "head",
  "tail",
  "true",
  "false",
  "mount",
  "df",
  "wc",
  "find",
  "chmod",
  "chown",
  "cp",
  "mv",
  "ln",
  "sed",
  "awk",
  "dd",
  "du",
  "timeout",
  "printf",
  "kill",
];

/** Tools upstream's agnhost image has from Alpine that the tests exec, taken from this host with the libraries they load (test/setup.sh installs them). */
export const AGNHOST_HOST_TOOLS: readonly HostTool[] = [
  { path: "/usr/bin/curl", debianPackage: "curl" },
  // The Services tests run `nc -v -t -w 2`, which busybox's nc lacks; Alpine's image has netcat-openbsd.
  { path: "/bin/nc.openbsd", debianPackage: "netcat-openbsd", as: "/usr/bin/nc" },
  // The shell the tests' `sh -c` runs: Debian's busybox runs its own applets
  // before PATH (FEATURE_SH_STANDALONE), so under its sh `nc` stayed
  // busybox's; Alpine's busybox, in upstream's image, does not.
  { path: "/bin/dash", debianPackage: "dash", as: "/bin/sh" },
  // The DNS tests' probes check /etc/hosts entries with getent (glibc's, whose files and dns lookups are in libc itself since 2.34).
  { path: "/usr/bin/getent", debianPackage: "libc-bin" },
];

/** What upstream's glibc-dns-testing image (Debian bookworm and its dnsutils) gives the DNS tests' probes besides dig (digTools): a POSIX sh and getent. */
export const GLIBC_DNS_HOST_TOOLS: readonly HostTool[] = AGNHOST_HOST_TOOLS.filter((t) => t.as === "/bin/sh" || t.path === "/usr/bin/getent");

/**
 * dig, which the DNS tests' probes run (`dig +notcp +noall +answer +search
 * …`): Debian's bind9-dnsutils, unpacked with the libraries this host
 * lacks, as upstream's images have it (agnhost from Alpine's bind-tools,
 * glibc-dns-testing from Debian's dnsutils). Nothing is installed here.
 */
export const DIG_PACKAGES = ["bind9-dnsutils", "bind9-libs", "libjemalloc2", "libmaxminddb0", "libfstrm0", "libprotobuf-c1", "liblmdb0"] as const;

/** dig from the unpacked DIG_PACKAGES (their roots, bind9-dnsutils's first), its libraries from them and from this host. */
export function digTools(roots: readonly string[]): HostTool[] {
  return [{ path: join(roots[0]!, "usr/bin/dig"), debianPackage: DIG_PACKAGES[0], as: "/usr/bin/dig", libraryRoots: roots }];
}

export interface HostTool {
  /** Where the host has it. */
  path: string;
  debianPackage: string;
  /** Where the image has it, if elsewhere. */
  as?: string;
  /**
   * Unpacked Debian packages (unpackDebianPackage) whose libraries it loads
   * besides the host's: ldd looks in their library directories first, and
   * a library found in one goes where its package puts it.
   */
  libraryRoots?: readonly string[];
}

/** Where a Debian package puts its amd64 libraries. */
const LIBRARY_DIRS = ["usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu"];

/** The libraries `ldd` says a dynamic binary loads, and its loader: absolute paths. A library it cannot find is an error naming it: the tool would not run. */
export function lddPaths(output: string): string[] {
  const paths = new Set<string>();
  const missing = [...output.matchAll(/^\s*(\S+) => not found/gm)].map((m) => m[1]!);
  if (missing.length > 0) throw new Error(`ldd finds no ${[...new Set(missing)].join(", ")}: the package that has it is neither on this host nor among the tool's unpacked ones`);
  for (const line of output.split("\n")) {
    const resolved = /=>\s*(\/\S+)/.exec(line)?.[1] ?? /^\s*(\/\S+)\s+\(0x/.exec(line)?.[1];
    if (resolved) paths.add(resolved);
  }
  return [...paths].sort();
}

/**
 * A layer of host binaries and every library they load, each at the path
 * the binary looks for it (symlinks read through: the file's bytes at the
 * link's path), so that Debian's curl runs in an image that has no libc
 * of its own. `read` and `ldd` are this host's unless a test gives its own.
 */
export function hostToolsLayer(
  tools: readonly HostTool[],
  host: { read: (path: string) => Uint8Array; ldd: (path: string, libraryPath: readonly string[]) => string } = {
    read: (path) => readFileSync(path),
    ldd: (path, libraryPath) => {
      const env = { ...process.env, ...(libraryPath.length > 0 ? { LD_LIBRARY_PATH: libraryPath.join(":") } : {}) };
      const result = Bun.spawnSync(["ldd", path], { env, stdout: "pipe", stderr: "pipe" });
      if (result.exitCode !== 0) throw new Error(`ldd ${path}: ${result.stderr.toString().trim()}`);
      return result.stdout.toString();
    },
  },
): TarEntry[] {
  // Each file at its path in the image, read from its path on the host.
  const files = new Map<string, string>();
  for (const tool of tools) {
    if (!existsSync(tool.path)) throw new Error(`${tool.path} is missing on this host: install Debian's ${tool.debianPackage} (test/setup.sh does)`);
    files.set(tool.as ?? tool.path, tool.path);
    const roots = tool.libraryRoots ?? [];
    for (const lib of lddPaths(
      host.ldd(
        tool.path,
        roots.flatMap((root) => LIBRARY_DIRS.map((dir) => join(root, dir))),
      ),
    )) {
      const root = roots.find((r) => lib.startsWith(`${r}/`));
      files.set(root ? lib.slice(root.length) : lib, lib);
    }
  }
  const dirs = new Set<string>();
  for (const path of files.keys()) {
    const parts = path.slice(1).split("/").slice(0, -1);
    for (let i = 1; i <= parts.length; i++) dirs.add(parts.slice(0, i).join("/"));
  }
  return [
    ...[...dirs].sort().map((dir): TarEntry => ({ kind: "dir", path: dir, mode: 0o755 })),
    ...[...files].map(([path, from]): TarEntry => ({ kind: "file", path: path.slice(1), mode: 0o755, contents: host.read(from) })),
  ];
}

/**
 * What upstream's agnhost image (test/images/agnhost/Dockerfile) holds
 * besides its Alpine tools, as far as the tests rely on it: the binary,
 * its tools (curl, from this host: hostToolsLayer), `/agnhost-2` linked to it (the test of a container's command and
 * arguments overrides the entrypoint with it), `/uploads` (its porter and
 * netexec upload there), and the user and group the image defines
 * (`user-defined-in-image`, 1000, in `group-defined-in-image`, 50000),
 * which the security-context tests look up by name.
 */
function agnhostLayer(agnhost: Uint8Array, tools: readonly TarEntry[]): TarEntry[] {
  const text = (t: string) => new TextEncoder().encode(t);
  return [
    { kind: "file", path: "agnhost", mode: 0o755, contents: agnhost },
    { kind: "symlink", path: "agnhost-2", target: "agnhost" },
    { kind: "dir", path: "uploads", mode: 0o755 },
    { kind: "file", path: "etc/passwd", mode: 0o644, contents: text("root:x:0:0:root:/root:/bin/sh\nuser-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n") },
    { kind: "file", path: "etc/group", mode: 0o644, contents: text("root:x:0:\nuser-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n") },
    ...tools,
  ];
}

/**
 * Debian's nginx package, whose /usr/sbin/nginx serves the suite's nginx
 * images: the real server, Debian bookworm's 1.22, under upstream's tags
 * (1.27 and 1.28, built from nginx's Alpine image). The tests run it as a
 * long-lived web server on port 80 and never ask its version.
 */
export const NGINX_DEBIAN_PACKAGE = "nginx";

/**
 * A Debian package unpacked under `dir` (its root returned), fetched from
 * the archive with `apt-get download`: nothing is installed on this host
 * and no service starts. Kept there for the next run.
 */
export function unpackDebianPackage(name: string, dir: string): string {
  const root = join(dir, name);
  if (existsSync(join(dir, `${name}.unpacked`))) return root;
  mkdirSync(dir, { recursive: true });
  for (const old of readdirSync(dir).filter((f) => f.startsWith(`${name}_`) && f.endsWith(".deb"))) rmSync(join(dir, old));
  const download = Bun.spawnSync(["apt-get", "download", name], { cwd: dir, stdout: "pipe", stderr: "pipe" });
  const deb = readdirSync(dir).find((f) => f.startsWith(`${name}_`) && f.endsWith(".deb"));
  if (download.exitCode !== 0 || !deb) {
    const why = download.stderr.toString().trim().split("\n").at(-1) ?? "";
    throw new Error(`apt-get download ${name} failed (${why || `exit ${download.exitCode}`}); the package lists may be missing: run apt-get update`);
  }
  rmSync(root, { recursive: true, force: true });
  const unpack = Bun.spawnSync(["dpkg-deb", "-x", join(dir, deb), root], { stdout: "pipe", stderr: "pipe" });
  if (unpack.exitCode !== 0) throw new Error(`dpkg-deb -x ${deb}: ${unpack.stderr.toString().trim()}`);
  writeFileSync(join(dir, `${name}.unpacked`), `${deb}\n`);
  return root;
}

/** The nginx binary of an unpacked NGINX_DEBIAN_PACKAGE, to be laid out with its libraries (hostToolsLayer). */
export function nginxTools(unpacked: string): HostTool[] {
  return [{ path: join(unpacked, "usr/sbin/nginx"), debianPackage: NGINX_DEBIAN_PACKAGE, as: "/usr/sbin/nginx" }];
}

/**
 * What nginx needs around its binary to serve port 80 as upstream's image
 * does: a configuration (logs to the container's stdout and stderr), a
 * page, the directories compiled into Debian's build (nginx -V: temp
 * files under /var/lib/nginx, the pid in /run), and the unprivileged user
 * its workers run as (101, as in nginx's Alpine image).
 */
function nginxLayer(tools: readonly TarEntry[]): TarEntry[] {
  const text = (t: string) => new TextEncoder().encode(t);
  const conf = [
    "user nginx;",
    "worker_processes 1;",
    "error_log /dev/stderr notice;",
    "pid /run/nginx.pid;",
    "events { worker_connections 1024; }",
    "http {",
    "  access_log /dev/stdout;",
    "  default_type application/octet-stream;",
    "  types { text/html html; }",
    "  server {",
    "    listen 80;",
    "    listen [::]:80;",
    "    root /usr/share/nginx/html;",
    "    index index.html;",
    "  }",
    "}",
    "",
  ].join("\n");
  return [
    ...tools,
    { kind: "dir", path: "etc/nginx", mode: 0o755 },
    { kind: "file", path: "etc/nginx/nginx.conf", mode: 0o644, contents: text(conf) },
    { kind: "dir", path: "usr/share", mode: 0o755 },
    { kind: "dir", path: "usr/share/nginx", mode: 0o755 },
    { kind: "dir", path: "usr/share/nginx/html", mode: 0o755 },
    {
      kind: "file",
      path: "usr/share/nginx/html/index.html",
      mode: 0o644,
      contents: text("<!DOCTYPE html>\n<html><head><title>Welcome to nginx!</title></head><body><h1>Welcome to nginx!</h1></body></html>\n"),
    },
    { kind: "dir", path: "var", mode: 0o755 },
    { kind: "dir", path: "var/lib", mode: 0o755 },
    { kind: "dir", path: "var/lib/nginx", mode: 0o755 },
    { kind: "dir", path: "var/log", mode: 0o755 },
    { kind: "dir", path: "var/log/nginx", mode: 0o755 },
    { kind: "dir", path: "run", mode: 0o755 },
    { kind: "dir", path: "tmp", mode: 0o1777 },
    { kind: "file", path: "etc/passwd", mode: 0o644, contents: text("root:x:0:0:root:/root:/bin/sh\nnginx:x:101:101:nginx:/var/cache/nginx:/sbin/nologin\n") },
    { kind: "file", path: "etc/group", mode: 0o644, contents: text("root:x:0:\nnginx:x:101:nginx\n") },
  ];
}

/**
 * The OCI tarball of one image the suite runs, under each of `refs`:
 *  - agnhost: the built agnhost as /agnhost, its entrypoint (as upstream's
 *    image has it), over busybox for the shell and tools the tests exec;
 *  - busybox: busybox, `sh` its command;
 *  - pause: the pause program (image/pause.c) as /pause;
 *  - nginx: Debian's nginx (nginxLayer) over busybox's applets, run in the
 *    foreground as upstream's image runs it;
 *  - nautilus, kitten: agnhost's image (its very layers) and its page, the
 *    picture and data.json at /, served by `agnhost test-webserver` as
 *    upstream's images do;
 *  - glibc-dns-testing: Debian's dig and this host's getent (glibc's) and
 *    dash as sh, over busybox's applets (upstream's is Debian bookworm-slim
 *    with dnsutils);
 *  - nonewprivs: upstream's nnp (k8s.io/kubernetes/test/images/nonewprivs,
 *    built with the suite), setuid root at /usr/local/bin/nnp, its command,
 *    over busybox's applets (upstream's is Alpine).
 */
export function conformanceImage(
  source: ImageSource,
  refs: readonly string[],
  binaries: {
    agnhost: Uint8Array;
    busybox: Uint8Array;
    pause: Uint8Array;
    tools?: readonly TarEntry[] | undefined;
    nginx?: readonly TarEntry[] | undefined;
    nnp?: Uint8Array | undefined;
    /** The Kubernetes module's source directory (nautilus's and kitten's pages). */
    moduleDir?: string | undefined;
    /** glibc-dns-testing's tools (GLIBC_DNS_HOST_TOOLS and digTools, through hostToolsLayer). */
    dnsTools?: readonly TarEntry[] | undefined;
  },
): Uint8Array {
  // busybox's applets but sh, for the images whose /bin/sh is dash among
  // their host tools (agnhost's and glibc-dns-testing's: one layer, one digest).
  const appletsButSh = () =>
    busyboxLayer(
      binaries.busybox,
      SUITE_APPLETS.filter((a) => a !== "sh"),
    );
  const agnhostLayers = () => [appletsButSh(), agnhostLayer(binaries.agnhost, binaries.tools ?? [])];
  const agnhostConfig = { Env: ["PATH=/bin:/usr/bin:/sbin:/usr/sbin"], Entrypoint: ["/agnhost"] };
  switch (source) {
    case "agnhost":
      return ociImage(refs, agnhostLayers(), { ...agnhostConfig, Cmd: ["pause"] });
    case "nautilus":
    case "kitten":
      if (!binaries.moduleDir) throw new Error(`the ${source} image needs the Kubernetes module's source (its page)`);
      return ociImage(refs, [...agnhostLayers(), updateDemoPages(binaries.moduleDir, source)], { ...agnhostConfig, Cmd: ["test-webserver"], ExposedPorts: { "80/tcp": {} } });
    case "nonewprivs":
      if (!binaries.nnp) throw new Error("the nonewprivs image needs nnp (built with the suite)");
      return ociImage(
        refs,
        [
          busyboxLayer(binaries.busybox, SUITE_APPLETS),
          [
            { kind: "dir", path: "usr", mode: 0o755 },
            { kind: "dir", path: "usr/local", mode: 0o755 },
            { kind: "dir", path: "usr/local/bin", mode: 0o755 },
            // Setuid root, as upstream's `chmod +s`: what the test's allowPrivilegeEscalation decides is whether it takes.
            { kind: "file", path: "usr/local/bin/nnp", mode: 0o4755, contents: binaries.nnp },
          ],
        ],
        { Env: ["PATH=/usr/local/bin:/bin:/usr/bin"], Cmd: ["nnp"] },
      );
    case "busybox":
      return ociImage(refs, [busyboxLayer(binaries.busybox, SUITE_APPLETS)], { Env: ["PATH=/bin"], Cmd: ["sh"] });
    case "glibc-dns-testing":
      if (!binaries.dnsTools) throw new Error("the glibc-dns-testing image needs its tools (dig, getent, sh)");
      return ociImage(refs, [appletsButSh(), [...binaries.dnsTools]], { Env: ["PATH=/bin:/usr/bin:/sbin:/usr/sbin"], Cmd: ["sh"] });
    case "pause":
      return pauseImage(binaries.pause, refs);
    case "nginx":
      if (!binaries.nginx) throw new Error("the nginx image needs nginx's files (nginxTools, hostToolsLayer)");
      return ociImage(refs, [busyboxLayer(binaries.busybox, SUITE_APPLETS), nginxLayer(binaries.nginx)], {
        Env: ["PATH=/bin:/usr/bin:/sbin:/usr/sbin"],
        Cmd: ["nginx", "-g", "daemon off;"],
        ExposedPorts: { "80/tcp": {} },
        StopSignal: "SIGQUIT",
      });
  }
}
