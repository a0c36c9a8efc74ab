# rtprobe FROM scratch: one static binary (CGO_ENABLED=0, -trimpath) and nothing
# else. Meant for a Kubernetes Job container: there is no shell, so the Job gives
# the subcommand and flags as args (exec form), e.g. ["timer", "--json"]; the
# kubelet mounts /dev/termination-log writable by any user, so the probe can leave
# its result there while running as 65532.
#
# `make docker-build` builds it from a context that holds only the binary that
# `make build` writes to bin/rtprobe (hack/make/docker.mk):
#   docker build -f build/rtprobe.Dockerfile bin/image-context/rtprobe
FROM scratch

# The release, VERSION of the Makefile: `make docker-build` passes it (no default here).
ARG VERSION

LABEL org.opencontainers.image.source="https://isochron.io/isochron" \
      org.opencontainers.image.title="isochron-rtprobe" \
      org.opencontainers.image.description="rtprobe: timer latency, gateway interval, crawl lateness and UDP round-trip probes for real-time crawler VMs" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"

COPY rtprobe /rtprobe
# The probe agent's disk, which a crawler's VMI mounts as a containerDisk (KubeVirt wants
# it readable by qemu, 107).
COPY --chown=107:107 agent.img /disk/agent.img

# Numeric (the distroless "nonroot" user): there is no /etc/passwd, and
# runAsNonRoot can only verify a numeric user.
USER 65532:65532

ENTRYPOINT ["/rtprobe"]
