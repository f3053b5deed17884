#!/bin/bash
# Oracle of files-project-tree.
set -euo pipefail
cd /app
mkdir -p project/src project/tests project/docs
echo 'print("hello")' > project/src/main.py
: > project/tests/__init__.py
echo '# project' > project/README.md
: > project/docs/.keep
