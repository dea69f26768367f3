//! Plugin sources against real servers: Debian's OCI registry (plain, and TLS with htpasswd
//! auth) started by the harness, and an HTTPS file server on loopback inside the test.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use inrun::secrets::StaticSecrets;
use inrun::sources::{
    ComponentMeta, Credentials, Location, MAX_MODULE_SIZE, PullSecret, SourceError, SourceOptions,
    Sources, push, sha256,
};
use inrun_testenv::registry::Registry;
use inrun_testenv::tls::TestCerts;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn plugin(name: &str) -> Vec<u8> {
    let dir = std::env::var_os("INRUN_PLUGIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../plugins/target/wasm32-wasip2/release")
        });
    let path = dir.join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{} is missing ({e}): run `make plugins` first",
            path.display()
        )
    })
}

fn webapp() -> Vec<u8> {
    plugin("inrun_plugin_webapp")
}

fn labels_hooks() -> Vec<u8> {
    plugin("inrun_plugin_labels_hooks")
}

fn oci(reference: &str, digest: Option<&str>) -> Location {
    Location::parse(reference, digest, std::path::Path::new("/")).expect("an oci location")
}

/// Sources for a plain-http registry, no secrets.
fn plain_sources(registry: &Registry) -> Sources {
    Sources::new(Arc::new(StaticSecrets::new()), plain_options(registry)).expect("sources")
}

fn plain_options(registry: &Registry) -> SourceOptions {
    SourceOptions {
        insecure_registries: vec![registry.host.clone()],
        extra_roots: Vec::new(),
    }
}

fn tls_options(registry: &Registry) -> SourceOptions {
    SourceOptions {
        insecure_registries: Vec::new(),
        extra_roots: registry.ca_pem.clone().into_iter().collect(),
    }
}

#[tokio::test]
async fn a_pushed_component_pulls_back_by_tag_and_by_digest() -> anyhow::Result<()> {
    // The process has no TLS provider until one is installed, as `inrun` does at start.
    inrun::sources::install_tls_provider();
    let registry = Registry::start().await?;
    let sources = plain_sources(&registry);
    let bytes = webapp();
    let reference = registry.reference("team/webapp:1.0");
    let digest = push(
        &bytes,
        &reference,
        &ComponentMeta::default(),
        None,
        &plain_options(&registry),
    )
    .await
    .context("pushing")?;
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "{digest}"
    );

    let by_tag = sources.fetch(&oci(&reference, None), None).await?;
    assert_eq!(by_tag.module.bytes(), bytes);
    assert_eq!(by_tag.version, digest);

    let pinned = oci(&registry.reference(&format!("team/webapp@{digest}")), None);
    assert!(pinned.is_pinned());
    let by_digest = sources.fetch(&pinned, None).await?;
    assert_eq!(by_digest.module.bytes(), bytes);
    assert_eq!(by_digest.version, digest);

    let tag_and_pin = oci(&reference, Some(&digest));
    assert_eq!(
        sources.fetch(&tag_and_pin, None).await?.module.bytes(),
        bytes
    );
    assert_eq!(sources.version(&tag_and_pin, None).await?, digest);
    Ok(())
}

#[tokio::test]
async fn a_wrong_digest_is_refused_naming_both() -> anyhow::Result<()> {
    inrun::sources::install_tls_provider();
    let registry = Registry::start().await?;
    let sources = plain_sources(&registry);
    let reference = registry.reference("webapp:pinned");
    let digest = push(
        &webapp(),
        &reference,
        &ComponentMeta::default(),
        None,
        &plain_options(&registry),
    )
    .await?;
    let wrong = sha256(b"something else");
    let err = sources
        .fetch(&oci(&reference, Some(&wrong)), None)
        .await
        .expect_err("a wrong pin");
    assert!(
        matches!(&err, SourceError::DigestMismatch { expected, actual, .. } if expected == &wrong && actual == &digest),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains(&wrong) && text.contains(&digest), "{text}");
    Ok(())
}

