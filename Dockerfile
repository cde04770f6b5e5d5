# syntax=docker/dockerfile:1.7
#
# loopwire container image: one image for every service.
#
#   docker build -t loopwire:local .
#   docker run --rm loopwire:local serve router     # one service
#   docker run --rm loopwire:local                  # `loopwire up`: all five in one process
#
# Two stages: the builder installs the project (and the OTLP exporter extra) into a
# virtualenv at /opt/loopwire; the runtime stage copies only that venv onto a clean
# python:3.11-slim, so no pip cache, build tools or sources end up in the image.

ARG PYTHON_IMAGE=python:3.11-slim

# -----------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
RUN python -m venv /opt/loopwire

# Only what the wheel is built from (see .dockerignore, which allow-lists the same paths).
COPY pyproject.toml README.md ./
COPY loopwire ./loopwire
COPY shared ./shared
COPY services ./services

# Build a wheel first (a real, non-editable package), then install it (OTLP export included).
# Every dependency ships manylinux wheels, so no compiler is needed.
RUN /opt/loopwire/bin/pip wheel --no-deps --wheel-dir /wheels . \
 && /opt/loopwire/bin/pip install "$(ls /wheels/loopwire-*.whl)" \
 && /opt/loopwire/bin/python -m compileall -q /opt/loopwire/lib \
 && /opt/loopwire/bin/loopwire --help > /dev/null

# -----------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime

LABEL org.opencontainers.image.title="loopwire" \
      org.opencontainers.image.description="A distributed runtime for LLM agent loops over NATS and Redis" \
      org.opencontainers.image.licenses="Apache-2.0"

# The root filesystem is read-only in Kubernetes (and in compose): never write .pyc at run
# time (they were compiled in the builder) and keep stdout unbuffered for the log shipper.
ENV PATH=/opt/loopwire/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    LOOPWIRE_METRICS_PORT=9464 \
    LOOPWIRE_LOG_JSON=true

RUN groupadd --system --gid 10001 loopwire \
 && useradd --system --uid 10001 --gid 10001 --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin loopwire

COPY --from=builder /opt/loopwire /opt/loopwire

USER 10001:10001
WORKDIR /tmp

# /metrics, /healthz (liveness) and /readyz (NATS + Redis answer) share this port.
EXPOSE 9464

# slim has no curl: ask /healthz with the interpreter that is already there.
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('LOOPWIRE_METRICS_PORT', '9464'), timeout=2)"]

# SIGTERM starts the graceful shutdown (stop fetching, finish in-flight steps, drain).
STOPSIGNAL SIGTERM

ENTRYPOINT ["loopwire"]
CMD ["up"]
