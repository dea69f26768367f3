//! The routers called directly, without a socket or a cluster: the console's Host check
//! and token, the health port's `/blueprint`, and URLs shown without their queries.

use std::net::IpAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, header};
use tower::ServiceExt;

use super::{ConsoleAccess, State, console, health_blueprint, probes};

const TOKEN: &str = "s3cret-console-token-0123";

/// A Blueprint served by a remote endpoint whose query carries a token: assembled offline
/// (a remote reconciler reaches out only when called).
fn offline_state() -> State {
    let text = r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {name: access}
spec:
  crds:
    - group: access.inrun.dev
      version: v1alpha1
      kind: Thing
      reconcile:
        default: false
        remote: {endpoint: "https://reconciler.example/run?token=hunter2&sig=abc", timeout: 1s}
        managedResources: [{apiVersion: v1, kind: ConfigMap}]
"#;
    let blueprint = inrun_blueprint::from_str(text, "access.yaml").expect("blueprint");
    let engine = inrun_wasm::Engine::new(inrun_wasm::EngineSettings::default()).expect("engine");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let assembly = runtime
        .block_on(inrun_reconcilers::assemble::Assembly::from_blueprint(
            blueprint, &engine,
        ))
        .expect("assembly");
    State::new(
        Arc::new(assembly),
        Arc::new(inrun_observe::metrics::Metrics::default()),
    )
}

