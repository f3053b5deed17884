#!/bin/bash
# Oracle of text-word-frequency.
set -euo pipefail
cd /app
cat > text.txt <<'EOF'
The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs.
A fox is quick, a dog is lazy, and the quick fox wins the race.
Dog days are over: the fox, the dog and the cat all rest.
EOF
tr 'A-Z' 'a-z' < text.txt | grep -oE '[a-z]+' | sort | uniq -c | sort -k1,1nr -k2,2 | head -5 | awk '{print $2, $1}' > freq.txt
