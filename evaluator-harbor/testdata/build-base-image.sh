#!/usr/bin/env bash
# Build the offline base image the Docker and harbor tests use: FROM scratch + Debian's
# busybox-static (sh and the coreutils applets) + bash-static as /bin/bash (Harbor wraps every
# command in `bash -c`). No registry is needed: the rootfs is assembled here and loaded with
# `docker import`. Idempotent: does nothing when the image exists.
set -euo pipefail
IMAGE="${EVOLVE_TEST_BASE_IMAGE:-evolve-harbor-test-base:1}"
if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  exit 0
fi
for f in /bin/busybox /bin/bash-static; do
  if [ ! -x "$f" ]; then
    echo "build-base-image: $f is missing (apt-get install -y busybox-static bash-static)" >&2
    exit 1
  fi
done
root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,etc,tmp,app,root,usr/bin,sbin,usr/sbin}
cp /bin/busybox "$root/bin/busybox"
cp /bin/bash-static "$root/bin/bash"
for applet in $(/bin/busybox --list); do
  [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
done
ln -s /bin/env "$root/usr/bin/env"
echo 'root:x:0:0:root:/root:/bin/sh' > "$root/etc/passwd"
echo 'root:x:0:' > "$root/etc/group"
chmod 1777 "$root/tmp"
tar -C "$root" -c . | docker import \
  -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  -c 'WORKDIR /app' \
  -c 'CMD ["/bin/sh"]' \
  - "$IMAGE" >/dev/null
echo "build-base-image: built $IMAGE"
