# syntax=docker/dockerfile:1
# The extauthz image: a static binary (CGO_ENABLED=0) on distroless, run as a non-root user,
# with its version and commit stamped in. Build from the repository root:
#
#   docker build --build-arg VERSION="$(git describe --tags --always --dirty)" \
#     --build-arg COMMIT="$(git rev-parse HEAD)" -t extauthz .
#
# The build context has no .git (.dockerignore), so the version comes from these arguments.
FROM golang:1.26.8-bookworm AS build
# Empty means unknown: `extauthz version` then shows what the build info holds.
ARG VERSION=""
ARG COMMIT=""
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" -o /out/extauthz ./cmd/extauthz

# A static busybox provides wget for the container health check (distroless has no shell).
FROM busybox:1.37.0-musl AS probe

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=""
ARG COMMIT=""
LABEL org.opencontainers.image.title="extauthz" \
      org.opencontainers.image.description="Authorization and rate-limit service for Envoy (ext_authz and the rate-limit service)" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}"
COPY --from=build /out/extauthz /usr/local/bin/extauthz
COPY --from=probe /bin/wget /usr/local/bin/wget
COPY LICENSE /usr/share/doc/extauthz/LICENSE
# The config and rules of the shipped Envoy config (docker-compose.yml mounts its own over
# them), and the Quickstart's example: `serve --config examples/extauthz.yaml`.
COPY envoy-config/rules.yaml envoy-config/extauthz.yaml /etc/extauthz/
COPY examples/ /etc/extauthz/examples/
WORKDIR /etc/extauthz
# distroless's nonroot user (65532): the service needs no privilege, its ports are above 1024.
USER nonroot:nonroot
EXPOSE 9001 9002
HEALTHCHECK --interval=5s --timeout=2s --retries=3 \
    CMD ["/usr/local/bin/wget", "-q", "-O", "/dev/null", "http://127.0.0.1:9002/readyz"]
ENTRYPOINT ["/usr/local/bin/extauthz"]
CMD ["serve", "--config", "/etc/extauthz/extauthz.yaml"]
