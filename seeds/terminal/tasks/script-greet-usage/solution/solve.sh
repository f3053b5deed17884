#!/bin/bash
# Oracle of script-greet-usage.
set -euo pipefail
cd /app
cat > greet.sh <<'EOF'
#!/bin/bash
if [ $# -ne 1 ]; then
  echo "usage: greet.sh NAME" >&2
  exit 2
fi
echo "Hello, $1!"
EOF
chmod +x greet.sh