#[tokio::test]
async fn pulls_and_pushes_use_the_registry_credentials() -> anyhow::Result<()> {
    inrun::sources::install_tls_provider();
    let registry = Registry::start_with_auth("alice", "wonder-land").await?;
    let options = tls_options(&registry);
    let reference = registry.reference("private/webapp:1");
    let creds = Credentials {
        username: "alice".into(),
        password: "wonder-land".into(),
    };

    let anonymous_push = push(
        &webapp(),
        &reference,
        &ComponentMeta::default(),
        None,
        &options,
    )
    .await
    .expect_err("pushing without credentials");
    assert!(
        matches!(anonymous_push, SourceError::Unauthorized { .. }),
        "{anonymous_push:?}"
    );
    let digest = push(
        &webapp(),
        &reference,
        &ComponentMeta::default(),
        Some(&creds),
        &options,
    )
    .await
    .context("pushing with credentials")?;

    let secrets = StaticSecrets::new()
        .with(
            "plugins",
            "registry",
            ".dockerconfigjson",
            &creds.to_docker_config(&registry.host),
        )
        .with(
            "plugins",
            "wrong",
            ".dockerconfigjson",
            &Credentials {
                username: "alice".into(),
                password: "not-it".into(),
            }
            .to_docker_config(&registry.host),
        );
    let sources = Sources::new(Arc::new(secrets), options)?;
    let location = oci(&reference, None);

    let anonymous = sources
        .fetch(&location, None)
        .await
        .expect_err("pulling without credentials");
    assert!(
        matches!(anonymous, SourceError::Unauthorized { .. }),
        "{anonymous:?}"
    );
    assert!(anonymous.to_string().contains("anonymous"), "{anonymous}");

    let wrong = PullSecret {
        namespace: "plugins".into(),
        name: "wrong".into(),
    };
    let refused = sources
        .fetch(&location, Some(&wrong))
        .await
        .expect_err("wrong password");
    assert!(
        matches!(refused, SourceError::Unauthorized { .. }),
        "{refused:?}"
    );
    let text = inrun::errors::chain(&refused);
    assert!(
        text.contains("plugins/wrong") && !text.contains("not-it"),
        "{text}"
    );

    let secret = PullSecret {
        namespace: "plugins".into(),
        name: "registry".into(),
    };
    let fetched = sources.fetch(&location, Some(&secret)).await?;
    assert_eq!(fetched.module.bytes(), webapp());
    assert_eq!(fetched.version, digest);
    assert_eq!(sources.version(&location, Some(&secret)).await?, digest);
    Ok(())
}

#[tokio::test]
async fn moving_a_tag_changes_its_version() -> anyhow::Result<()> {
    inrun::sources::install_tls_provider();
    let registry = Registry::start().await?;
    let sources = plain_sources(&registry);
    let options = plain_options(&registry);
    let reference = registry.reference("moving:latest");
    let location = oci(&reference, None);

    let first = push(
        &webapp(),
        &reference,
        &ComponentMeta::default(),
        None,
        &options,
    )
    .await?;
    assert_eq!(sources.version(&location, None).await?, first);

    let meta = ComponentMeta {
        exports: vec!["inrun:reconciler/hooks".into()],
        imports: Vec::new(),
        target: None,
    };
    let second = push(&labels_hooks(), &reference, &meta, None, &options).await?;
    assert_ne!(first, second);
    assert_eq!(sources.version(&location, None).await?, second);
    let fetched = sources.fetch(&location, None).await?;
    assert_eq!(fetched.module.bytes(), labels_hooks());
    assert_eq!(fetched.version, second);

    // Pushing the same component again gives the same digest.
    let again = push(&labels_hooks(), &reference, &meta, None, &options).await?;
    assert_eq!(again, second);
    Ok(())
}

