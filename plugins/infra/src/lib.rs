//! Test guest: an infrastructure package. Its "things" live in an HTTP service at
//! `config.endpoint` (the test runs it), one per CR, named `<profile>`:
//!
//! - `GET /things/<profile>`: 404 when absent, else `{"size": n, "ready": bool}`;
//! - `PUT /things/<profile>` with `{"size": n}`: 200 done, 202 still working;
//! - `DELETE /things/<profile>`: 200 or 404 done, 202 still working.
//!
//! `config.size` (a whole number from 1) is the desired size; the profile and `config.zone`
//! are the state identity. `config.token: {secret, key}` sends that credential (read
//! through the host) as a bearer token. `config.probe: ambient` makes `validate` answer
//! what the sandbox lets it see instead (environment variable names, arguments, and what
//! reading `/`, `.` and `/etc/hostname` gave), one line each. Anything but a 2xx/404 answer fails the step with the service's body,
//! so tests can check that such text never reaches the CR's status.

use inrun_sdk::http::Request as HttpRequest;
use inrun_sdk::package::{Identity, Observation, Options, Package, Workflow};
use inrun_sdk::{Value, json};

/// The package.
pub struct Infra;

fn endpoint(opts: &Options) -> Result<&str, String> {
    opts.config
        .get("endpoint")
        .and_then(Value::as_str)
        .ok_or_else(|| "config.endpoint is required".to_string())
}

fn url(opts: &Options) -> Result<String, String> {
    Ok(format!(
        "{}/things/{}",
        endpoint(opts)?.trim_end_matches('/'),
        opts.profile
    ))
}

fn size(opts: &Options) -> Option<i64> {
    opts.config.get("size").and_then(Value::as_i64)
}

/// A request to the service, with the event, the custom resource type the host says it
/// serves (`group/version/plural/kind`) and, when `config.token` names a Secret and
/// key (`{secret, key}`), that credential as a bearer token.
fn request(method: &str, opts: &Options) -> Result<HttpRequest, String> {
    let r = &opts.resource;
    let mut request = HttpRequest::new(method, &url(opts)?)
        .header("x-inrun-event", opts.event.as_str())
        .header(
            "x-inrun-resource",
            &format!("{}/{}/{}/{}", r.group, r.version, r.plural, r.kind),
        );
    if let Some(token) = opts.config.get("token") {
        let field = |k: &str| token.get(k).and_then(Value::as_str).unwrap_or_default();
        let value = inrun_sdk::package::credential(field("secret"), field("key"))?;
        request = request.header("authorization", &format!("Bearer {value}"));
    }
    Ok(request)
}

fn failed(what: &str, status: u16, body: String) -> String {
    format!("{what}: the service answered {status}: {body}")
}

/// What the sandbox shows a package: `env=`, `args=`, `root=`, `cwd=` and `file=` lines.
fn ambient() -> Vec<String> {
    let env: Vec<String> = std::env::vars().map(|(k, _)| k).collect();
    let args: Vec<String> = std::env::args().collect();
    let listed = |dir: &str| match std::fs::read_dir(dir) {
        Ok(entries) => format!("listed {} entries", entries.count()),
        Err(e) => format!("error: {e}"),
    };
    let file = match std::fs::read("/etc/hostname") {
        Ok(bytes) => format!("read {} bytes", bytes.len()),
        Err(e) => format!("error: {e}"),
    };
    vec![
        format!("env={env:?}"),
        format!("args={args:?}"),
        format!("root={}", listed("/")),
        format!("cwd={}", listed(".")),
        format!("file={file}"),
    ]
}

impl Package for Infra {
    fn validate(opts: &Options) -> Vec<String> {
        if opts.config.get("probe").and_then(Value::as_str) == Some("ambient") {
            return ambient();
        }
        let mut errors = Vec::new();
        match endpoint(opts) {
            Ok(e) if e.starts_with("http://") || e.starts_with("https://") => {}
            Ok(e) => errors.push(format!("config.endpoint {e:?} is not an http(s) URL")),
            Err(e) => errors.push(e),
        }
        match size(opts) {
            Some(n) if n >= 1 => {}
            Some(n) => errors.push(format!(
                "secret-validation-detail: config.size must be at least 1, got {n}"
            )),
            None => errors.push("config.size must be a whole number".into()),
        }
        errors
    }

    fn identity(opts: &Options) -> Result<Identity, String> {
        Ok(Identity {
            boundary: endpoint(opts)?.to_string(),
            profile: opts.profile.clone(),
            // The thing is named by the profile: two CRs naming one profile name one thing.
            state: vec![
                Some(opts.profile.clone()),
                opts.config
                    .get("zone")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            ],
        })
    }

    fn observe(opts: &Options) -> Result<Observation, String> {
        let answer = request("GET", opts)?.send()?;
        match answer.status {
            404 => Ok(Observation::default()),
            200 => {
                let thing: Value = answer.json()?;
                Ok(Observation {
                    exists: true,
                    matches: thing["size"].as_i64() == size(opts),
                    ready: thing["ready"].as_bool().unwrap_or(false),
                })
            }
            s => Err(failed("observe", s, answer.text())),
        }
    }

    fn converge(opts: &Options) -> Result<Workflow, String> {
        let answer = request("PUT", opts)?
            .json(&json!({"size": size(opts)}))
            .send()?;
        match answer.status {
            200 | 201 | 204 => Ok(Workflow::completed()),
            202 => Ok(Workflow::pending()),
            s => Err(failed("converge", s, answer.text())),
        }
    }

    fn delete(opts: &Options) -> Result<Workflow, String> {
        let answer = request("DELETE", opts)?.send()?;
        match answer.status {
            200 | 204 | 404 => Ok(Workflow::completed()),
            202 => Ok(Workflow::pending()),
            s => Err(failed("delete", s, answer.text())),
        }
    }
}

inrun_sdk::export_package!(Infra);
