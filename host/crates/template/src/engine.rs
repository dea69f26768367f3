//! The engine: one minijinja environment that owns every compiled template.
//!
//! minijinja's compiled templates borrow their environment, so they cannot be stored
//! beside it. Instead each compiled template is added to the environment under a unique
//! name, and a [`Compiled`] handle keeps that name (and removes the template when it is
//! dropped, so reloading a Blueprint does not leak). Rendering takes a read lock; only
//! compiling and dropping write.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};

use minijinja::syntax::SyntaxConfig;
use minijinja::{AutoEscape, Environment, UndefinedBehavior, Value as Jinja};

use super::context::Context;
use super::error::{TemplateError, TemplateOrigin};
use super::filters;

/// The variable a typed template stores its value in.
const TYPED_VALUE: &str = "__inrun_value";

/// Instructions one render may execute: loops a tenant or CR author writes end here
/// instead of stalling a worker (a Deployment template takes a few hundred).
pub const FUEL: u64 = 1_000_000;

/// Bytes one render may write: more than any object the API server stores (1.5 MiB).
pub const MAX_OUTPUT: usize = 4 << 20;

/// An `io::Write` that refuses to grow past [`MAX_OUTPUT`].
struct Capped {
    out: Vec<u8>,
    exceeded: bool,
}

impl std::io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.out.len() + buf.len() > MAX_OUTPUT {
            self.exceeded = true;
            return Err(std::io::Error::other("template output too large"));
        }
        self.out.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Compiles templates once and renders them many times.
///
/// Cloning is cheap (the environment is shared), and an engine is `Send + Sync`, so one
/// engine serves every CRD of a host. Templates are Jinja (minijinja) with Go-style paths
/// accepted (`{{ .spec.image }}`); missing paths render as empty rather than failing;
/// blocks trim their trailing newline and leading indentation (`trim_blocks`,
/// `lstrip_blocks`) so YAML loops read naturally.
#[derive(Clone)]
pub struct Engine {
    shared: Arc<Shared>,
}

struct Shared {
    env: RwLock<Environment<'static>>,
    next_id: AtomicU64,
}

impl Shared {
    fn read(&self) -> RwLockReadGuard<'_, Environment<'static>> {
        self.env.read().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine")
            .field("templates", &self.shared.read().templates().count())
            .finish()
    }
}

impl Default for Engine {
    fn default() -> Engine {
        Engine::new()
    }
}

impl Engine {
    /// A new engine with Inrun's filters (`toJson`, `toYaml`, `b64enc`, `b64dec`,
    /// `required`) on top of minijinja's builtins.
    pub fn new() -> Engine {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Chainable);
        env.set_fuel(Some(FUEL));
        env.set_auto_escape_callback(|_| AutoEscape::None);
        // `none` prints as nothing, like undefined: a null field renders as an empty string.
        env.set_formatter(|out, state, value| {
            if value.is_none() {
                Ok(())
            } else {
                minijinja::escape_formatter(out, state, value)
            }
        });
        if let Ok(syntax) = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .keep_trailing_newline(true)
            .build()
        {
            env.set_syntax(syntax);
        }
        filters::register(&mut env);
        Engine {
            shared: Arc::new(Shared {
                env: RwLock::new(env),
                next_id: AtomicU64::new(0),
            }),
        }
    }

    /// Compiles `source` (already rewritten to Jinja) as a text template.
    pub(crate) fn compile_text(
        &self,
        origin: TemplateOrigin,
        source: String,
    ) -> Result<Compiled, TemplateError> {
        self.add(origin, source, false)
    }

    /// Compiles `expr` (already rewritten to Jinja) so that rendering yields its value.
    ///
    /// The expression is stored as `{% set __inrun_value = (expr) %}` and read back from
    /// the template's state. When that does not compile, the expression is compiled as
    /// `{{ expr }}` to report the error the user would expect.
    pub(crate) fn compile_typed(
        &self,
        origin: TemplateOrigin,
        expr: &str,
    ) -> Result<Compiled, TemplateError> {
        let wrapped = format!("{{% set {TYPED_VALUE} = ({expr}) %}}");
        match self.add(origin.clone(), wrapped, true) {
            Ok(compiled) => Ok(compiled),
            Err(wrapped_error) => match self.add(origin, format!("{{{{{expr}}}}}"), false) {
                Err(plain_error) => Err(plain_error),
                Ok(_) => Err(wrapped_error),
            },
        }
    }

    fn add(
        &self,
        origin: TemplateOrigin,
        source: String,
        typed: bool,
    ) -> Result<Compiled, TemplateError> {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let name = if origin.path.is_empty() {
            format!("template#{id}")
        } else {
            format!("{}#{id}", origin.path)
        };
        let mut env = self
            .shared
            .env
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        match env.add_template_owned(name.clone(), source) {
            Ok(()) => Ok(Compiled {
                shared: Arc::clone(&self.shared),
                name,
                typed,
                origin,
            }),
            Err(source) => Err(TemplateError::Compile {
                origin,
                line: source.line().unwrap_or(1),
                source,
            }),
        }
    }
}

