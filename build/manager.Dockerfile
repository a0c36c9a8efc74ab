# The isochron manager FROM scratch: one static binary (CGO_ENABLED=0, -trimpath)
# and nothing else: no shell, no libc, no CA bundle (it talks only to the API
# server, whose CA comes with the service account token).
#
# `make docker-build` builds it from a context that holds only the binary that
# `make build` writes to bin/manager (hack/make/docker.mk):
#   docker build -f build/manager.Dockerfile bin/image-context/manager
FROM scratch

# The release, VERSION of the Makefile: `make docker-build` passes it (no default here).
ARG VERSION

LABEL org.opencontainers.image.source="https://isochron.io/isochron" \
      org.opencontainers.image.title="isochron-manager" \
      org.opencontainers.image.description="isochron operator: sizes and places real-time crawler VMs (KubeVirt) by predicted contention" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"

COPY manager /manager

# Numeric (the distroless "nonroot" user): there is no /etc/passwd, and
# runAsNonRoot can only verify a numeric user.
USER 65532:65532

ENTRYPOINT ["/manager"]