#[tokio::test]
async fn an_artifact_whose_layer_is_not_wasm_is_refused() -> anyhow::Result<()> {
    inrun::sources::install_tls_provider();
    use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
    use oci_client::secrets::RegistryAuth;

    let registry = Registry::start().await?;
    let client = oci_client::Client::try_from(ClientConfig {
        protocol: ClientProtocol::HttpsExcept(vec![registry.host.clone()]),
        ..ClientConfig::default()
    })?;
    let reference: oci_client::Reference = format!("{}/tarball:1", registry.host).parse()?;
    let layer = ImageLayer::new(
        webapp(),
        "application/vnd.oci.image.layer.v1.tar".into(),
        None,
    );
    let config = Config::new(
        b"{}".to_vec(),
        "application/vnd.oci.image.config.v1+json".into(),
        None,
    );
    client
        .push(&reference, &[layer], config, &RegistryAuth::Anonymous, None)
        .await?;

    let err = plain_sources(&registry)
        .fetch(&oci(&registry.reference("tarball:1"), None), None)
        .await
        .expect_err("a tar layer");
    assert!(
        matches!(&err, SourceError::NotWasm { media_type, .. } if media_type == "application/vnd.oci.image.layer.v1.tar"),
        "{err:?}"
    );
    assert!(err.to_string().contains("application/wasm"), "{err}");
    Ok(())
}

#[tokio::test]
async fn pushing_something_that_is_not_a_component_is_refused() -> anyhow::Result<()> {
    inrun::sources::install_tls_provider();
    let registry = Registry::start().await?;
    let core_module = b"\0asm\x01\x00\x00\x00".to_vec();
    let err = push(
        &core_module,
        &registry.reference("core:1"),
        &ComponentMeta::default(),
        None,
        &plain_options(&registry),
    )
    .await
    .expect_err("a core module");
    assert!(matches!(err, SourceError::NotAComponent), "{err:?}");
    Ok(())
}

/// An HTTPS server on 127.0.0.1 serving fixed files; `/huge.wasm` announces more than
/// the cap and sends nothing. Stops when dropped.
struct HttpsFiles {
    base: String,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Drop for HttpsFiles {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HttpsFiles {
    async fn start(files: HashMap<&'static str, Vec<u8>>) -> anyhow::Result<(Self, Vec<u8>)> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};

        let dir = tempfile::tempdir()?;
        let certs = TestCerts::generate(dir.path())?;
        let chain = vec![CertificateDer::from_pem_slice(&certs.cert_pem)?];
        let key = PrivateKeyDer::from_pem_slice(&certs.key_pem)?;
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("https://127.0.0.1:{}", listener.local_addr()?.port());
        let files = Arc::new(files);
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let files = files.clone();
                tokio::spawn(async move {
                    if let Ok(tls) = acceptor.accept(tcp).await {
                        let _ = answer(tls, &files).await;
                    }
                });
            }
        });
        Ok((
            HttpsFiles {
                base,
                task,
                _dir: dir,
            },
            certs.ca_pem,
        ))
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

/// Reads one request head and answers it; the connection closes after.
async fn answer(
    mut tls: tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    files: &HashMap<&'static str, Vec<u8>>,
) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        let n = tls.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&head);
    let path = text.split_whitespace().nth(1).unwrap_or("/").to_string();
    if path == "/huge.wasm" {
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            MAX_MODULE_SIZE + 1
        );
        tls.write_all(head.as_bytes()).await?;
    } else if let Some(body) = files.get(path.as_str()) {
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/wasm\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        tls.write_all(head.as_bytes()).await?;
        tls.write_all(body).await?;
    } else {
        tls.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .await?;
    }
    tls.shutdown().await
}

