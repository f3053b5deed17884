#!/bin/bash
# Oracle of csv-join-report.
set -euo pipefail
cd /app
cat > orders.csv <<'EOF'
order_id,customer_id,amount
1001,c1,25.00
1002,c2,40.50
1003,c1,10.00
1004,c3,5.25
1005,c2,9.50
1006,c1,15.00
EOF
cat > customers.csv <<'EOF'
customer_id,name
c1,Ana
c2,Ben
c3,Caro
c4,Dev
EOF
python3 - <<'EOF'
import csv
names = {r["customer_id"]: r["name"] for r in csv.DictReader(open("customers.csv"))}
count, total = {c: 0 for c in names}, {c: 0.0 for c in names}
for r in csv.DictReader(open("orders.csv")):
    count[r["customer_id"]] += 1
    total[r["customer_id"]] += float(r["amount"])
rows = sorted(names, key=lambda c: (-total[c], names[c]))
with open("report.csv", "w") as f:
    f.write("name,orders,total\n")
    for c in rows:
        f.write("%s,%d,%.2f\n" % (names[c], count[c], total[c]))
EOF
