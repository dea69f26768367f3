//! Two listeners, both read-only (they never write to Kubernetes):
//!
//! - the health port ([`probes`]): `/healthz`, `/readyz` (controller-runtime's handler:
//!   `?verbose`, `?exclude=`, `/readyz/<check>`) and `/metrics`, what kubelet and
//!   Prometheus scrape, open on every address by default; the host's own `/blueprint` only
//!   where [`health_blueprint`] says;
//! - the console port ([`console`]): the console at `/`, `/blueprint`, `/state`,
//!   `/tenants` and `/crs`, which show every tenant's CRDs, endpoints, plugins, CRs and
//!   recent errors, on
//!   loopback by default (reach it with `kubectl port-forward`), behind the Host check and
//!   optional token of [`ConsoleAccess`].
//!
//! The routers are built apart from the socket ([`bind`]) so tests call them directly.

mod access;
mod blueprint;
#[cfg(test)]
mod tests;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, RawQuery, State as Extract};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use tokio::sync::watch;

use inrun_fleet::{Fleet, TenantView};
use inrun_observe::health::{Health, Probe};
use inrun_observe::metrics::{self, Metrics};
use inrun_reconcilers::assemble::Assembly;

pub use access::{AccessError, ConsoleAccess, TOKEN_MIN_LEN};
pub use blueprint::document as blueprint_document;

/// The console page, served as is.
const CONSOLE: &str = include_str!("console.html");

/// What the host serves now: its Blueprints and, with several tenants, each tenant.
pub trait Serving: Send + Sync {
    /// The serving assemblies, one per tenant.
    fn assemblies(&self) -> Vec<Arc<Assembly>>;
    /// Every tenant, with its plugins and any refused reload.
    fn tenants(&self) -> Vec<TenantView>;
    /// The host's own Blueprint (`--blueprint`), not a tenant's.
    fn own(&self) -> Option<Arc<Assembly>>;
}

/// One Blueprint fixed for the run.
struct Fixed(Arc<Assembly>);

impl Serving for Fixed {
    fn assemblies(&self) -> Vec<Arc<Assembly>> {
        vec![self.0.clone()]
    }
    fn tenants(&self) -> Vec<TenantView> {
        Vec::new()
    }
    fn own(&self) -> Option<Arc<Assembly>> {
        Some(self.0.clone())
    }
}

impl Serving for Fleet {
    fn assemblies(&self) -> Vec<Arc<Assembly>> {
        Fleet::assemblies(self)
    }
    fn tenants(&self) -> Vec<TenantView> {
        self.views()
    }
    fn own(&self) -> Option<Arc<Assembly>> {
        self.own_assembly()
    }
}

/// What the handlers read.
#[derive(Clone)]
pub struct State {
    /// The Blueprints served (their plugins are loaded once they exist).
    pub serving: Arc<dyn Serving>,
    /// The metrics registry.
    pub metrics: Arc<Metrics>,
    /// The probes' checks.
    pub health: Arc<Health>,
}

impl State {
    /// State for `assembly`, reading `metrics`.
    pub fn new(assembly: Arc<Assembly>, metrics: Arc<Metrics>) -> State {
        Self::serving(Arc::new(Fixed(assembly)), metrics)
    }

    /// State for a fleet of tenants (or anything else that serves Blueprints).
    pub fn serving(serving: Arc<dyn Serving>, metrics: Arc<Metrics>) -> State {
        State {
            serving,
            health: metrics.health().clone(),
            metrics,
        }
    }
}