#[tokio::test]
async fn https_locations_are_fetched_only_with_their_digest() -> anyhow::Result<()> {
    inrun::sources::install_tls_provider();
    let bytes = webapp();
    let (server, ca_pem) =
        HttpsFiles::start(HashMap::from([("/plugins/webapp.wasm", bytes.clone())])).await?;
    let url = server.url("/plugins/webapp.wasm");
    let digest = sha256(&bytes);

    // Without the test CA the server is not trusted.
    let untrusting = Sources::new(Arc::new(StaticSecrets::new()), SourceOptions::default())?;
    let location = Location::parse(&url, Some(&digest), std::path::Path::new("/"))?;
    assert_eq!(location.name(), "webapp");
    assert!(matches!(
        untrusting.fetch(&location, None).await,
        Err(SourceError::Http { .. })
    ));

    let sources = Sources::new(
        Arc::new(StaticSecrets::new()),
        SourceOptions {
            insecure_registries: Vec::new(),
            extra_roots: vec![ca_pem],
        },
    )?;
    let fetched = sources.fetch(&location, None).await?;
    assert_eq!(fetched.module.bytes(), bytes);
    assert_eq!(fetched.version, digest);
    assert_eq!(sources.version(&location, None).await?, digest);

    let wrong = sha256(b"another build");
    let mismatched = Location::parse(&url, Some(&wrong), std::path::Path::new("/"))?;
    let err = sources
        .fetch(&mismatched, None)
        .await
        .expect_err("a wrong digest");
    let text = err.to_string();
    assert!(
        matches!(err, SourceError::DigestMismatch { .. })
            && text.contains(&wrong)
            && text.contains(&digest),
        "{text}"
    );

    let huge = Location::parse(
        &server.url("/huge.wasm"),
        Some(&digest),
        std::path::Path::new("/"),
    )?;
    assert!(matches!(
        sources.fetch(&huge, None).await,
        Err(SourceError::TooLarge { .. })
    ));
    let missing = Location::parse(
        &server.url("/gone.wasm"),
        Some(&digest),
        std::path::Path::new("/"),
    )?;
    assert!(matches!(
        sources.fetch(&missing, None).await,
        Err(SourceError::Http { .. })
    ));
    Ok(())
}

#[tokio::test]
async fn a_file_version_is_the_sha256_of_its_content() -> anyhow::Result<()> {
    inrun::sources::install_tls_provider();
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("h.wasm"), b"one")?;
    let location = Location::parse("h.wasm", None, dir.path())?;
    let sources = Sources::new(Arc::new(StaticSecrets::new()), SourceOptions::default())?;
    assert_eq!(sources.version(&location, None).await?, sha256(b"one"));
    std::fs::write(dir.path().join("h.wasm"), b"two")?;
    let fetched = sources.fetch(&location, None).await?;
    // The module carries the digest the fetch computed: a load does not hash it again.
    assert_eq!(fetched.module.digest_ref(), sha256(b"two"));
    assert_eq!(
        (fetched.module.bytes(), fetched.version),
        (&b"two"[..], sha256(b"two"))
    );
    Ok(())
}

/// A registry on 127.0.0.1 (plain http) that a hostile tenant runs: manifests of 100 MiB,
/// redirects to the metadata address, token replies of 1 MiB, long error pages. Counts
/// the bytes it managed to send.
async fn hostile_registry() -> anyhow::Result<(String, Arc<std::sync::atomic::AtomicUsize>)> {
    use std::sync::atomic::Ordering;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let host = format!("127.0.0.1:{}", listener.local_addr()?.port());
    let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (realm, counter) = (format!("http://{host}/token"), sent.clone());
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let (realm, counter) = (realm.clone(), counter.clone());
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tcp.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&head).to_string();
                let path = text.split_whitespace().nth(1).unwrap_or("/").to_string();
                let endless = |status: &str| {
                    format!(
                        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
                    )
                };
                let (head, endless_body) = match path.as_str() {
                    "/v2/big/manifests/1" => (endless("200 OK"), true),
                    "/v2/redirect/manifests/1" => (
                        "HTTP/1.1 302 Found\r\nLocation: http://169.254.169.254/latest/meta-data/\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string(),
                        false,
                    ),
                    "/v2/token/manifests/1" => (
                        format!("HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"{realm}\",service=\"x\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
                        false,
                    ),
                    p if p.starts_with("/token") => (endless("200 OK"), true),
                    _ => (endless("500 Internal Server Error"), true),
                };
                if tcp.write_all(head.as_bytes()).await.is_err() || !endless_body {
                    return;
                }
                // Up to 100 MiB, for as long as the client reads.
                let chunk = vec![b' '; 64 << 10];
                for _ in 0..1600 {
                    if tcp.write_all(&chunk).await.is_err() {
                        return;
                    }
                    counter.fetch_add(chunk.len(), Ordering::Relaxed);
                }
            });
        }
    });
    Ok((host, sent))
}

