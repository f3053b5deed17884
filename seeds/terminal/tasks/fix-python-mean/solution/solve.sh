#!/bin/bash
# Oracle of fix-python-mean.
set -euo pipefail
cd /app
cat > mean.py <<'EOF'
#!/usr/bin/env python3
"""Print the mean of the numbers given as arguments, with two decimals."""
import sys

if len(sys.argv) < 2:
    print("no numbers", file=sys.stderr)
    sys.exit(1)
numbers = [float(a) for a in sys.argv[1:]]
print("%.2f" % (sum(numbers) / len(numbers)))
EOF
