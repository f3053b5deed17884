#!/usr/bin/env bash
# What host/tests/viewer.rs needs: Debian's headless-capable Chromium, which the viewer's
# browser test drives over the DevTools protocol. Idempotent: does nothing when a
# chromium binary is already on PATH.
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "viewer-setup: no chromium and no apt-get; install Chromium by hand" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
command -v chromium >/dev/null