/// One template stored in the engine's environment.
pub(crate) struct Compiled {
    shared: Arc<Shared>,
    name: String,
    typed: bool,
    origin: TemplateOrigin,
}

impl fmt::Debug for Compiled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Compiled")
            .field("origin", &self.origin)
            .field("typed", &self.typed)
            .finish()
    }
}

impl Drop for Compiled {
    fn drop(&mut self) {
        let mut env = self
            .shared
            .env
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        env.remove_template(&self.name);
    }
}

/// Runs a render where it cannot stall an async runtime: on a multi-thread Tokio
/// runtime's worker, the worker's other tasks move to another thread first, so a template
/// that spends its whole fuel (tens of milliseconds) holds up no lease renewal, probe or
/// other tenant. Anywhere else (no runtime, a blocking thread) it just runs.
fn off_worker<R>(render: impl FnOnce() -> R) -> R {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(render)
        }
        _ => render(),
    }
}

impl Compiled {
    /// Where this template came from.
    pub(crate) fn origin(&self) -> &TemplateOrigin {
        &self.origin
    }

    /// Renders to text. A typed template renders its value's printed form.
    pub(crate) fn render_text(&self, ctx: &Context) -> Result<String, TemplateError> {
        if self.typed {
            let value = self.render_value(ctx)?;
            return Ok(if value.is_none() || value.is_undefined() {
                String::new()
            } else {
                value.to_string()
            });
        }
        let env = self.shared.read();
        let template = env
            .get_template(&self.name)
            .map_err(|e| self.render_error(e))?;
        let mut out = Capped {
            out: Vec::new(),
            exceeded: false,
        };
        match off_worker(|| template.render_captured_to(ctx.value(), &mut out)) {
            Ok(_) => String::from_utf8(out.out).map_err(|e| {
                self.render_error(minijinja::Error::new(
                    minijinja::ErrorKind::InvalidOperation,
                    format!("template output is not UTF-8: {e}"),
                ))
            }),
            Err(_) if out.exceeded => Err(self.render_error(minijinja::Error::new(
                minijinja::ErrorKind::InvalidOperation,
                format!("template output exceeds {MAX_OUTPUT} bytes"),
            ))),
            Err(e) => Err(self.render_error(e)),
        }
    }

    /// Renders to a value: the expression's value for a typed template, the text otherwise.
    pub(crate) fn render_value(&self, ctx: &Context) -> Result<Jinja, TemplateError> {
        if !self.typed {
            return self.render_text(ctx).map(Jinja::from);
        }
        let env = self.shared.read();
        let template = env
            .get_template(&self.name)
            .map_err(|e| self.render_error(e))?;
        let captured = off_worker(|| template.render_captured(ctx.value()))
            .map_err(|e| self.render_error(e))?;
        Ok(captured
            .state()
            .lookup(TYPED_VALUE)
            .unwrap_or(Jinja::UNDEFINED))
    }

    fn render_error(&self, source: minijinja::Error) -> TemplateError {
        TemplateError::Render {
            origin: self.origin.clone(),
            line: source.line().unwrap_or(1),
            source,
        }
    }
}