/// Why the health port could not serve.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The port could not be bound.
    #[error("binding {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The server failed while running.
    #[error("serving {addr}")]
    Serve {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Whether the health port on `address` serves the host's own Blueprint: as `asked`
/// (`--health-blueprint`), else only on loopback. The health port is open to the network
/// for kubelet and Prometheus, and the Blueprint names endpoints and plugin sources that
/// are the console's to show.
pub fn health_blueprint(address: IpAddr, asked: Option<bool>) -> bool {
    asked.unwrap_or(address.is_loopback())
}

/// The health port's routes: probes, metrics and, with `blueprint`, the host's own
/// Blueprint at `/blueprint` (what a console or script built to read `:healthPort/blueprint`
/// reads); nothing about tenants, whose Blueprints are on the console port.
pub fn probes(state: State, blueprint: bool) -> Router {
    let router = if blueprint {
        Router::new().route("/blueprint", get(own_blueprint))
    } else {
        Router::new()
    };
    router
        .route(
            "/healthz",
            get(|s: Extract<State>, q: RawQuery| probe(s, Probe::Liveness, None, q)),
        )
        .route(
            "/healthz/{check}",
            get(|s: Extract<State>, Path(c): Path<String>, q: RawQuery| {
                probe(s, Probe::Liveness, Some(c), q)
            }),
        )
        .route(
            "/readyz",
            get(|s: Extract<State>, q: RawQuery| probe(s, Probe::Readiness, None, q)),
        )
        .route(
            "/readyz/{check}",
            get(|s: Extract<State>, Path(c): Path<String>, q: RawQuery| {
                probe(s, Probe::Readiness, Some(c), q)
            }),
        )
        .route("/metrics", get(metrics_text))
        .with_state(state)
}

/// The console port's routes: the console and what it reads, every route behind the Host
/// check of `access`, and all but the static page behind its token.
pub fn console(state: State, access: ConsoleAccess) -> Router {
    let access = Arc::new(access);
    let data = Router::new()
        .route("/blueprint", get(blueprint))
        .route("/state", get(live_state))
        .route("/tenants", get(tenants))
        .route("/crs", get(crs))
        .route_layer(axum::middleware::from_fn_with_state(
            access.clone(),
            access::check_token,
        ));
    Router::new()
        .route("/", get(console_page))
        .merge(data)
        .layer(axum::middleware::from_fn_with_state(
            access,
            access::check_host,
        ))
        .with_state(state)
}

async fn console_page() -> Html<&'static str> {
    Html(CONSOLE)
}

/// A probe's answer: every check of `probe`, or the one named `check`. The query may say
/// `verbose` and `exclude=<check>` (repeated), as controller-runtime's handler reads them.
async fn probe(
    Extract(state): Extract<State>,
    probe: Probe,
    check: Option<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let pairs: Vec<(&str, &str)> = query
        .as_deref()
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| p.split_once('=').unwrap_or((p, "")))
        .collect();
    let verbose = pairs.iter().any(|(k, _)| *k == "verbose");
    let exclude: Vec<&str> = pairs
        .iter()
        .filter(|(k, _)| *k == "exclude")
        .map(|(_, v)| *v)
        .collect();
    let answer = state
        .health
        .answer(probe, check.as_deref(), verbose, &exclude);
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        answer.body,
    )
        .into_response()
}

async fn metrics_text(Extract(state): Extract<State>) -> Response {
    (
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        state.metrics.render(),
    )
        .into_response()
}

/// One Blueprint's document; with several tenants, their CRDs side by side and the
/// names joined.
async fn blueprint(Extract(state): Extract<State>) -> Response {
    let docs: Vec<serde_json::Value> = state
        .serving
        .assemblies()
        .iter()
        .map(|a| blueprint::document(a))
        .collect();
    let doc = match docs.len() {
        1 => docs.into_iter().next().unwrap_or_default(),
        _ => serde_json::json!({
            "name": docs.iter().filter_map(|d| d["name"].as_str()).collect::<Vec<_>>().join(", "),
            "crds": docs.iter().flat_map(|d| d["crds"].as_array().cloned().unwrap_or_default()).collect::<Vec<_>>(),
            "tenants": docs,
        }),
    };
    axum::Json(doc).into_response()
}

/// The host's own Blueprint, as `/blueprint` on the console shows one; 404 when the host
/// serves only tenants.
async fn own_blueprint(Extract(state): Extract<State>) -> Response {
    match state.serving.own() {
        Some(assembly) => axum::Json(blueprint::document(&assembly)).into_response(),
        None => (
            axum::http::StatusCode::NOT_FOUND,
            "this host serves no Blueprint of its own (--blueprint); tenants' are on the console port\n",
        )
            .into_response(),
    }
}

async fn tenants(Extract(state): Extract<State>) -> Response {
    axum::Json(state.serving.tenants()).into_response()
}

/// The CRs the controllers cache, each with its Ready condition and children.
async fn crs(Extract(state): Extract<State>) -> Response {
    axum::Json(state.metrics.crs()).into_response()
}

async fn live_state(Extract(state): Extract<State>) -> Response {
    axum::Json(state.metrics.snapshot()).into_response()
}

/// Binds `addr` (port 0 picks a free one), reports the bound address through the
/// returned value, and serves `routes` until `shutdown` turns true.
///
/// # Errors
/// [`ServeError::Bind`] when the port is taken.
pub async fn bind(
    addr: SocketAddr,
    routes: Router,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(SocketAddr, tokio::task::JoinHandle<Result<(), ServeError>>), ServeError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| ServeError::Bind { addr, source })?;
    let task = tokio::spawn(async move {
        axum::serve(listener, routes)
            .with_graceful_shutdown(async move {
                let _ = shutdown.wait_for(|s| *s).await;
            })
            .await
            .map_err(|source| ServeError::Serve {
                addr: bound,
                source,
            })
    });
    Ok((bound, task))
}
