#!/bin/bash
# Oracle of csv-region-totals.
set -euo pipefail
cd /app
cat > sales.csv <<'EOF'
date,region,product,amount
2026-01-03,north,widget,120.50
2026-01-04,south,gadget,80.00
2026-01-04,north,gadget,45.25
2026-01-05,east,widget,200.00
2026-01-06,south,widget,99.75
2026-01-07,east,gizmo,10.00
2026-01-08,north,gizmo,34.25
2026-01-09,west,widget,60.00
EOF
{ echo region,total; awk -F, 'NR > 1 {s[$2] += $4} END {for (r in s) printf "%s,%.2f\n", r, s[r]}' sales.csv | sort; } > totals.csv
