#!/bin/sh
# What the chrislusf/seaweedfs image's entrypoint does for `server` (the only command compose.yaml
# gives it): the data dir /data, volumes sized 1 GB and counted by free space.
set -e
if [ "${1:-}" = server ]; then
  shift
  exec /usr/bin/weed server -dir=/data -volume.max=0 -master.volumePreallocate -master.volumeSizeLimitMB=1024 "$@"
fi
exec /usr/bin/weed "$@"
