#!/bin/bash
# Oracle of log-server-errors.
set -euo pipefail
cd /app
cat > access.log <<'EOF'
10.0.0.1 - - [01/Mar/2026:10:00:01] "GET /index.html HTTP/1.1" 200 512
10.0.0.2 - - [01/Mar/2026:10:00:02] "GET /api/items HTTP/1.1" 500 87
10.0.0.1 - - [01/Mar/2026:10:00:03] "POST /api/items HTTP/1.1" 201 64
10.0.0.3 - - [01/Mar/2026:10:00:04] "GET /missing HTTP/1.1" 404 0
10.0.0.2 - - [01/Mar/2026:10:00:05] "GET /api/items HTTP/1.1" 500 87
10.0.0.4 - - [01/Mar/2026:10:00:06] "GET /index.html HTTP/1.1" 200 512
10.0.0.1 - - [01/Mar/2026:10:00:07] "GET /about.html HTTP/1.1" 200 300
10.0.0.2 - - [01/Mar/2026:10:00:08] "GET /api/users HTTP/1.1" 503 20
10.0.0.5 - - [01/Mar/2026:10:00:09] "GET /index.html HTTP/1.1" 200 512
10.0.0.1 - - [01/Mar/2026:10:00:10] "GET /api/items HTTP/1.1" 500 87
10.0.0.3 - - [01/Mar/2026:10:00:11] "GET /index.html HTTP/1.1" 200 512
10.0.0.2 - - [01/Mar/2026:10:00:12] "DELETE /api/items/3 HTTP/1.1" 204 0
10.0.0.1 - - [01/Mar/2026:10:00:13] "GET /index.html HTTP/1.1" 304 0
10.0.0.6 - - [01/Mar/2026:10:00:14] "GET /admin HTTP/1.1" 403 15
EOF
awk '$(NF-1) == 500' access.log | wc -l > errors.txt
awk '$(NF-1) >= 500 && $(NF-1) < 600' access.log | wc -l >> errors.txt
