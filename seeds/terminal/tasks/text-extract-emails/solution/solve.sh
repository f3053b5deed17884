#!/bin/bash
# Oracle of text-extract-emails.
set -euo pipefail
cd /app
cat > contacts.txt <<'EOF'
Alice Smith <alice@example.com>, bob@example.org
Contact: carol.jones@mail.example.net (work); alice@example.com
dave_99@example.com wrote to bob@example.org and to eve+news@example.io.
Not an address: frank@ or @example.com or grace@localhost
EOF
grep -oE '[A-Za-z0-9._+-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+' contacts.txt | sort -u > emails.txt
