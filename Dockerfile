# syntax=docker/dockerfile:1
# The dispatcher controller image: `dispatcher run`, as a non-root user.
#   docker build -t REGISTRY/dispatcher:0.1.0 .
# The wheel carries the package, the built-in definitions (dispatcher.catalog) and its data;
# the controller reads its config from /etc/dispatcher/config.yaml (the ConfigMap of
# deploy/kustomization.yaml).

# -- build: a wheel and its dependencies' wheels ------------------------------------------
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY dispatcher ./dispatcher
COPY definitions ./definitions
RUN pip wheel --wheel-dir /wheels .

# -- run ------------------------------------------------------------------------------------
FROM python:3.11-slim
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    HOME=/tmp MPLCONFIGDIR=/tmp/matplotlib
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels dispatcher \
 && groupadd --gid 65532 dispatcher \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /tmp \
      --shell /usr/sbin/nologin dispatcher
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["dispatcher", "run"]
CMD ["--config", "/etc/dispatcher/config.yaml"]
