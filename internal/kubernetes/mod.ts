// Package kubernetes: what a node needs to run the Kubernetes components
// (built from the k8s.io/kubernetes Go module as one multicall binary,
// image/upstream): their PKI, their files and kubeconfigs, their command
// lines, the controller service that launches them on a controller node,
// and the kubelet service on a worker.
//
//   etcd ──/kubernetes/pki (one key, created once: ensureKubernetesPKI)──┐
//                                                                        ▼
//   controller role + local consensus ──▶ controllerService
//        │ per start: the apiserver's serving certificate (this node's
//        │ address), its etcd client certificate (etcd CA), the
//        │ controller-manager's and scheduler's serving certificates
//        ▼
//   tmpfs <ephemeral>/kubernetes/controller/*.crt|key|kubeconfig (0600)
//        │
//        ├── kube-apiserver            ──▶ ready when /readyz answers (admin identity)
//        ├── kube-controller-manager   ─┐ started only after that
//        ├── kube-scheduler            ─┘
//        └── reconciler (reconciler.ts): base RBAC, the kube-dns Service and
//            its EndpointSlice (the workers' DNS servers), Nodes pruned;
//            volumes_controller.ts: the PVs of nodes that are gone deleted
//            (their claims Lost, told why), the room of nodes that are not
//            workers withdrawn, claims no worker has room for told so
//
//   worker role ──▶ workerService (service_worker.ts): what a worker runs
//        beside its container runtime, launched by the role server with
//        two curator calls (WorkerCurator): the mesh (internal/clusternet:
//        the pod prefix, which containerd's CRI network waits for), the
//        registries, the volume plugin, and the kubelet's service below
//
//   kubeletService (service_kubelet.ts): one key, certificates
//        from the curator (kubelet, system:kube-proxy, nodecore:cluster-dns),
//        one apiserver chosen, renewed together at half their life:
//        ├── kubelet                   (kubelet.ts)
//        ├── kube-proxy, nftables mode (proxy.ts: Services)
//        ├── CoreDNS on the node's address (dns.ts: the cluster DNS)
//        └── the kubelet's registry credential provider (registries.ts)
//
//   worker role ──▶ registriesService (registries.ts): the cluster's registry
//        configuration (curator) ──▶ containerd's hosts.toml per host and
//        the kubelet's credentials file, at every change, nothing restarted
//
//   worker role ──▶ persistent volumes, one store (volume_store.ts: a
//        directory per volume on the data partition, a project quota at the
//        claim's size, a reserve volumes never take):
//        ├── volumesService (volumes_service.ts): the CSI plugin (csi.ts) on
//        │   local sockets the kubelet finds in its plugins_registry
//        └── provisionerService (provisioner.ts), beside the kubelet as
//            nodecore:volumes:<node>: claims placed here ──▶ volumes and
//            PVs; released ──▶ deleted; grown ──▶ NodeExpandVolume; the
//            node's room ──▶ CSIStorageCapacity
//        the reconciler keeps the StorageClass local (the default) and the
//        plugin's CSIDriver
//
// Invariants:
//  - Keys and kubeconfigs exist only in etcd and on tmpfs, never on the ESP
//    or the data partition.
//  - Every component is a child process of the supervisor (restart with
//    backoff, SIGTERM then SIGKILL); none of them is started before what it
//    needs is ready.
//  - The command lines follow the upstream secure setup (controller_flags.ts);
//    the real components run with them in test/kubernetes_controller_process
//    and the qemu e2e.

