# syntax=docker/dockerfile:1
# Build: docker build -t extauthz .
FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/extauthz ./cmd/extauthz

# A static busybox provides wget for the container health check (distroless has no shell).
FROM busybox:1.37.0-musl AS probe

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/extauthz /usr/local/bin/extauthz
COPY --from=probe /bin/wget /usr/local/bin/wget
COPY envoy-config/rules.yaml envoy-config/extauthz.yaml /etc/extauthz/
USER nonroot:nonroot
EXPOSE 9001 9002
ENTRYPOINT ["/usr/local/bin/extauthz"]
CMD ["serve", "--config", "/etc/extauthz/extauthz.yaml"]
