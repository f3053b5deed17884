#!/bin/bash
# Oracle of files-split-parts.
set -euo pipefail
cd /app
cat > fruits.txt <<'EOF'
apple
banana
cherry
date
elderberry
fig
grape
honeydew
kiwi
lemon
mango
nectarine
EOF
mkdir -p parts
for i in 1 2 3; do sed -n "$(( (i - 1) * 4 + 1 )),$(( i * 4 ))p" fruits.txt > parts/part-$i.txt; done
