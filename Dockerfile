# syntax=docker/dockerfile:1.7
#
# loopwire container image: one image for every service.
#
#   docker build -t loopwire:local .
#   docker run --rm loopwire:local serve router     # one service
#   docker run --rm loopwire:local                  # `loopwire up`: all five in one process
#   docker build --target agents -t loopwire:local-agents .   # llm with the coding agents
#
# The builder installs the project (and the OTLP exporter extra) into a virtualenv at
# /opt/loopwire; the `service` stage copies only that venv onto a clean python:3.11-slim,
# so no pip cache, build tools or sources end up in the image. `runtime` (the default
# target) is that image. `agents` adds Node and the coding agents of the external-executor
# profiles (claude_code, codex, opencode, acp), installed by `npm ci` from deploy/agents'
# lock in the `agents-build` stage: the image for the llm service when those profiles run.

ARG PYTHON_IMAGE=python:3.11-slim
ARG NODE_IMAGE=node:20-bookworm-slim

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
FROM ${NODE_IMAGE} AS agents-build

ENV NPM_CONFIG_UPDATE_NOTIFIER=false \
    NPM_CONFIG_FUND=false \
    NPM_CONFIG_AUDIT=false

WORKDIR /opt/agents
COPY deploy/agents/package.json deploy/agents/package-lock.json ./
RUN npm ci --loglevel=error \
 && ./node_modules/.bin/claude --version \
 && ./node_modules/.bin/codex --version \
 && ./node_modules/.bin/opencode --version

# -----------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS service

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

# -----------------------------------------------------------------------------------------
# The llm service's image for the external-executor profiles: the service image, Node (the
# agents' launchers and Claude Code are Node programs) and the pinned agents on PATH.
FROM service AS agents

USER 0:0
# Node's binary needs the C++ runtime, which python:slim does not carry.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends libstdc++6 \
 && rm -rf /var/lib/apt/lists/* \
 && install -d -o 10001 -g 10001 -m 0750 /var/lib/loopwire-executor
COPY --from=agents-build /usr/local/bin/node /usr/local/bin/node
COPY --from=agents-build /opt/agents/node_modules /opt/agents/node_modules

# The agents keep their state under LOOPWIRE_EXECUTOR_DIR (their sessions, which a
# follow-up resumes, and the sessions' working directories) and HOME (their own caches):
# a directory of the service's user, where the Helm chart and docker-compose.agents.yml
# mount a volume (the root filesystem is read-only there).
ENV PATH=/opt/agents/node_modules/.bin:$PATH \
    HOME=/var/lib/loopwire-executor/home \
    LOOPWIRE_EXECUTOR_DIR=/var/lib/loopwire-executor \
    DISABLE_AUTOUPDATER=1 \
    OPENCODE_DISABLE_AUTOUPDATE=1

# The agents start on this image (Node and its C++ runtime found); nothing they write stays.
RUN HOME=/tmp/agents-check node --version \
 && HOME=/tmp/agents-check claude --version \
 && HOME=/tmp/agents-check codex --version \
 && HOME=/tmp/agents-check opencode --version \
 && rm -rf /tmp/agents-check

USER 10001:10001

# -----------------------------------------------------------------------------------------
# The default target: the service image as it is.
FROM service AS runtime
