# syntax=docker/dockerfile:1
# Build: docker build -t toolsvc --build-arg VERSION=$(git describe --always) .
# Run:   docker run -p 8080:8080 -e TOOLSVC_API_KEY=... toolsvc
ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/toolsvc ./cmd/toolsvc \
 && mkdir -p /out/workspace /out/data

# distroless/static: CA certificates, tzdata, /etc/passwd with the nonroot user, nothing else.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/toolsvc /usr/local/bin/toolsvc
COPY --from=build --chown=65532:65532 /out/workspace /workspace
COPY --from=build --chown=65532:65532 /out/data /data
# A non-loopback address needs credentials: set TOOLSVC_API_KEY (or mount Caller
# resources), or TOOLSVC_AUTH=none behind a trusted proxy.
ENV TOOLSVC_ADDR=:8080 \
    TOOLSVC_WORKSPACE=/workspace
USER 65532:65532
EXPOSE 8080
VOLUME ["/workspace", "/data"]
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 CMD ["/usr/local/bin/toolsvc", "health"]
ENTRYPOINT ["/usr/local/bin/toolsvc"]
