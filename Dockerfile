# Inrun host image: built with the workspace's toolchain, run from a distroless base as a
# non-root user. Plugins are not baked in; Blueprints point at files, HTTPS URLs or OCI refs.
#   docker build -t inrun .
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p inrun --bin inrun \
 && install -D target/release/inrun /out/inrun

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/inrun /usr/local/bin/inrun
USER 65532:65532
EXPOSE 8081
ENTRYPOINT ["/usr/local/bin/inrun"]
CMD ["run", "--blueprint", "/etc/inrun/blueprint.yaml"]
