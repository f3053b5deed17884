#!/bin/bash
# Oracle of csv-to-json.
set -euo pipefail
cd /app
cat > users.csv <<'EOF'
id,name,email,age,active
1,Ada Lovelace,ada@example.com,36,yes
2,Alan Turing,alan@example.com,41,no
3,Grace Hopper,grace@example.com,85,yes
4,Linus Torvalds,linus@example.com,56,yes
EOF
python3 - <<'EOF'
import csv, json
rows = [{"id": int(r["id"]), "name": r["name"], "email": r["email"], "age": int(r["age"]),
         "active": r["active"] == "yes"} for r in csv.DictReader(open("users.csv"))]
json.dump(rows, open("users.json", "w"), indent=2)
EOF
