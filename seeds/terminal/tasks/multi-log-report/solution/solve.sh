#!/bin/bash
# Oracle of multi-log-report.
set -euo pipefail
cd /app
cat > app.log <<'EOF'
2026-03-01T10:00:00 INFO service started
2026-03-01T10:00:05 WARN disk usage at 81%
2026-03-01T10:01:10 ERROR database timeout after 30s
2026-03-01T10:01:11 INFO retrying connection
2026-03-01T10:01:12 ERROR database timeout after 30s
2026-03-01T10:02:00 INFO request served
2026-03-01T10:03:30 ERROR cache miss storm
2026-03-01T10:04:00 WARN slow request 2.3s
2026-03-01T10:05:00 INFO request served
2026-03-01T10:06:00 DEBUG heartbeat
EOF
mkdir -p report
grep ' ERROR ' app.log > report/errors.log
python3 - <<'EOF'
import collections, json
lines = open("app.log").read().splitlines()
levels = collections.Counter(l.split()[1] for l in lines)
first = next(l.split()[0] for l in lines if l.split()[1] == "ERROR")
json.dump({"total": len(lines), "by_level": levels, "first_error": first},
          open("report/summary.json", "w"), indent=2)
EOF
