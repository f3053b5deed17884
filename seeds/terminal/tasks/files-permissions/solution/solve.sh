#!/bin/bash
# Oracle of files-permissions.
set -euo pipefail
cd /app
mkdir -p bin shared
printf '#!/bin/sh\necho ok\n' > bin/hello.sh
chmod 755 bin/hello.sh
echo token-42 > secret.txt
chmod 600 secret.txt
chmod 750 shared
