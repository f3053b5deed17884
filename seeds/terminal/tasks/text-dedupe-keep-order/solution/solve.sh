#!/bin/bash
# Oracle of text-dedupe-keep-order.
set -euo pipefail
cd /app
cat > names.txt <<'EOF'
berlin
paris
rome
paris
madrid
berlin
lisbon
rome
vienna
paris
EOF
awk '!seen[$0]++' names.txt > unique.txt
