#!/bin/bash
# Oracle of files-release-symlink.
set -euo pipefail
cd /app
for v in v1 v2 v3; do mkdir -p releases/$v; echo $v > releases/$v/VERSION; done
ln -sfn releases/v3 current
