# The stand-in for otel/opentelemetry-collector (Docker Hub only): otlp-sink.py on the local base.
ARG BASE
FROM ${BASE}
COPY otlp-sink.py /usr/local/bin/otlp-sink.py
EXPOSE 4318
ENTRYPOINT ["python3", "/usr/local/bin/otlp-sink.py"]
