# One image for every role: the entrypoint mounts whatever role set the node file (or --roles) says.
#
# BASE is any image with Python 3.11 and `python3 -m venv`: python:3.11-slim by default;
# `make compose-check` passes a Debian bookworm rootfs it builds locally (deploy/compose-check).
#
# Hermetic when ./wheelhouse holds the wheels (`make wheelhouse`: crewlet and every dependency,
# built on the host with `pip wheel . -w wheelhouse`): they are installed with --no-index, so the
# build needs no network (`make compose-check` builds with --network=none). With an empty
# wheelhouse (a plain `docker compose up` after a clone) crewlet is installed from this source
# tree and its dependencies from PyPI.
ARG BASE=python:3.11-slim
FROM ${BASE}
COPY pyproject.toml README.md /tmp/crewlet-src/
COPY shared /tmp/crewlet-src/shared
COPY services /tmp/crewlet-src/services
COPY crewlet /tmp/crewlet-src/crewlet
COPY wheelhouse /tmp/wheelhouse
# uid/gid 10001: the Kubernetes manifests run as this user (deploy/k8s); its home is the store
RUN set -eu; \
    python3 -m venv /opt/crewlet; \
    if ls /tmp/wheelhouse/crewlet-*.whl >/dev/null 2>&1; then \
      echo "installing crewlet from the wheelhouse (--no-index)"; \
      /opt/crewlet/bin/pip install --no-cache-dir --no-index --find-links /tmp/wheelhouse crewlet; \
    else \
      echo "no wheelhouse (make wheelhouse): installing crewlet's dependencies from PyPI"; \
      /opt/crewlet/bin/pip install --no-cache-dir /tmp/crewlet-src; \
    fi; \
    rm -rf /tmp/crewlet-src /tmp/wheelhouse; \
    /opt/crewlet/bin/crewlet --help >/dev/null; \
    groupadd --system --gid 10001 crewlet; \
    useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/crewlet --no-create-home crewlet; \
    mkdir -p /var/lib/crewlet /etc/crewlet; \
    chown 10001:10001 /var/lib/crewlet
ENV PATH=/opt/crewlet/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /var/lib/crewlet
EXPOSE 8080
ENTRYPOINT ["crewlet"]
CMD ["node", "--node", "/etc/crewlet/node.yaml", "--company", "/etc/crewlet/company.yaml"]
