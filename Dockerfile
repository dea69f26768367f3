# Inrun host image: built with the workspace's toolchain, run from a slim base as a
# non-root user. Plugins are not baked in; Blueprints point at files, HTTPS URLs or OCI refs.
#   docker build -t inrun .        (RUNTIME_BASE picks another base image)
ARG RUNTIME_BASE=debian:bookworm-slim
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p inrun --bin inrun \
 && install -D target/release/inrun /out/inrun

FROM ${RUNTIME_BASE}
# CA certificates: plugins from https:// URLs and OCI registries, remote reconcilers.
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/inrun /usr/local/bin/inrun
USER 65532:65532
EXPOSE 8081
ENTRYPOINT ["/usr/local/bin/inrun"]
CMD ["run", "--blueprint", "/etc/inrun/blueprint.yaml"]
