#!/bin/sh
# One-step set-up and run, for a fresh Debian 12 machine (as root, or with sudo):
#
#   sh test/setup.sh test      type check, unit and process tests (and the qemu e2e)
#   sh test/setup.sh cluster   build everything and launch a cluster in qemu
#
# Installs what is missing, and only that: Debian packages with apt-get,
# JavaScript packages (bun included) with npm from package-lock.json. Safe to
# run again; a second run installs nothing.
set -eu
cd "$(dirname "$0")/.."

# Debian packages the node image, the launcher and the tests use. node and
# npm count as present when the commands exist, however they were installed.
PACKAGES="git openssl util-linux etcd-server etcd-client qemu-system-x86 qemu-utils dnsmasq-base cryptsetup-bin dosfstools mtools e2fsprogs gdisk iproute2 nftables cpio kmod gcc libc6-dev containerd runc busybox-static squashfs-tools"

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

missing=""
command -v npm >/dev/null 2>&1 || missing="nodejs npm"
# kubectl (Debian's kubernetes-client): the tests read the owner's
# kubeconfig with it. Any kubectl already on the PATH will do.
command -v kubectl >/dev/null 2>&1 || missing="$missing kubernetes-client"
for p in $PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "setup: installing Debian packages:$missing"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $missing
fi

# Install from the lockfile when node_modules is missing or older than it.
# (npm install, not npm ci: the registry here lacks some other platforms'
# optional buf binaries, which npm ci insists on finding in the lockfile.)
if [ ! -x node_modules/.bin/bun ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "setup: installing JavaScript packages from package-lock.json"
  npm install --no-audit --no-fund
fi

BUN="$(pwd)/node_modules/.bin/bun"
case "${1:-}" in
  test) exec "$BUN" run test ;;
  cluster) shift; exec "$BUN" run cluster "$@" ;;
  "")
    echo "setup: done; run 'sh test/setup.sh test' or 'sh test/setup.sh cluster'"
    # bun lives in node_modules/.bin, which a fresh shell does not search.
    echo "setup: for the README's bun commands: export PATH=\"$(pwd)/node_modules/.bin:\$PATH\""
    ;;
  *) echo "setup: unknown command '$1' (expected: test, cluster)" >&2; exit 2 ;;
esac
