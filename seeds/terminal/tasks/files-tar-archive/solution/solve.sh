#!/bin/bash
# Oracle of files-tar-archive.
set -euo pipefail
cd /app
mkdir -p data
echo 1 > data/one.txt; echo 2 > data/two.txt; echo 3 > data/three.txt
tar -czf data.tar.gz data
