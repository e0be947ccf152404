# One image for every role: the entrypoint mounts whatever role set the node file (or --roles) says.
FROM python:3.11-slim
WORKDIR /opt/crewlet
COPY pyproject.toml README.md ./
COPY shared ./shared
COPY services ./services
COPY crewlet ./crewlet
COPY examples ./examples
# uid/gid 10001: the Kubernetes manifests run as this user (deploy/k8s)
RUN pip install --no-cache-dir . && groupadd --system --gid 10001 crewlet \
    && useradd --system --uid 10001 --gid 10001 --home /var/lib/crewlet crewlet \
    && mkdir -p /var/lib/crewlet && chown crewlet /var/lib/crewlet
USER crewlet
EXPOSE 8080
ENTRYPOINT ["crewlet"]
CMD ["node", "--node", "/etc/crewlet/node.yaml", "--company", "/etc/crewlet/company.yaml"]
