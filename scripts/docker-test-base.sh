#!/usr/bin/env bash
# Build the local base image the docker test tier uses in place of python:3.11-slim, for machines
# that cannot pull from Docker Hub:
#   1. debootstrap Debian bookworm (python3, pip, util-linux, redis-server) from the Debian mirror
#      this host's apt already uses, and `docker import` it;
#   2. add the CA bundle that pip's configuration names (TLS to the package index may be
#      intercepted on such machines) and the CPU torch wheel from pip's find-links directory, so the
#      image build never downloads the CUDA build of torch.
# Everything is found at run time; nothing of this machine is written into the repository.
#
#   scripts/docker-test-base.sh [TAG]        # default tag: rollgate-test-base:bookworm
# Needs root, debootstrap and a running dockerd. Idempotent: an existing TAG is kept.
set -euo pipefail

TAG="${1:-rollgate-test-base:bookworm}"
PY="${PYTHON:-python3}"
export PATH="$PATH:/usr/sbin:/sbin"

if docker image inspect "$TAG" >/dev/null 2>&1; then
  echo "base image $TAG exists"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "debootstrap is missing (apt-get install debootstrap)" >&2; exit 2; }

# The Debian mirror apt uses here (deb822 .sources files or one-line sources.list entries).
mirror="${DEBIAN_MIRROR:-}"
if [ -z "$mirror" ]; then
  mirror="$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ {print $2}' | grep -v -- '-security' | head -n1 || true)"
fi
if [ -z "$mirror" ]; then
  mirror="$(grep -h '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
    | awk '{for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' | grep -v -- '-security' | head -n1 || true)"
fi
[ -n "$mirror" ] || { echo "no Debian mirror found in apt's sources; set DEBIAN_MIRROR" >&2; exit 2; }

# pip's CA bundle and find-links directory, as its configuration names them.
pip_cfg="$("$PY" -m pip config list 2>/dev/null || true)"
cert="$(printf '%s\n' "$pip_cfg" | sed -n "s/^[^=]*\.cert='\(.*\)'$/\1/p" | head -n1)"
links="$(printf '%s\n' "$pip_cfg" | sed -n "s/^[^=]*\.find-links='\(.*\)'$/\1/p" | head -n1)"
torch_whl=""
if [ -n "$links" ]; then
  torch_whl="$(ls "$links"/torch-2.13.0*cpu*cp311*.whl 2>/dev/null | head -n1 || true)"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
root="$work/rootfs"
echo "debootstrap bookworm from the host's mirror into $root"
debootstrap --variant=minbase \
  --include=python3,python3-pip,python3-venv,ca-certificates,util-linux,procps,redis-server,redis-tools \
  bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 || { tail -n 30 "$work/debootstrap.log" >&2; exit 1; }

# python:3.11-slim has `python` and `pip` on PATH and lets pip install system-wide: so must this.
ln -sf python3 "$root/usr/bin/python"
[ -e "$root/usr/bin/pip" ] || ln -sf pip3 "$root/usr/bin/pip"
rm -f "$root"/usr/lib/python3*/EXTERNALLY-MANAGED
printf 'deb %s bookworm main\n' "$mirror" >"$root/etc/apt/sources.list"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import - "$TAG-raw" >/dev/null

ctx="$work/ctx"
mkdir -p "$ctx"
{
  echo "FROM $TAG-raw"
  echo 'ENV LANG=C.UTF-8 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1'
  if [ -n "$cert" ] && [ -f "$cert" ]; then
    cp "$cert" "$ctx/ca.crt"
    echo 'COPY ca.crt /etc/ssl/certs/ca-certificates.crt'
    echo 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \'
    echo '    REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt'
  fi
  if [ -n "$torch_whl" ]; then
    cp "$torch_whl" "$ctx/"
    echo "COPY $(basename "$torch_whl") /tmp/"
    echo "RUN pip install /tmp/$(basename "$torch_whl") && rm /tmp/*.whl"
  else
    echo "warning: no CPU torch wheel in pip's find-links; the image build installs torch itself" >&2
  fi
  echo 'CMD ["python3"]'
} >"$ctx/Dockerfile"
DOCKER_BUILDKIT=0 docker build --network host -q -t "$TAG" "$ctx"
docker image rm "$TAG-raw" >/dev/null 2>&1 || true
echo "base image $TAG ready"
