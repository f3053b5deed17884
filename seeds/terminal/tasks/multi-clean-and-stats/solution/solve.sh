#!/bin/bash
# Oracle of multi-clean-and-stats.
set -euo pipefail
cd /app
cat > clean.sh <<'EOF'
#!/bin/bash
awk -F, 'NR == 1 || $2 ~ /^-?[0-9]+([.][0-9]+)?$/'
EOF
chmod +x clean.sh
cat > readings.csv <<'EOF'
sensor,celsius
s1,21.5
s2,n/a
s3,19.0
s1,
s4,23.25
s2,-3.5
s5,abc
s3,30
EOF
./clean.sh < readings.csv > clean.csv
python3 - <<'EOF'
import csv, json
values = [float(r["celsius"]) for r in csv.DictReader(open("clean.csv"))]
json.dump({"count": len(values), "min": min(values), "max": max(values),
           "mean": round(sum(values) / len(values), 2)}, open("stats.json", "w"))
EOF