#[tokio::test]
async fn a_hostile_registry_is_read_only_so_far_and_never_followed_elsewhere() -> anyhow::Result<()>
{
    inrun::sources::install_tls_provider();
    let (host, sent) = hostile_registry().await?;
    let sources = Sources::new(
        Arc::new(StaticSecrets::new()),
        SourceOptions {
            insecure_registries: vec![host.clone()],
            extra_roots: Vec::new(),
        },
    )?;
    let fail = |repo: &str| {
        let location = oci(&format!("oci://{host}/{repo}:1"), None);
        let sources = &sources;
        async move {
            let err = sources
                .fetch(&location, None)
                .await
                .expect_err("a hostile registry's answer is refused");
            inrun::errors::chain(&err)
        }
    };
    // A manifest of 100 MiB: given up on at 4 MiB.
    let text = fail("big").await;
    assert!(text.contains("larger than 4194304 bytes"), "{text}");
    // A redirect of a manifest request: not followed, wherever it points.
    let text = fail("redirect").await;
    assert!(text.contains("302"), "{text}");
    assert!(!text.contains("meta-data"), "{text}");
    // A token reply of 100 MiB: given up on at 64 KiB.
    let text = fail("token").await;
    assert!(text.contains("larger than 65536 bytes"), "{text}");
    // An error page of 100 MiB: 200 bytes of it in the message.
    let text = fail("loud").await;
    assert!(text.contains("500"), "{text}");
    assert!(text.len() < 1000, "{} bytes: {text}", text.len());
    // Four endless replies, and what the registry could send is what the socket buffers
    // hold beyond the caps, not 400 MiB.
    let sent = sent.load(std::sync::atomic::Ordering::Relaxed);
    assert!(sent < 64 << 20, "the registry sent {sent} bytes");
    Ok(())
}

/// A server on 127.0.0.1 that answers each request with what `reply` makes of its path
/// and counts the connections it accepted: the registry, storage host or token realm a
/// Blueprint resource may point the host at.
struct Scripted {
    host: String,
    connections: Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Scripted {
    async fn start(
        reply: impl Fn(&str) -> Vec<u8> + Send + Sync + 'static,
    ) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let host = format!("127.0.0.1:{}", listener.local_addr()?.port());
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (counter, reply) = (connections.clone(), Arc::new(reply));
        let task = tokio::spawn(async move {
            while let Ok((mut tcp, _)) = listener.accept().await {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let reply = reply.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match tcp.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let text = String::from_utf8_lossy(&head).to_string();
                    let path = text.split_whitespace().nth(1).unwrap_or("/").to_string();
                    let _ = tcp.write_all(&reply(&path)).await;
                    let _ = tcp.shutdown().await;
                });
            }
        });
        Ok(Scripted {
            host,
            connections,
            task,
        })
    }

    /// Connections accepted so far.
    fn seen(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// An HTTP/1.1 reply that closes the connection.
fn http_reply(status: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(body);
    out
}

/// A Wasm OCI artifact manifest whose one layer is `layer`.
fn wasm_manifest(layer: &[u8]) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.wasm.config.v0+json", "digest": sha256(b"{}"), "size": 2},
        "layers": [{"mediaType": "application/wasm", "digest": sha256(layer), "size": layer.len()}],
    }))
    .expect("a manifest")
}

