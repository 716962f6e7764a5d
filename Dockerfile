# edgeagent container image: the node agent by default (`edgeagent run`); any subcommand works with
# `--entrypoint edgeagent`, e.g. the controller Deployment in deploy/.
#
# Networking: the agent binds 127.0.0.1:10267 by default. Run it with the host's network namespace
# (`docker run --network host`, or `hostNetwork: true` in Kubernetes) so that the node's loopback is the
# agent's loopback; see docs/operations.md ("Running as a sidecar").

# ---- builder: build the wheel and install it, with its dependencies, into a self-contained venv ----
# The node install: no extras (the simulator's and exec kubeconfigs' kubernetes_asyncio stay out), at the
# versions of constraints.txt, into a venv without pip and setuptools (the image never installs anything).
FROM python:3.11-slim AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY edgeagent ./edgeagent
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
    && python -m venv --without-pip /opt/edgeagent \
    && python -m pip --python /opt/edgeagent/bin/python install -c constraints.txt /wheels/edgeagent-*.whl

# ---- runtime: the venv on a clean slim Python, no build tools, non-root ----
FROM python:3.11-slim

LABEL org.opencontainers.image.title="edgeagent" \
      org.opencontainers.image.description="Edge node upgrade agent and controller for Kubernetes DaemonSets (OpenYurt OTA / AdvancedRollingUpdate compatible)" \
      org.opencontainers.image.licenses="Apache-2.0"

# A fixed numeric uid so that Kubernetes can verify runAsNonRoot and hostPath ownership can be prepared.
RUN groupadd --system --gid 10267 edgeagent \
    && useradd --system --uid 10267 --gid 10267 --home-dir /var/lib/edgeagent --no-create-home \
       --shell /usr/sbin/nologin edgeagent \
    && mkdir -p /var/lib/edgeagent \
    && chown 10267:10267 /var/lib/edgeagent \
    && chmod 0700 /var/lib/edgeagent

COPY --from=builder /opt/edgeagent /opt/edgeagent

ENV PATH="/opt/edgeagent/bin:${PATH}" \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    EDGEAGENT_BIND=127.0.0.1 \
    EDGEAGENT_PORT=10267 \
    EDGEAGENT_STATE_DIR=/var/lib/edgeagent \
    EDGEAGENT_LOG_FORMAT=json

USER 10267:10267
WORKDIR /var/lib/edgeagent
# Pod snapshot and the durable upgrade queue (one SQLite file); must outlive the container.
VOLUME ["/var/lib/edgeagent"]
EXPOSE 10267

# `edgeagent healthcheck` reads the running process's own flags and EDGEAGENT_* variables, so it probes the
# port and address really in use: `docker run IMAGE --port 13267` is probed on 13267, and the controller run
# from this image (`--entrypoint edgeagent … controller`) on its --metrics-port. The image carries no curl.
# Docker keeps HEALTHCHECK; podman and buildah drop it unless the image is built with `--format docker`
# (the OCI image format has no healthcheck field).
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["edgeagent", "healthcheck"]

ENTRYPOINT ["edgeagent", "run"]
