// What each upstream wrapper module builds, and how. One entry per upstream:
// its folder under image/upstream/ (a Go module of ours: go.mod, go.sum and,
// where the upstream has no usable main package, a few lines of main), the
// modules it requires, the packages it builds into which binaries, and the
// flags. pin.ts writes the go.mod files from this; build.ts builds from it.
//
// Every wrapper is its own module, so that minimal version selection never
// raises one upstream's dependencies (grpc, otel, x/net) to what another
// requires.

import { CNI_PLUGINS_VERSION, CONTAINERD_VERSION, COREDNS_VERSION, ETCD_VERSION, KUBE_NETWORK_POLICIES_VERSION, KUBERNETES_VERSION, METRICS_SERVER_VERSION, RUNC_VERSION } from "./versions.ts";

export interface Binary {
  /** File name in the output folder. */
  name: string;
  /** Go package path built into it (relative ones are inside the wrapper). */
  pkg: string;
  /** The package's test binary (`go test -c`), not its main: the Kubernetes e2e suite is one. */
  test?: boolean;
}

export interface Component {
  /** Folder under image/upstream/, and the name the build prints. */
  name: string;
  /** The upstream module and version this component stands for. */
  module: string;
  version: string;
  /** go.mod `require` lines the wrapper starts from (go mod tidy adds the rest). */
  requires: Record<string, string>;
  /** Main packages of the upstream built as they are (go.mod `tool` lines). */
  tools: readonly string[];
  binaries: readonly Binary[];
  /** Names that are symlinks to a binary (multicall), name -> target. */
  links: Record<string, string>;
  cgo: boolean;
  tags: readonly string[];
  /** -X variable=value stamps, so that the binaries report their real version. */
  stamps: Record<string, string>;
  /** Static linking for cgo binaries. */
  staticLink: boolean;
}

function kubernetesStamps(version: string): Record<string, string> {
  const [major, minor] = version.replace(/^v/, "").split(".");
  const fields = {
    gitVersion: version,
    gitMajor: major!,
    gitMinor: minor!,
    gitTreeState: "clean",
    // Fixed, so that two builds of the same version are the same bytes. The
    // module proxy does not say which commit a tag is, so gitCommit is unset.
    buildDate: "1970-01-01T00:00:00Z",
  };
  const stamps: Record<string, string> = {};
  for (const pkg of ["k8s.io/component-base/version", "k8s.io/client-go/pkg/version"]) {
    for (const [field, value] of Object.entries(fields)) stamps[`${pkg}.${field}`] = value;
  }
  return stamps;
}

const KUBERNETES: Component = {
  name: "kubernetes",
  module: "k8s.io/kubernetes",
  version: KUBERNETES_VERSION,
  requires: { "k8s.io/kubernetes": KUBERNETES_VERSION },
  tools: [],
  binaries: [{ name: "hyperkube", pkg: "." }],
  links: {
    "kube-apiserver": "hyperkube",
    "kube-controller-manager": "hyperkube",
    "kube-scheduler": "hyperkube",
    "kube-proxy": "hyperkube",
    kubelet: "hyperkube",
    kubectl: "hyperkube",
  },
  cgo: false,
  tags: [],
  stamps: kubernetesStamps(KUBERNETES_VERSION),
  staticLink: false,
};

const ETCD: Component = {
  name: "etcd",
  module: "go.etcd.io/etcd/server/v3",
  version: ETCD_VERSION,
  requires: { "go.etcd.io/etcd/server/v3": ETCD_VERSION, "go.etcd.io/etcd/etcdctl/v3": ETCD_VERSION, "go.etcd.io/etcd/etcdutl/v3": ETCD_VERSION },
  // etcdutl works on etcd's files offline: it turns a backup's snapshot into
  // a data directory (restore, and the verification of every backup). Its
  // main package is its module's root.
  tools: ["go.etcd.io/etcd/etcdutl/v3"],
  binaries: [
    { name: "etcd", pkg: "./cmd/etcd" },
    { name: "etcdctl", pkg: "./cmd/etcdctl" },
    { name: "etcdutl", pkg: "go.etcd.io/etcd/etcdutl/v3" },
  ],
  links: {},
  cgo: false,
  tags: [],
  // The version number is a constant in the module; only the commit is a stamp.
  stamps: {},
  staticLink: false,
};