/// Assembles a Blueprint resource whose constructor is `location` (pinned to `digest`),
/// as the fleet does: under `--tenant-egress` `list`, with `insecure` registries spoken
/// over plain http. What it is refused with, as its status would say.
async fn assemble_tenant(
    location: &str,
    digest: Option<&str>,
    list: &[String],
    insecure: &[String],
) -> Result<(), String> {
    use inrun::assemble::{Assembly, BuildContext, Policy, Services};
    inrun::sources::install_tls_provider();
    let digest = digest
        .map(|d| format!(", digest: '{d}'"))
        .unwrap_or_default();
    let text = format!(
        "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{ name: t }}\nspec:\n  crds:\n    - group: t.inrun.dev\n      version: v1\n      kind: Thing\n      reconcile:\n        default: false\n        constructor: {{ location: '{location}'{digest} }}\n        managedResources: [ {{ apiVersion: apps/v1, kind: Deployment }}, {{ apiVersion: v1, kind: Service }} ]\n"
    );
    let blueprint = inrun::blueprint::from_str(&text, "t.yaml").expect("blueprint");
    let services = Services::with_sources(
        Arc::new(StaticSecrets::new()),
        SourceOptions {
            insecure_registries: insecure.to_vec(),
            extra_roots: Vec::new(),
        },
    )
    .expect("services");
    let engine = inrun::wasm::Engine::new(inrun::wasm::EngineSettings {
        pooling: false,
        ..Default::default()
    })
    .expect("engine");
    let plugins = inrun::plugins::PluginSet::new(engine, services.sources.clone());
    // A Blueprint resource's policy: no local files, and the operator's egress list.
    let policy = Policy {
        local_plugins: false,
        capabilities: false,
        foreign_secrets: false,
        egress: Some(inrun::egress::Egress::new(list, Vec::new()).expect("egress list")),
        ..Policy::default()
    };
    let cx = BuildContext {
        plugins: &plugins,
        services: &services,
        policy: &policy,
    };
    Assembly::build(blueprint, cx)
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn a_plugin_source_off_the_egress_list_or_at_a_refused_address_is_never_connected_to()
-> anyhow::Result<()> {
    let server = Scripted::start(|_| http_reply("500 Internal Server Error", &[], b"")).await?;
    let port = server
        .host
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .to_string();
    let localhost = format!("localhost:{port}");
    let digest = sha256(b"a component");
    let cases = [
        // An address the list does not name (loopback: refused unless listed as an address).
        (
            format!("oci://{}/team/x:1", server.host),
            None,
            vec!["registry.example:443".to_string()],
            "is not in the operator's egress allowlist",
        ),
        (
            format!("https://{}/x.wasm", server.host),
            Some(digest.clone()),
            vec!["registry.example".to_string()],
            "is not in the operator's egress allowlist",
        ),
        // A listed name that resolves to a refused address: refused when it is resolved,
        // before any connection.
        (
            format!("oci://{localhost}/team/x:1"),
            None,
            vec![localhost.clone()],
            "loopback",
        ),
        (
            format!("https://{localhost}/x.wasm"),
            Some(digest.clone()),
            vec![localhost.clone()],
            "loopback",
        ),
    ];
    for (location, digest, list, why) in cases {
        let insecure = [server.host.clone(), localhost.clone()];
        let err = assemble_tenant(&location, digest.as_deref(), &list, &insecure)
            .await
            .expect_err("refused");
        assert!(
            err.contains("reconcile.constructor.location") && err.contains(why),
            "{location}: {err}"
        );
        assert!(
            err.contains("outside the egress rules"),
            "{location}: {err}"
        );
        assert_eq!(server.seen(), 0, "{location} was connected to");
    }
    Ok(())
}

#[tokio::test]
async fn a_layer_is_redirected_only_to_a_host_the_egress_list_allows() -> anyhow::Result<()> {
    let layer = webapp();
    let storage = |bytes: Vec<u8>| {
        Scripted::start(move |_| {
            http_reply("200 OK", &[("Content-Type", "application/wasm")], &bytes)
        })
    };
    let (allowed, elsewhere) = (storage(layer.clone()).await?, storage(layer.clone()).await?);
    let (to_allowed, to_elsewhere) = (
        format!("http://{}/blob", allowed.host),
        format!("http://{}/blob", elsewhere.host),
    );
    let manifest = wasm_manifest(&layer);
    let registry = Scripted::start(move |path| {
        let to = match path.split('/').nth(2) {
            _ if path.contains("/manifests/") => {
                return http_reply(
                    "200 OK",
                    &[("Content-Type", "application/vnd.oci.image.manifest.v1+json")],
                    &manifest,
                );
            }
            Some("direct") => {
                return http_reply("200 OK", &[("Content-Type", "application/wasm")], &layer);
            }
            Some("listed") => to_allowed.as_str(),
            _ => to_elsewhere.as_str(),
        };
        http_reply("302 Found", &[("Location", to)], b"")
    })
    .await?;
    let list = [registry.host.clone(), allowed.host.clone()];
    let insecure = [registry.host.clone()];
    let at = |repo: &str| format!("oci://{}/{repo}:1", registry.host);

    // The listed registry serves its own layer, or hands it to a listed host.
    assemble_tenant(&at("direct"), None, &list, &insecure)
        .await
        .map_err(anyhow::Error::msg)?;
    assert_eq!(allowed.seen(), 0);
    assemble_tenant(&at("listed"), None, &list, &insecure)
        .await
        .map_err(anyhow::Error::msg)?;
    assert_eq!(allowed.seen(), 1);
    // A redirect to a host off the list is refused: that host sees nothing.
    let err = assemble_tenant(&at("elsewhere"), None, &list, &insecure)
        .await
        .expect_err("a redirect off the list");
    assert!(
        err.contains("a redirect is outside the egress rules"),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{} is not in the operator's egress allowlist",
            elsewhere.host
        )),
        "{err}"
    );
    assert_eq!(elsewhere.seen(), 0, "the unlisted host was connected to");
    Ok(())
}

