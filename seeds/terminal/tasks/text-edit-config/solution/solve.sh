#!/bin/bash
# Oracle of text-edit-config.
set -euo pipefail
cd /app
cat > app.conf <<'EOF'
# service configuration
name = inventory
host = 0.0.0.0
port = 3000
debug = true
workers = 4
# port = 1234 in the old setup
log_level = info
EOF
sed -i -e 's/^port = .*/port = 8080/' -e 's/^debug = .*/debug = false/' -e 's/^workers = .*/workers = 8/' app.conf
