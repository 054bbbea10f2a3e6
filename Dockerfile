# The operator and the example driver's kubelet plugin, for those who build
# with Docker (`make docker-build`); `make image` builds the same images
# without a container engine (hack/imagegen).
#
#   docker build --target manager -t ghcr.io/drastack/drastack:v0.1.0 .
#   docker build --target example-plugin -t ghcr.io/drastack/drastack-example-plugin:v0.1.0 .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=linux GOARCH=${TARGETARCH} go build -trimpath -ldflags="-s -w" -o /out/manager ./cmd/manager && \
    CGO_ENABLED=0 GOOS=linux GOARCH=${TARGETARCH} go build -trimpath -ldflags="-s -w" -o /out/drastack-example-plugin ./cmd/drastack-example-plugin

# The kubelet plugin runs as root: it writes to the node's plugin registry
# and CDI folders. The example profile runs dra-example-kubeletplugin, the
# name the kubernetes-sigs dra-example-driver image uses too.
FROM scratch AS example-plugin
COPY --from=build /out/drastack-example-plugin /usr/bin/drastack-example-plugin
COPY --from=build /out/drastack-example-plugin /usr/bin/dra-example-kubeletplugin
ENV PATH=/usr/bin
ENTRYPOINT ["/usr/bin/drastack-example-plugin"]

# The operator as config/manager runs it: /manager, a numeric non-root user.
FROM scratch AS manager
COPY --from=build /out/manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
