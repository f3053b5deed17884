#!/bin/bash
# Oracle of fix-backup-script.
set -euo pipefail
cd /app
cat > backup.sh <<'EOF'
#!/bin/bash
# Copy every .txt file of directory $1 into directory $2 (created if missing),
# adding the suffix .bak to each copy's name.
src=$1
dst=$2
mkdir -p "$dst"
n=0
for f in "$src"/*.txt; do
  [ -f "$f" ] || continue
  cp "$f" "$dst/$(basename "$f").bak"
  n=$((n + 1))
done
echo "copied $n files"
EOF
chmod +x backup.sh
