# gitsync container image: runs `gitsync run` next to APISIX (see examples/compose/).
# Build with scripts/build-image.sh (docker or podman; a local Debian base where there is no registry).
ARG BASE_IMAGE=docker.io/library/python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gitsync ./gitsync
COPY sample-repo ./sample-repo
RUN python -m pip install --no-cache-dir --root-user-action=ignore build==1.2.2 \
 && python -m build --wheel --outdir /dist .

FROM ${BASE_IMAGE}
LABEL org.opencontainers.image.title="apisix-gitsync" \
      org.opencontainers.image.description="gitsync: GitOps pull agent for Apache APISIX (API-driven standalone)" \
      org.opencontainers.image.licenses="Apache-2.0"
# ssh for ssh:// remotes; nothing else: dulwich speaks git itself.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends openssh-client \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 gitsync \
 && useradd --system --uid 10001 --gid gitsync --home-dir /var/lib/gitsync --shell /usr/sbin/nologin gitsync \
 && install -d -o gitsync -g gitsync -m 0700 /var/lib/gitsync
COPY --from=build /dist/*.whl /tmp/
RUN python -m pip install --no-cache-dir --root-user-action=ignore /tmp/*.whl && rm -f /tmp/*.whl

# Configuration comes from GITSYNC_* variables and docker secrets in /run/secrets
# (admin_key, git_token, age_key, webhook_secret are picked up from there by name).
ENV GITSYNC_STATE_DIR=/var/lib/gitsync \
    GITSYNC_LISTEN=0.0.0.0:9480 \
    GITSYNC_LOG_JSON=true \
    PYTHONUNBUFFERED=1
USER 10001:10001
VOLUME ["/var/lib/gitsync"]
EXPOSE 9480
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9480/healthz', timeout=4)"]
ENTRYPOINT ["gitsync"]
CMD ["run"]
