#!/bin/bash
# Oracle of script-lowercase-names.
set -euo pipefail
cd /app
cat > lower.sh <<'EOF'
#!/bin/bash
dir=$1
for f in "$dir"/*; do
  [ -f "$f" ] || continue
  name=$(basename "$f")
  lower=$(printf '%s' "$name" | tr 'A-Z' 'a-z')
  [ "$name" = "$lower" ] && continue
  if [ -e "$dir/$lower" ]; then echo "skip: $name"; continue; fi
  mv "$f" "$dir/$lower"
done
EOF
chmod +x lower.sh
