#!/usr/bin/env bash
# Build the one image the swe/<project> family runs in with the docker sandbox provider: a Python
# base plus pytest and its run-time dependencies (the same versions as this installation's test
# runner, copied from it, so nothing is downloaded from the package index) and `patch`. No project
# and no task is in it: seeding writes the checkout into each container's /work.
#
#   scripts/docker-swe-image.sh [BASE] [TAG]
#     BASE: a Debian-based image with python3 (default python:3.12-slim; where Docker Hub is out of
#           reach, the local base of scripts/docker-test-base.sh: rollgate-test-base:bookworm)
#     TAG:  default rollgate-swe:latest (the image the family uses unless swe.options.image says)
# Needs a running dockerd and Rollgate installed for ${PYTHON:-python3}. Rebuilds every time
# (a few seconds over a cached base); apt-get runs only when the base has no `patch`.
set -euo pipefail

BASE="${1:-python:3.12-slim}"
TAG="${2:-rollgate-swe:latest}"
PY="${PYTHON:-python3}"

runner="$("$PY" -c 'from rollgate.core.settings import Settings
from rollgate.resources_servers.families.swe.sources import ensure_runner
print(ensure_runner(Settings().home))')"

ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
cp -r "$runner" "$ctx/runner"
cat >"$ctx/Dockerfile" <<EOF
FROM $BASE
COPY runner /opt/rollgate-swe-runner
RUN set -e; \\
    command -v patch >/dev/null || { apt-get update && apt-get install -y --no-install-recommends patch \\
      && rm -rf /var/lib/apt/lists/*; }; \\
    chmod -R a+rX /opt/rollgate-swe-runner; \\
    site="\$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"; \\
    mkdir -p "\$site" && echo /opt/rollgate-swe-runner >"\$site/rollgate-swe-runner.pth"; \\
    for tool in patch find grep sha256sum tar timeout; do command -v \$tool >/dev/null; done; \\
    python3 -m pytest --version
LABEL rollgate.swe.runner="$(basename "$runner")"
CMD ["python3"]
EOF
# The classic builder: BuildKit would fetch its dockerfile frontend image from Docker Hub.
DOCKER_BUILDKIT=0 docker build --network host -q -t "$TAG" "$ctx"
echo "swe image $TAG ready (base $BASE)"
