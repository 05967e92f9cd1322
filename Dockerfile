# syntax=docker/dockerfile:1.7
#
# One image, two binaries: `weir-operator` (the Kubernetes operator) and `weir` (the bundled
# stream runtime the operator runs as coordinator and worker pods).
#
#   DOCKER_BUILDKIT=1 docker build \
#     --build-arg WEIR_VERSION="$(git describe --tags --always)" \
#     --build-arg WEIR_GIT_REVISION="$(git rev-parse HEAD)" \
#     -t ghcr.io/weir-dev/weir:dev .
#
# WEIR_VERSION and WEIR_GIT_REVISION are exported to `cargo build`, so the binaries compile them
# in with option_env!() and print them at start; they are also the image's OCI labels.

ARG RUST_VERSION=1.95
# The builder and the final image run the same Debian release: binaries linked against a newer
# glibc than the final image has would not start. Change both together (12 bookworm, 13 trixie);
# the builder stage refuses a mismatch.
ARG DEBIAN_CODENAME=bookworm
ARG DEBIAN_VERSION=12

# ---- builder: Rust on Debian, with the cargo registry and the target dir in cache mounts ----
FROM docker.io/library/rust:${RUST_VERSION}-${DEBIAN_CODENAME} AS builder
ARG TARGETPLATFORM
ARG DEBIAN_VERSION
RUN . /etc/os-release \
    && if [ "$VERSION_ID" != "$DEBIAN_VERSION" ]; then \
         echo "builder is Debian $VERSION_ID ($VERSION_CODENAME) but the final image is distroless cc-debian$DEBIAN_VERSION: set DEBIAN_CODENAME and DEBIAN_VERSION together" >&2; \
         exit 1; \
       fi
# cmake: fallback build path of aws-lc-sys (TLS for the S3 and Kubernetes clients).
# librocksdb-dev, libclang-dev: the disk state backend links Debian's RocksDB instead of compiling
# it (.cargo/config.toml); the `rocksdb` crate's bindings are generated with libclang.
RUN --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,target=/var/lib/apt,sharing=locked \
    rm -f /etc/apt/apt.conf.d/docker-clean \
    && apt-get update \
    && apt-get install -y --no-install-recommends cmake librocksdb-dev libclang-dev
WORKDIR /src
COPY . .
ARG WEIR_VERSION=dev
ARG WEIR_GIT_REVISION=unknown
ENV WEIR_VERSION=${WEIR_VERSION} \
    WEIR_GIT_REVISION=${WEIR_GIT_REVISION} \
    CARGO_TERM_COLOR=never \
    CARGO_INCREMENTAL=0
# The target dir is a cache mount (not part of any layer), so the binaries are copied out of it
# in the same step. The shared libraries `weir` links beyond glibc (RocksDB and its compression
# libraries, libstdc++) go to /out/lib for the final image, which has none of them.
RUN --mount=type=cache,id=weir-cargo-registry,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,id=weir-cargo-git,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,id=weir-target-${TARGETPLATFORM},target=/src/target,sharing=locked \
    cargo build --release --locked --bin weir --bin weir-operator \
    && mkdir -p /out \
    && cp target/release/weir target/release/weir-operator /out/ \
    && mkdir -p /out/lib \
    && ldd /out/weir /out/weir-operator | awk '$3 ~ /^\// {print $3}' | sort -u \
       | grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s)\.so' | xargs -r cp -L -t /out/lib/ \
    && /out/weir --version && /out/weir-operator --version

# ---- final: distroless (glibc + libgcc, no shell, no package manager), non-root ----
FROM gcr.io/distroless/cc-debian${DEBIAN_VERSION}:nonroot
ARG WEIR_VERSION=dev
ARG WEIR_GIT_REVISION=unknown
LABEL org.opencontainers.image.title="weir" \
      org.opencontainers.image.description="Weir stream runtime and Kubernetes operator" \
      org.opencontainers.image.source="https://github.com/weir-dev/weir" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${WEIR_VERSION}" \
      org.opencontainers.image.revision="${WEIR_GIT_REVISION}"
COPY --from=builder --chown=0:0 --chmod=0755 /out/weir /out/weir-operator /usr/local/bin/
COPY --from=builder --chown=0:0 --chmod=0644 /out/lib/ /usr/local/lib/weir/
ENV LD_LIBRARY_PATH=/usr/local/lib/weir
# uid/gid 65532 is distroless' "nonroot". Nothing in the image is writable by it: mount volumes
# (an emptyDir at /tmp, which is also the working directory) for anything written locally, so
# the image runs with readOnlyRootFilesystem.
USER 65532:65532
WORKDIR /tmp
# Runtime control API / operator metrics.
EXPOSE 8081 8080
# The operator by default; runtime pods set their command to `weir coordinator|worker ...`.
CMD ["/usr/local/bin/weir-operator", "run"]