/// GETs `path` with `headers`: (status, body).
async fn call(router: &Router, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut request = Request::builder().uri(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Body::empty()).expect("request");
    let response = router.clone().oneshot(request).await.expect("infallible");
    let status = response.status().as_u16();
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .expect("body")
        .to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

const DATA: [&str; 4] = ["/blueprint", "/state", "/tenants", "/crs"];

#[tokio::test]
async fn the_console_refuses_a_host_it_does_not_answer_to() {
    let state = tokio::task::spawn_blocking(offline_state)
        .await
        .expect("state");
    let router = console(state, ConsoleAccess::loopback());
    for path in ["/", "/blueprint", "/state"] {
        for host in ["localhost:8082", "127.0.0.1:8082", "[::1]:8082"] {
            assert_eq!(
                call(&router, path, &[("host", host)]).await.0,
                200,
                "{path} as {host}"
            );
        }
        // A page whose name was rebound to the console's address sends its own name.
        let (status, body) = call(&router, path, &[("host", "rebound.example:8082")]).await;
        assert_eq!(status, 421, "{path}: {body}");
        assert!(body.contains("--console-host"), "{body}");
        assert_eq!(call(&router, path, &[]).await.0, 400, "{path} without Host");
    }
    // A name the operator lists is answered.
    let listed = ConsoleAccess::new(
        IpAddr::from([127, 0, 0, 1]),
        &["inrun.example".to_string()],
        None,
    )
    .expect("access");
    let router = console(
        tokio::task::spawn_blocking(offline_state)
            .await
            .expect("state"),
        listed,
    );
    assert_eq!(
        call(&router, "/state", &[("host", "inrun.example")])
            .await
            .0,
        200
    );
    assert_eq!(
        call(&router, "/state", &[("host", "other.example")])
            .await
            .0,
        421
    );
}

#[tokio::test]
async fn with_a_token_the_consoles_data_needs_it_and_the_page_does_not() {
    let state = tokio::task::spawn_blocking(offline_state)
        .await
        .expect("state");
    let access = ConsoleAccess::new(IpAddr::from([0, 0, 0, 0]), &[], Some(TOKEN.to_string()))
        .expect("access");
    let router = console(state, access);
    let host = ("host", "10.1.2.3:8082");
    let bearer = format!("Bearer {TOKEN}");
    // The static page holds no data: it loads, and asks for the token.
    let (status, page) = call(&router, "/", &[host]).await;
    assert_eq!(status, 200);
    assert!(page.contains("sessionStorage"), "the page keeps the token");
    for path in DATA {
        let (status, body) = call(&router, path, &[host]).await;
        assert_eq!(status, 401, "{path} without the token: {body}");
        for wrong in [
            format!("Bearer {TOKEN}x"),
            "Bearer s3cret".to_string(),
            format!("Basic {TOKEN}"),
            TOKEN.to_string(),
        ] {
            assert_eq!(
                call(&router, path, &[host, ("authorization", &wrong)])
                    .await
                    .0,
                401,
                "{path} with {wrong:?}"
            );
        }
        assert_eq!(
            call(&router, path, &[host, ("authorization", &bearer)])
                .await
                .0,
            200,
            "{path} with the token"
        );
        // The Host check comes first: the token does not open it to a rebound name.
        assert_eq!(
            call(
                &router,
                path,
                &[("host", "rebound.example"), ("authorization", &bearer)]
            )
            .await
            .0,
            421,
            "{path}"
        );
    }
    let response = router
        .clone()
        .oneshot(
            Request::builder()
                .uri("/state")
                .header("host", "10.1.2.3")
                .body(Body::empty())
                .expect("request"),
        )
        .await
        .expect("infallible");
    assert_eq!(
        response
            .headers()
            .get(header::WWW_AUTHENTICATE)
            .map(|v| v.as_bytes()),
        Some(&b"Bearer realm=\"inrun console\""[..])
    );
}

#[tokio::test]
async fn the_health_port_serves_the_blueprint_only_on_loopback_unless_asked() {
    let state = tokio::task::spawn_blocking(offline_state)
        .await
        .expect("state");
    let open: IpAddr = IpAddr::from([0, 0, 0, 0]);
    let loopback: IpAddr = IpAddr::from([127, 0, 0, 1]);
    for (address, asked, served) in [
        (open, None, false),
        (IpAddr::from([10, 0, 0, 5]), None, false),
        (open, Some(true), true),
        (loopback, None, true),
        (loopback, Some(false), false),
    ] {
        let router = probes(state.clone(), health_blueprint(address, asked));
        let status = call(&router, "/blueprint", &[]).await.0;
        assert_eq!(
            status,
            if served { 200 } else { 404 },
            "{address} with --health-blueprint {asked:?}"
        );
        assert_eq!(call(&router, "/healthz", &[]).await.0, 200);
    }
}

#[tokio::test]
async fn the_blueprint_never_shows_a_urls_query() {
    let state = tokio::task::spawn_blocking(offline_state)
        .await
        .expect("state");
    let health = probes(state.clone(), true);
    let console = console(state, ConsoleAccess::loopback());
    for (router, headers) in [(&health, vec![]), (&console, vec![("host", "127.0.0.1")])] {
        let (status, body) = call(router, "/blueprint", &headers).await;
        assert_eq!(status, 200, "{body}");
        assert!(
            !body.contains("hunter2") && !body.contains("sig="),
            "{body}"
        );
        let doc: serde_json::Value = serde_json::from_str(&body).expect("json");
        assert_eq!(
            doc["crds"][0]["remote"], "https://reconciler.example/run?…",
            "{doc}"
        );
    }
}

#[test]
fn urls_are_shown_without_query_fragment_or_credentials() {
    use super::blueprint::shown_url;
    for (given, shown) in [
        (
            "https://bucket.example/p.wasm?X-Amz-Signature=abc&X-Amz-Credential=k",
            "https://bucket.example/p.wasm?…",
        ),
        (
            "https://u:p@host.example/x?t=1#f",
            "https://host.example/x?…",
        ),
        ("https://host.example/x#frag", "https://host.example/x"),
        ("https://host.example?t=1", "https://host.example?…"),
        ("oci://registry.example/p:1", "oci://registry.example/p:1"),
        ("plugins/p.wasm", "plugins/p.wasm"),
    ] {
        assert_eq!(shown_url(given), shown, "{given}");
    }
}
