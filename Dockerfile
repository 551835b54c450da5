# The freqcap console image: a static binary in an empty image, so building it
# needs no base image and no registry.
#
# The build context is a directory holding only the binary, built on the host:
#
#   CGO_ENABLED=0 go build -trimpath -o freqcap ./cmd/freqcap
#   docker build -t freqcap/console:dev .
#
# (.dockerignore sends nothing but ./freqcap from the repository root);
# scripts/build-images.sh does both with a temporary context. See docs/DOCKER.md.
FROM scratch
COPY freqcap /freqcap
USER 65534:65534
EXPOSE 8080
ENTRYPOINT ["/freqcap"]
CMD ["console", "--addr", "0.0.0.0:8080"]
