#!/bin/bash
# Oracle of json-stock-report.
set -euo pipefail
cd /app
cat > products.json <<'EOF'
[
  {
    "sku": "A-100",
    "name": "hammer",
    "stock": 12,
    "price": 9.5
  },
  {
    "sku": "A-101",
    "name": "screwdriver",
    "stock": 0,
    "price": 4.25
  },
  {
    "sku": "B-200",
    "name": "drill",
    "stock": 3,
    "price": 79.0
  },
  {
    "sku": "B-201",
    "name": "saw",
    "stock": 0,
    "price": 15.0
  },
  {
    "sku": "C-300",
    "name": "tape",
    "stock": 40,
    "price": 2.0
  },
  {
    "sku": "C-301",
    "name": "glue",
    "stock": 0,
    "price": 3.75
  }
]
EOF
python3 - <<'EOF'
import json
products = json.load(open("products.json"))
with open("out_of_stock.txt", "w") as f:
    f.write("".join(n + "\n" for n in sorted(p["name"] for p in products if p["stock"] == 0)))
with open("stock_value.txt", "w") as f:
    f.write("%.2f\n" % sum(p["stock"] * p["price"] for p in products))
EOF
