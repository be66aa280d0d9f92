# Berth's image: the one deploy/kubernetes runs (berth:local) and the one for
# running Berth in a container beside a Docker daemon (docs/operations.md).
# Build the binary first, beside this file, then the image:
#
#   CGO_ENABLED=1 go build -ldflags='-s -w' -o berth . && docker build -t berth:local .
#
# The binary links glibc dynamically (cgo: NVML is loaded at run time, when a
# driver is there), so the base must be the Debian release it was built on:
# Debian 12 by default, --build-arg BASE=… for another (TestBerthImage builds
# it on a local Debian 12 root file system).
ARG BASE=debian:bookworm-slim
FROM ${BASE}
# CA certificates for https webhooks, registries and S3 uploads (the slim
# image has none). Skipped when the base already has them.
RUN if [ ! -s /etc/ssl/certs/ca-certificates.crt ]; then \
      apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/*; \
    fi \
 && mkdir -p /var/lib/berth && chown 65532:65532 /var/lib/berth
COPY berth /usr/local/bin/berth
# Not root: the uid deploy/kubernetes runs it as. With the Docker socket
# mounted, add the socket's group (docker run --group-add).
USER 65532:65532
ENV BERTH_DATA=/var/lib/berth BERTH_ADDR=0.0.0.0:8080
VOLUME /var/lib/berth
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/berth"]
CMD ["serve"]
