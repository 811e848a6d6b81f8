#!/usr/bin/env bash
# Builds the container image traind:<version> from this tree: the Debian packages first (deploy/debian/build.sh,
# --config=portable binaries), then the image with docker (or podman: CONTAINER_TOOL=podman).
#   deploy/container/build.sh [--tag NAME:TAG]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
version=$(sed -n '1s/^traind (\([^)-]*\).*/\1/p' "$here/../debian/changelog")
tag=traind:$version
[[ ${1:-} == --tag ]] && tag=$2
tool=${CONTAINER_TOOL:-docker}
rm -rf "$here/dist"
bash "$here/../debian/build.sh" --out "$here/dist"
"$tool" build -f "$here/Containerfile" -t "$tag" "$here"
echo "built $tag"
