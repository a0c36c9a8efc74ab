# The isochron NIC agent FROM scratch: one static binary (CGO_ENABLED=0, -trimpath)
# and nothing else: no shell, no libc, no tc, no nft (it speaks netlink itself), no CA
# bundle (it talks only to the API server, whose CA comes with the service account
# token). The DaemonSet runs it as root with NET_ADMIN alone (config/nic-agent).
#
# `make docker-build` builds it from a context that holds only the binary that
# `make build` writes to bin/nic-agent (hack/make/docker.mk):
#   docker build -f build/nic-agent.Dockerfile bin/image-context/nic-agent
FROM scratch

# The release, VERSION of the Makefile: `make docker-build` passes it (no default here).
ARG VERSION

LABEL org.opencontainers.image.source="https://isochron.io/isochron" \
      org.opencontainers.image.title="isochron-nic-agent" \
      org.opencontainers.image.description="isochron NIC agent: schedules the RT-NICs of the crawler VMs on a node's uplink by deadline class, with their bandwidth and DSCP" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"

COPY nic-agent /nic-agent

# Numeric (the distroless "nonroot" user): there is no /etc/passwd, and
# runAsNonRoot can only verify a numeric user.
USER 65532:65532

ENTRYPOINT ["/nic-agent"]