#[tokio::test]
async fn a_token_realm_off_the_egress_list_is_never_asked() -> anyhow::Result<()> {
    let realm = Scripted::start(|_| {
        http_reply(
            "200 OK",
            &[("Content-Type", "application/json")],
            br#"{"token":"t"}"#,
        )
    })
    .await?;
    // Same address, another port: the realm's host is the registry's, its port is not listed.
    let challenge = format!("Bearer realm=\"http://{}/token\",service=\"r\"", realm.host);
    let registry = Scripted::start(move |_| {
        http_reply(
            "401 Unauthorized",
            &[("WWW-Authenticate", challenge.as_str())],
            b"",
        )
    })
    .await?;
    let location = format!("oci://{}/team/x:1", registry.host);
    let listed = std::slice::from_ref(&registry.host);
    let err = assemble_tenant(&location, None, listed, listed)
        .await
        .expect_err("a realm off the list");
    assert!(
        err.contains("token realm is outside the egress rules"),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{} is not in the operator's egress allowlist",
            realm.host
        )),
        "{err}"
    );
    assert_eq!(realm.seen(), 0, "the realm was asked");
    assert!(registry.seen() > 0);
    Ok(())
}

#[tokio::test]
async fn no_text_a_registry_sends_reaches_the_error() -> anyhow::Result<()> {
    let secret = "tenant-b-session=s3cr3t";
    let registry = Scripted::start(move |path| {
        let json = [("Content-Type", "application/json")];
        match path.split('/').nth(2).unwrap_or_default() {
            "page" => http_reply(
                "500 Internal Server Error",
                &[("Content-Type", "text/html")],
                format!("<html>internal dashboard: {secret}</html>").as_bytes(),
            ),
            "envelope" => http_reply(
                "404 Not Found",
                &json,
                format!(r#"{{"errors":[{{"code":"MANIFEST_UNKNOWN","message":"{secret}","detail":"{secret}"}}]}}"#).as_bytes(),
            ),
            "own-code" => http_reply(
                "400 Bad Request",
                &json,
                format!(r#"{{"errors":[{{"code":"{secret}","message":"m"}}]}}"#).as_bytes(),
            ),
            "garbled" => http_reply(
                "200 OK",
                &[("Content-Type", "application/vnd.oci.image.manifest.v1+json")],
                format!(r#"{{"schemaVersion":2,"layers":"{secret}"}}"#).as_bytes(),
            ),
            _ => http_reply(
                "200 OK",
                &[("Content-Type", "application/vnd.oci.image.manifest.v1+json")],
                format!(r#"{{"schemaVersion":2,"config":{{"mediaType":"x","digest":"{d}","size":2}},"layers":[{{"mediaType":"{secret}","digest":"{d}","size":1}}]}}"#, d = sha256(b"x")).as_bytes(),
            ),
        }
    })
    .await?;
    let list = [registry.host.clone()];
    for (repo, said) in [
        ("page", "500"),
        ("envelope", "MANIFEST_UNKNOWN"),
        ("own-code", "400"),
        ("garbled", "not an OCI image manifest"),
        ("media-type", "is not application/wasm"),
    ] {
        let location = format!("oci://{}/{repo}:1", registry.host);
        let err = assemble_tenant(&location, None, &list, &list)
            .await
            .expect_err("refused");
        assert!(
            err.contains(said) && err.contains(&registry.host),
            "{repo}: {err}"
        );
        assert!(
            !err.contains("s3cr3t"),
            "{repo}: the registry's text is in {err}"
        );
    }
    Ok(())
}
