#!/usr/bin/env bash
# Build the offline image the Docker tests of Python agents use: the base image
# (build-base-image.sh) plus this machine's own python3 (Debian's), copied in with the
# shared libraries it and its extension modules load and its standard library. No registry
# is needed. Idempotent: does nothing when the image exists.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
IMAGE="${EVOLVE_TEST_PYTHON_IMAGE:-evolve-harbor-test-python:1}"
BASE="${EVOLVE_TEST_BASE_IMAGE:-evolve-harbor-test-base:1}"
if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  exit 0
fi
bash "$here/build-base-image.sh"
py="$(readlink -f /usr/bin/python3 2>/dev/null || true)"
if [ -z "$py" ] || [ ! -x "$py" ]; then
  echo "build-python-image: /usr/bin/python3 is missing (apt-get install -y python3)" >&2
  exit 1
fi
ver="$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
stdlib="/usr/lib/python$ver"
ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
root="$ctx/root"
mkdir -p "$root/usr/bin" "$root/usr/lib"
cp "$py" "$root/usr/bin/python$ver"
ln -s "python$ver" "$root/usr/bin/python3"
# The standard library, without its tests, GUI, build and packaging parts.
tar -C /usr/lib -c \
  --exclude="python$ver/test" --exclude="python$ver/idlelib" --exclude="python$ver/tkinter" \
  --exclude="python$ver/ensurepip" --exclude="python$ver/lib2to3" \
  --exclude="python$ver/config-*" --exclude="python$ver/dist-packages" \
  --exclude="python$ver/site-packages" --exclude="__pycache__" \
  "python$ver" | tar -C "$root/usr/lib" -x
# Every shared library the interpreter and its extension modules need, at its own path.
{ ldd "$py"; find "$stdlib/lib-dynload" -name '*.so' -exec ldd {} \; ; } 2>/dev/null \
  | awk '/=>/ { print $3 } /^[ \t]*\// { print $1 }' | sort -u | while read -r lib; do
    [ -f "$lib" ] || continue
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
printf 'FROM %s\nCOPY root/ /\n' "$BASE" > "$ctx/Dockerfile"
# The classic builder resolves FROM from the local store (no registry here).
if ! DOCKER_BUILDKIT=0 docker build -q -t "$IMAGE" "$ctx" >/dev/null 2>"$ctx/build.err"; then
  cat "$ctx/build.err" >&2
  exit 1
fi
echo "build-python-image: built $IMAGE"
