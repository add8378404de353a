// The files a controller node's Kubernetes components read: certificates,
// keys and kubeconfigs, written to tmpfs (never the ESP, never the data
// partition) each time the controller starts, and readable by root only.
//
// Their names are fixed (CONTROLLER_FILES), so the flag builders in
// controller_flags.ts and the tests agree on them without passing paths
// around.

import type { X509Certificate } from "node:crypto";
import { privateKeyPem, toPem } from "../pki/mod.ts";
import { buildKubeconfig } from "./kubeconfig.ts";
import { writePrivateFiles } from "./private_files.ts";
import { METRICS_SERVER_USER, METRICS_SERVICE_DNS_NAME } from "./metrics_server.ts";
import {
  CONTROLLER_MANAGER_USER,
  SCHEDULER_USER,
  issueApiserverCertificate,
  issueComponentServingCertificate,
  issueCredential,
  serviceAccountPublicKeyPem,
  type Credential,
  type KubernetesPKI,
} from "./pki.ts";

export const CONTROLLER_FILES = {
  ca: "ca.crt",
  apiserverCert: "apiserver.crt",
  apiserverKey: "apiserver.key",
  etcdCA: "etcd-ca.crt",
  etcdClientCert: "apiserver-etcd-client.crt",
  etcdClientKey: "apiserver-etcd-client.key",
  kubeletClientCert: "apiserver-kubelet-client.crt",
  kubeletClientKey: "apiserver-kubelet-client.key",
  serviceAccountPublic: "sa.pub",
  serviceAccountPrivate: "sa.key",
  frontProxyCA: "front-proxy-ca.crt",
  frontProxyClientCert: "front-proxy-client.crt",
  frontProxyClientKey: "front-proxy-client.key",
  controllerManagerKubeconfig: "controller-manager.kubeconfig",
  controllerManagerCert: "controller-manager.crt",
  controllerManagerKey: "controller-manager.key",
  schedulerKubeconfig: "scheduler.kubeconfig",
  schedulerCert: "scheduler.crt",
  schedulerKey: "scheduler.key",
  metricsServerKubeconfig: "metrics-server.kubeconfig",
  metricsServerCert: "metrics-server.crt",
  metricsServerKey: "metrics-server.key",
} as const;

export type ControllerFile = keyof typeof CONTROLLER_FILES;

/** What one controller node adds to the stored PKI. */
export interface ControllerNode {
  /** The node's address: the apiserver serves and advertises on it. */
  address: string;
  /** https://host:port of the apiserver the controller-manager and scheduler talk to (this node's). */
  apiserverUrl: string;
  /** The apiserver's client of the local etcd member: its CA, certificate and key. */
  etcd: { ca: X509Certificate; client: Credential };
}

/** Every file's contents, by name. */
export function controllerFiles(pki: KubernetesPKI, node: ControllerNode): Record<ControllerFile, string> {
  const serving = issueApiserverCertificate(pki, [node.address]);
  const controllerManager = issueComponentServingCertificate(pki, "kube-controller-manager", node.address);
  const scheduler = issueComponentServingCertificate(pki, "kube-scheduler", node.address);
  // metrics-server's: the apiserver dials it by this node's address and checks the Service's name (metrics_server.ts).
  const metricsServing = issueCredential(pki.ca, { commonName: METRICS_SERVICE_DNS_NAME, kind: "server", dnsNames: [METRICS_SERVICE_DNS_NAME], ipAddresses: [node.address] });
  const metricsClient = issueCredential(pki.ca, { commonName: METRICS_SERVER_USER, kind: "client" });
  const kubeconfig = (user: string, credential: Credential) =>
    buildKubeconfig({ server: node.apiserverUrl, ca: pki.ca.certificate, certificate: credential.certificate, privateKey: credential.privateKey, user });
  return {
    ca: toPem(pki.ca.certificate),
    apiserverCert: toPem(serving.certificate),
    apiserverKey: privateKeyPem(serving.privateKey),
    etcdCA: toPem(node.etcd.ca),
    etcdClientCert: toPem(node.etcd.client.certificate),
    etcdClientKey: privateKeyPem(node.etcd.client.privateKey),
    kubeletClientCert: toPem(pki.apiserverKubeletClient.certificate),
    kubeletClientKey: privateKeyPem(pki.apiserverKubeletClient.privateKey),
    serviceAccountPublic: serviceAccountPublicKeyPem(pki),
    serviceAccountPrivate: privateKeyPem(pki.serviceAccountKey),
    frontProxyCA: toPem(pki.frontProxyCA.certificate),
    frontProxyClientCert: toPem(pki.frontProxyClient.certificate),
    frontProxyClientKey: privateKeyPem(pki.frontProxyClient.privateKey),
    controllerManagerKubeconfig: kubeconfig(CONTROLLER_MANAGER_USER, pki.controllerManager),
    controllerManagerCert: toPem(controllerManager.certificate),
    controllerManagerKey: privateKeyPem(controllerManager.privateKey),
    schedulerKubeconfig: kubeconfig(SCHEDULER_USER, pki.scheduler),
    schedulerCert: toPem(scheduler.certificate),
    schedulerKey: privateKeyPem(scheduler.privateKey),
    metricsServerKubeconfig: kubeconfig(METRICS_SERVER_USER, metricsClient),
    metricsServerCert: toPem(metricsServing.certificate),
    metricsServerKey: privateKeyPem(metricsServing.privateKey),
  };
}

/** Writes the files into `dir`, under their CONTROLLER_FILES names (private_files.ts). */
export function writeControllerFiles(dir: string, files: Record<ControllerFile, string>): void {
  writePrivateFiles(dir, CONTROLLER_FILES, files);
}
