// Package containerd: the container runtime of a Kubernetes worker node.
// containerd 2.x with runc, built from their Go modules (image/upstream),
// supervised like etcd, with its images and snapshots on the data partition
// and its state on tmpfs.
//
//   roleserve (kubernetes worker, role kubernetes-worker)
//        │
//        └── runtime        containerRuntime (runtime.ts): one runnable,
//            │               CRI on when a kubelet runs beside it
//            ├── containerd  containerdService: config.toml → containerd
//            │               process in <cgroup>/containerd; ready = `ctr
//            │               version` answers                 ──► ready Value
//            ├── probe       runtimeProbe: waits for ready, imports the image's
//            │               busybox OCI tarball, runs it (`ctr run --rm`) in
//            │               <cgroup>/containers/runtime-probe; its output
//            │               goes to the node's log
//            ├── images      the image store offered while containerd answers
//            ├── census      (CRI) the kubelet's containers, counted on the
//            │               "containerd" line every 3 s
//            ├── image-peers (CRI) the peer mirror, below
//            └── pod-network (CRI) the pods' CNI network, written once the
//                            node's pod prefix is known (writeCniConflist):
//                            containerd does not wait for it, CRI loads it
//                            when it comes
//
//   registries   writeRegistryHosts (registries.ts): the cluster's registry
//                configuration as CRI's config_path, one hosts.toml (and CA)
//                per registry host, read by containerd at every pull
//
//   images       imageStore (images.ts): offline bundles, checked whole
//                first (bundle.ts), imported into CRI's namespace; listed
//
//   peers        imagePeersService (peer_mirror.ts, peer_content.ts): the
//                peer mirror; what one worker holds, the others pull from
//                it by digest, over mutual TLS, ahead of the registries
//
//   role taken away → both stopped (SIGTERM); then killCgroup(<cgroup>)
//   kills what runs on without them (shims and their containers) and
//   reports how many processes there were; the kernel's empty cgroup is
//   the proof that none is left.
//
// Invariants:
//  - Everything the runtime starts lives below one cgroup (RuntimePaths.
//    cgroup), so a node without the worker role can prove that no container
//    process is left: the kernel's cgroup.procs are empty.
//  - "/" is a mount of its own (image/preinit.c), so runc's pivot_root works
//    and containers get the same isolation as on a system booted from disk.
//  - CRI is on only while a kubelet runs (ContainerdOptions.cri); nothing
//    here talks to Kubernetes.
//  - A container's root is an overlay mounted `volatile` (config.ts,
//    OVERLAY_MOUNT_OPTIONS): deleting a container never syncs the data
//    partition, so a loaded node handles a container's exit within CRI's
//    10 s; a container's own layer is not kept across a crash, which
//    Kubernetes never asks for.

export {
  CONTAINERD_NAMESPACE,
  containerdConfig,
  CRI_IMAGES_PLUGIN,
  CRI_NAMESPACE,
  CRI_PLUGIN,
  CRI_RUNTIME_PLUGIN,
  cniPaths,
  cniConflist,
  DISABLED_PLUGINS,
  SANDBOX_IMAGE_PATH,
  SANDBOX_IMAGE_REF,
  TEST_IMAGE_REF,
  PUBLIC_CA_BUNDLE,
  RUNTIME_BINARIES,
  RUNTIME_CGROUP,
  runtimeCgroupName,
  runtimeBinaries,
  runtimeEnv,
  RuntimePathError,
  runtimePaths,
  type RuntimePaths,
} from "./config.ts";
export { containerdService, ctr, parseContainerdLine, writeCniConflist, type ContainerdOptions } from "./service.ts";
export { PROBE_IMAGE_PATH, PROBE_CONTAINER_ID, PROBE_IMAGE_REF, PROBE_SCRIPT, runtimeProbe, type ProbeOptions } from "./probe.ts";
export {
  CA_FILE,
  credentialsProblem,
  DEFAULT_HOST_DIR,
  defaultHostsToml,
  HOSTS_TOML,
  hostsToml,
  MAX_MIRRORS,
  MAX_REGISTRIES,
  mirrorUrlProblem,
  parseCaPem,
  registryHostProblem,
  registryHostsFiles,
  registryProblem,
  writeRegistryHosts,
} from "./registries.ts";
export { BundleCheckError, checkImageBundle, MAX_BUNDLE_IMAGES, MAX_BUNDLE_MEMBERS, type CheckedBundle } from "./bundle.ts";
export { CONTENT_DIGEST, contentPath, digestProblem, IMAGE_PEER_PORT, imagePeerService, manifestMediaType, MAX_MANIFEST_BYTES, readContent } from "./peer_content.ts";
export {
  imagePeersService,
  MAX_PEERS_ASKED,
  parseMirrorPath,
  PEER_MIRROR_PORT,
  PEER_TOKEN_HEADER,
  PeerClients,
  peerCallerProblem,
  peerMirrorAnswer,
  peerMirrorEndpoint,
  peerWorkers,
  type ImagePeersOptions,
  type PeerMirrorEndpoint,
  type PeerNode,
  type PeerSource,
  type PeerTls,
} from "./peer_mirror.ts";
export { imageSize, imageStore, namedImages, NODE_PLATFORM, type ImageListing, type ImageStore } from "./images.ts";
export { CgroupCleanupError, delegatingCgroup, joinCgroup, killCgroup, processesIn, unifiedCgroupRoot } from "./cgroup.ts";
export { CENSUS_INTERVAL_MS, containerRuntime, type ContainerRuntimeOptions } from "./runtime.ts";