const CONTAINERD_CMD = "github.com/containerd/containerd/v2/cmd";
const CONTAINERD: Component = {
  name: "containerd",
  module: "github.com/containerd/containerd/v2",
  version: CONTAINERD_VERSION,
  requires: { "github.com/containerd/containerd/v2": CONTAINERD_VERSION },
  tools: [`${CONTAINERD_CMD}/containerd`, `${CONTAINERD_CMD}/containerd-shim-runc-v2`, `${CONTAINERD_CMD}/ctr`],
  binaries: [
    { name: "containerd", pkg: `${CONTAINERD_CMD}/containerd` },
    { name: "containerd-shim-runc-v2", pkg: `${CONTAINERD_CMD}/containerd-shim-runc-v2` },
    { name: "ctr", pkg: `${CONTAINERD_CMD}/ctr` },
  ],
  links: {},
  cgo: false,
  // No btrfs (needs cgo anyway), devmapper or zfs snapshotters: overlayfs only.
  tags: ["no_btrfs", "no_devmapper", "no_zfs"],
  stamps: {
    "github.com/containerd/containerd/v2/version.Version": CONTAINERD_VERSION,
    "github.com/containerd/containerd/v2/version.Package": "github.com/containerd/containerd/v2",
  },
  staticLink: false,
};

const RUNC: Component = {
  name: "runc",
  module: "github.com/opencontainers/runc",
  version: RUNC_VERSION,
  requires: { "github.com/opencontainers/runc": RUNC_VERSION },
  tools: ["github.com/opencontainers/runc"],
  binaries: [{ name: "runc", pkg: "github.com/opencontainers/runc" }],
  links: {},
  // nsenter is a cgo constructor: runc cannot be built without cgo. seccomp
  // needs libseccomp (static, from Debian's libseccomp-dev); libpathrs, 1.5's
  // new default, is a Rust library and is left out.
  cgo: true,
  tags: ["seccomp", "netgo", "osusergo", "urfave_cli_no_docs"],
  // runc embeds its VERSION file; nothing to stamp.
  stamps: {},
  staticLink: true,
};

const CNI_PLUGINS = "github.com/containernetworking/plugins/plugins";
const CNI: Component = {
  name: "cni",
  module: "github.com/containernetworking/plugins",
  version: CNI_PLUGINS_VERSION,
  requires: { "github.com/containernetworking/plugins": CNI_PLUGINS_VERSION },
  tools: [`${CNI_PLUGINS}/main/bridge`, `${CNI_PLUGINS}/ipam/host-local`, `${CNI_PLUGINS}/main/loopback`],
  binaries: [
    { name: "bridge", pkg: `${CNI_PLUGINS}/main/bridge` },
    { name: "host-local", pkg: `${CNI_PLUGINS}/ipam/host-local` },
    { name: "loopback", pkg: `${CNI_PLUGINS}/main/loopback` },
  ],
  links: {},
  cgo: false,
  tags: [],
  stamps: { "github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion": CNI_PLUGINS_VERSION },
  staticLink: false,
};

const COREDNS: Component = {
  name: "coredns",
  module: "github.com/coredns/coredns",
  version: COREDNS_VERSION,
  requires: { "github.com/coredns/coredns": COREDNS_VERSION },
  tools: ["github.com/coredns/coredns"],
  binaries: [{ name: "coredns", pkg: "github.com/coredns/coredns" }],
  links: {},
  cgo: false,
  tags: [],
  // The version is a constant in the module (coremain.CoreVersion).
  stamps: {},
  staticLink: false,
};

/**
 * metrics-server, the Metrics API's server: a controller runs it beside its
 * apiserver, which the aggregation layer sends metrics.k8s.io to. Its own
 * module: it is built against the Kubernetes libraries it was released
 * with (k8s.io/* v0.33), which a module shared with k8s.io/kubernetes
 * v1.37 would raise.
 */
