# syntax=docker/dockerfile:1
#
# Build:  docker build -t toolsvc:dev --build-arg VERSION="$(git describe --always --dirty)" \
#           --build-arg REVISION="$(git rev-parse HEAD)" --build-arg CREATED="$(date -u +%Y-%m-%dT%H:%M:%SZ)" .
# Run:    docker run --rm --init -p 127.0.0.1:8080:8080 --read-only -e TOOLSVC_API_KEY=... \
#           -v toolsvc-workspace:/workspace -v toolsvc-data:/data toolsvc:dev
# (--init: as PID 1, toolsvc reaps only its own children; a process a tool's
# program leaves behind, re-parented to PID 1, would stay a zombie. The
# Kubernetes Deployment shares the pod's process namespace and Compose sets
# init: true for the same reason. deploy/container_test.go builds this
# image from these stages and runs it so.)
#
# Base images are pinned by tag. For reproducible production builds pin them
# by digest too, e.g.
#   --build-arg GO_IMAGE=golang:1.26.8-bookworm@sha256:<digest>
#   --build-arg RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot@sha256:<digest>
# (docker buildx imagetools inspect <image> prints the digest).
ARG GO_IMAGE=golang:1.26.8-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM --platform=$BUILDPLATFORM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
ARG TARGETOS=linux
ARG TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/toolsvc ./cmd/toolsvc \
 && CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags "-s -w" -o /out/toolsvc-sandbox ./cmd/toolsvc-sandbox \
 && mkdir -p /out/workspace /out/data

# distroless/static: CA certificates, tzdata, /etc/passwd with the nonroot
# user (65532), no shell, no package manager.
FROM ${RUNTIME_IMAGE}
ARG VERSION=dev
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="toolsvc" \
      org.opencontainers.image.description="Tool execution service for LLM gateways: validated, policy-checked, bounded tool calls over HTTP/JSON" \
      org.opencontainers.image.source="https://github.com/toolsvc/toolsvc" \
      org.opencontainers.image.url="https://github.com/toolsvc/toolsvc" \
      org.opencontainers.image.documentation="https://github.com/toolsvc/toolsvc#readme" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="gcr.io/distroless/static-debian12:nonroot"
COPY --from=build /out/toolsvc /usr/local/bin/toolsvc
COPY --from=build /out/toolsvc-sandbox /usr/local/bin/toolsvc-sandbox
COPY --from=build --chown=65532:65532 /out/workspace /workspace
COPY --from=build --chown=65532:65532 /out/data /data
# The binary writes only to /workspace and /data (and /tmp when a tool
# needs it), so the root filesystem can be read-only (--read-only, or
# readOnlyRootFilesystem in Kubernetes) with those mounted as volumes.
# A non-loopback address needs credentials: set TOOLSVC_API_KEY (or mount
# Caller resources), or TOOLSVC_AUTH=none behind a proxy that authenticates.
ENV TOOLSVC_ADDR=:8080 \
    TOOLSVC_WORKSPACE=/workspace \
    TOOLSVC_DATA_DIR=/data
USER 65532:65532
EXPOSE 8080
VOLUME ["/workspace", "/data"]
# SIGTERM drains: /readyz turns 503, calls in flight get TOOLSVC_SHUTDOWN_TIMEOUT.
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 CMD ["/usr/local/bin/toolsvc", "health"]
ENTRYPOINT ["/usr/local/bin/toolsvc"]
CMD ["serve"]
