#!/bin/bash
# Oracle of json-deep-merge.
set -euo pipefail
cd /app
cat > defaults.json <<'EOF'
{
  "server": {
    "host": "localhost",
    "port": 80,
    "tls": {
      "enabled": false,
      "cert": null
    }
  },
  "features": [
    "search"
  ],
  "log": {
    "level": "info"
  }
}
EOF
cat > overrides.json <<'EOF'
{
  "server": {
    "port": 8443,
    "tls": {
      "enabled": true,
      "cert": "/etc/cert.pem"
    }
  },
  "features": [
    "search",
    "export"
  ],
  "log": {
    "file": "/var/log/app.log"
  }
}
EOF
python3 - <<'EOF'
import json
def merge(a, b):
    out = dict(a)
    for k, v in b.items():
        out[k] = merge(out[k], v) if isinstance(out.get(k), dict) and isinstance(v, dict) else v
    return out
json.dump(merge(json.load(open("defaults.json")), json.load(open("overrides.json"))),
          open("merged.json", "w"), indent=2)
EOF