export {
  ADMIN_USER,
  API_SERVICE_IP,
  APISERVER_KUBELET_CLIENT,
  CLUSTER_DOMAIN,
  CONTROLLER_MANAGER_USER,
  FRONT_PROXY_CLIENT,
  KubernetesPKIError,
  MASTERS_GROUP,
  OWNER_USER,
  NODES_GROUP,
  KUBERNETES_ETCD_PREFIX,
  PKI_KEY,
  SCHEDULER_USER,
  SERVICE_CIDR,
  createKubernetesPKI,
  decodeKubernetesPKI,
  encodeKubernetesPKI,
  ensureKubernetesPKI,
  issueApiserverCertificate,
  issueComponentServingCertificate,
  issueCredential,
  issueKubeletCertificates,
  issueOwnerKubernetesCertificate,
  kubeletUser,
  kubernetesKeys,
  loadKubernetesPKI,
  serviceAccountPublicKeyPem,
  type Credential,
  type KubernetesKeys,
  type KubernetesPKI,
} from "./pki.ts";
export { buildKubeconfig, parseKubeconfig, KUBECONFIG_CLUSTER, type KubeconfigOptions, type ParsedKubeconfig } from "./kubeconfig.ts";
export { CONTROLLER_FILES, controllerFiles, writeControllerFiles, type ControllerFile, type ControllerNode } from "./controller_files.ts";
export {
  APISERVER_ETCD_PREFIX,
  APISERVER_PORT,
  CONTROLLER_MANAGER_PORT,
  SCHEDULER_PORT,
  SERVICE_ACCOUNT_ISSUER,
  apiserverArgs,
  controllerManagerArgs,
  schedulerArgs,
  type ControllerFlagOptions,
} from "./controller_flags.ts";
export { controllerService, CONTROLLER_COMPONENTS, type ControllerServiceOptions } from "./service_controller.ts";
export { answersOk, parseKlogLine, READINESS_POLL_MS, READINESS_TIMEOUT_MS, type ComponentState } from "./component.ts";
export { reconcile, bindingObject, BASE_BINDINGS, type ClusterRoleBindingSpec, type ReconcileAction } from "./reconciler.ts";
export { backFromPowerOff, cordonMark, CORDONED_BY_ANNOTATION, parseCordonMark, POWEROFF_COMMAND, uncordonPatch } from "./node_cordon.ts";
export { nodeVolumeStore, volumesService, type VolumesServiceOptions } from "./volumes_service.ts";
export { VolumeStore, VOLUME_RESERVE, describeRoom, kernelQuotas, NoRoomError, VolumeError, type ProjectQuotas, type Volume, type VolumeRoom } from "./volume_store.ts";
export { CSI_DRIVER, csiSockets } from "./csi.ts";
export { provisionerService, quantityBytes } from "./provisioner.ts";
export { STORAGE_CLASS, reconcileStorage } from "./reconciler.ts";
export { kubeletService, chooseApiserver, KubeletError, APISERVER_CHECK_MS, APISERVER_MISSES, type KubeletCertificates, type KubeletServiceOptions } from "./service_kubelet.ts";
export {
  kubeletArgs,
  kubeletConfig,
  kubeletFiles,
  kubeletPath,
  KUBELET_FILES,
  KUBELET_HEALTHZ_PORT,
  KUBELET_PORT,
  KUBELET_TOOLS,
  KUBELET_TOOLS_DIR,
  CLUSTER_DNS_IP,
  type KubeletNode,
} from "./kubelet.ts";
export {
  COMMON_REGISTRY_PORTS,
  CREDENTIAL_PROVIDER_COMMAND,
  CREDENTIAL_PROVIDER_NAME,
  CredentialProviderError,
  credentialProviderConfig,
  credentialResponse,
  credentialsFile,
  imageHost,
  providerPorts,
  registriesService,
  registryPorts,
  REGISTRY_FILES,
  runCredentialProvider,
  writeCredentialProvider,
  type RegistriesServiceOptions,
} from "./registries.ts";
export { forgetRegistries, workerService, type WorkerCurator, type WorkerServiceOptions } from "./service_worker.ts";
export {
  manifestDigest,
  manifestNameProblem,
  MANIFESTS_STATUS,
  MAX_MANIFESTS,
  MAX_MANIFESTS_RECORD_BYTES,
  objectLabel,
  parseManifestObjects,
  parseManifestsStatus,
  type ManifestStatus,
} from "./manifests.ts";
