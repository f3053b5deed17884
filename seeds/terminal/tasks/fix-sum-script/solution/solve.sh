#!/bin/bash
# Oracle of fix-sum-script.
set -euo pipefail
cd /app
cat > sum.sh <<'EOF'
#!/bin/bash
# Print the sum of the integers in the file named by $1, one per line.
total=0
while read -r line || [ -n "$line" ]; do
  [ -n "$line" ] && total=$((total + line))
done < "$1"
echo "sum: $total"
EOF
chmod +x sum.sh
