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
# etcd, containerd, runc, the CNI plugins and Kubernetes are not among them:
# `bun run build` builds them from their Go modules (image/upstream), with
# gcc, libseccomp-dev and pkg-config for runc. chrony's chronyd goes into
# the node image (time sync) and serves NTP in its tests; prometheus scrapes
# a process cluster in test/metrics_process.test.ts. docker-registry (the
# CNCF distribution registry) is the launcher's and the tests' registry,
# and skopeo pushes the images built here into it (test/launch/registry.ts).
PACKAGES="git ca-certificates curl netcat-openbsd openssl util-linux qemu-system-x86 qemu-utils dnsmasq-base cryptsetup-bin dosfstools mtools e2fsprogs gdisk iproute2 nftables cpio kmod gcc libc6-dev libseccomp-dev pkg-config busybox-static squashfs-tools tcpdump prometheus chrony docker-registry skopeo"

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

# Go builds the upstream components; Debian's Go (1.19) is too old for
# them, so the machine's own Go must be there (GOTOOLCHAIN=local: nothing
# fetches another).
GO_NEEDED="1.26.8"
# Go's own installer puts it in /usr/local/go, which a non-login shell may
# not have on its PATH.
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
  PATH="$PATH:/usr/local/go/bin"
  export PATH
fi
if ! command -v go >/dev/null 2>&1; then
  echo "setup: go is not installed: the upstream build (etcd, containerd, Kubernetes) needs Go $GO_NEEDED or newer on the PATH" >&2
  exit 1
fi
go_version="$(GOTOOLCHAIN=local go env GOVERSION | sed 's/^go//')"
if [ "$(printf '%s\n%s\n' "$GO_NEEDED" "$go_version" | sort -V | head -n1)" != "$GO_NEEDED" ]; then
  echo "setup: go $go_version is too old: the upstream build needs Go $GO_NEEDED or newer" >&2
  exit 1
fi

missing=""
command -v npm >/dev/null 2>&1 || missing="nodejs npm"
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
  # The tests run the built binaries (out/system: etcd, containerd,
  # Kubernetes); the build prints one line per component, and builds nothing
  # that is cached already.
  test) "$BUN" run build && exec "$BUN" run test ;;
  cluster) shift; exec "$BUN" run cluster "$@" ;;
  "")
    echo "setup: done; run 'sh test/setup.sh test' or 'sh test/setup.sh cluster'"
    # bun lives in node_modules/.bin, which a fresh shell does not search.
    echo "setup: for the README's bun commands: export PATH=\"$(pwd)/node_modules/.bin:\$PATH\""
    ;;
  *) echo "setup: unknown command '$1' (expected: test, cluster)" >&2; exit 2 ;;
esac