const METRICS_SERVER: Component = {
  name: "metrics-server",
  module: "sigs.k8s.io/metrics-server",
  version: METRICS_SERVER_VERSION,
  requires: { "sigs.k8s.io/metrics-server": METRICS_SERVER_VERSION },
  tools: ["sigs.k8s.io/metrics-server/cmd/metrics-server"],
  binaries: [{ name: "metrics-server", pkg: "sigs.k8s.io/metrics-server/cmd/metrics-server" }],
  links: {},
  cgo: false,
  tags: [],
  // Its version is client-go's, as upstream's Makefile stamps it.
  stamps: { "k8s.io/client-go/pkg/version.gitVersion": METRICS_SERVER_VERSION, "k8s.io/component-base/version.gitVersion": METRICS_SERVER_VERSION },
  staticLink: false,
};

/**
 * kube-network-policies, the NetworkPolicy enforcer every worker runs beside
 * kube-proxy. Its library (pkg/networkpolicy) under a main of ours
 * (main.go: a kubeconfig, SIGTERM, a readiness endpoint), in its own module
 * for the same reason as metrics-server: its k8s.io/* v0.32.
 */
const KUBE_NETWORK_POLICIES: Component = {
  name: "kube-network-policies",
  module: "sigs.k8s.io/kube-network-policies",
  version: KUBE_NETWORK_POLICIES_VERSION,
  requires: { "sigs.k8s.io/kube-network-policies": KUBE_NETWORK_POLICIES_VERSION },
  tools: [],
  binaries: [{ name: "kube-network-policies", pkg: "." }],
  links: {},
  cgo: false,
  tags: [],
  stamps: {},
  staticLink: false,
};

/**
 * Kubernetes's own conformance suite, for `bun run conformance` (never in
 * the node's image): the e2e test binary of k8s.io/kubernetes/test/e2e,
 * built as upstream's `make WHAT=test/e2e/e2e.test` builds it, and agnhost,
 * the one program most of the suite's pods run (test/images/agnhost, a main
 * package of the same module), and nnp (test/images/nonewprivs). Its own module, so that the suite's test
 * dependencies (ginkgo, gomega) never reach the node's Kubernetes.
 */
const CONFORMANCE: Component = {
  name: "conformance",
  module: "k8s.io/kubernetes",
  version: KUBERNETES_VERSION,
  requires: { "k8s.io/kubernetes": KUBERNETES_VERSION },
  tools: ["k8s.io/kubernetes/test/images/agnhost"],
  binaries: [
    { name: "e2e.test", pkg: "k8s.io/kubernetes/test/e2e", test: true },
    { name: "agnhost", pkg: "k8s.io/kubernetes/test/images/agnhost" },
    // The nonewprivs image's program (it prints its effective uid); it
    // imports only the standard library, so it needs no tool line.
    { name: "nnp", pkg: "k8s.io/kubernetes/test/images/nonewprivs" },
  ],
  links: {},
  cgo: false,
  tags: [],
  stamps: kubernetesStamps(KUBERNETES_VERSION),
  staticLink: false,
};

/** In build order: the small ones first, so that a broken set-up fails early. */
export const COMPONENTS: readonly Component[] = [ETCD, CNI, RUNC, CONTAINERD, COREDNS, METRICS_SERVER, KUBE_NETWORK_POLICIES, KUBERNETES];

/** Built only when a test asks for them (buildComponent), never by `bun run build`. */
export const TEST_COMPONENTS: readonly Component[] = [CONFORMANCE];

/** Every wrapper module: the node's components, then the tests'. */
export const ALL_COMPONENTS: readonly Component[] = [...COMPONENTS, ...TEST_COMPONENTS];

export function component(name: string): Component {
  const found = ALL_COMPONENTS.find((c) => c.name === name);
  if (!found) throw new Error(`no upstream component named '${name}' (known: ${ALL_COMPONENTS.map((c) => c.name).join(", ")})`);
  return found;
}
