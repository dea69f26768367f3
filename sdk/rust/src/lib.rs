//! Write Inrun reconcilers and hooks in Rust, compiled to WebAssembly components.
//!
//! A plugin implements one trait and exports it with one macro:
//!
//! - [`Reconciler`] + [`export_reconciler!`]: a full reconciler (Inrun's *constructor*
//!   kind), the `reconciler` world of `inrun:reconciler@0.1.0`.
//! - [`Hooks`] + [`export_hooks!`]: named functions that adjust the outcome a Blueprint's
//!   templates rendered, the `hooks` world.
//! - [`package::Package`] + [`export_package!`]: an infrastructure package that observes
//!   and converges something outside Kubernetes, the `package` world of
//!   `inrun:reconciler@0.2.0`.
//!
//! Both receive a typed [`Request`] and return an [`Outcome`]; the SDK turns the JSON
//! text of the WIT contract into `serde_json` values and back. [`log`] writes to the
//! host's log. A plugin the Blueprint grants capabilities to can also read Kubernetes
//! objects ([`cluster`]) and make HTTP requests ([`http`]); without a grant, those calls
//! return an error.
//!
//! ```no_run
//! use inrun_sdk::{Outcome, Reconciler, Request};
//! use serde_json::json;
//!
//! struct Hello;
//!
//! impl Reconciler for Hello {
//!     fn reconcile(req: Request) -> Result<Outcome, String> {
//!         let greeting: String = req.arg("greeting")?;
//!         Ok(Outcome::new()
//!             .resource(json!({
//!                 "apiVersion": "v1",
//!                 "kind": "ConfigMap",
//!                 "metadata": {"name": req.name(), "namespace": req.namespace()},
//!                 "data": {"greeting": greeting},
//!             }))
//!             .status("greeted", true))
//!     }
//! }
//!
//! inrun_sdk::export_reconciler!(Hello);
//! ```
//!
//! The crate also builds for native targets, so a plugin's logic can be unit-tested (and
//! benchmarked) with a plain `cargo test`; there, [`log`] writes to standard error.

#![warn(missing_docs)]
#![deny(unsafe_code)]

pub mod bindings;
pub mod cluster;
pub mod http;
pub mod log;
mod outcome;
pub mod package;
mod request;

pub use outcome::{Cleanup, Condition, Event, Outcome};
pub use request::Request;
pub use serde_json::{self, Map, Value, json};

/// A full reconciler: decides what a custom resource should become.
pub trait Reconciler {
    /// Returns what the CR in `req` should become.
    ///
    /// # Errors
    /// An `Err` fails this reconcile: the host records a `ReconcileError` event with the
    /// message and retries with backoff.
    fn reconcile(req: Request) -> Result<Outcome, String>;
}

/// Named functions that adjust the outcome a Blueprint's templates rendered.
///
/// The Blueprint lists `reconcile.hooks: [{location, function}]`; the host calls
/// [`call`](Hooks::call) for each, in order, passing each function the outcome so far.
pub trait Hooks {
    /// The names [`call`](Hooks::call) accepts; the host checks the Blueprint against
    /// them when it loads the plugin.
    fn functions() -> Vec<String>;

    /// Runs `function` on `current`, the outcome so far, and returns the new outcome.
    /// The SDK only calls it with a name [`functions`](Hooks::functions) lists.
    ///
    /// # Errors
    /// An `Err` fails this reconcile, like a reconciler's error.
    fn call(function: &str, req: Request, current: Outcome) -> Result<Outcome, String>;
}

/// Exports a type implementing [`Reconciler`] as the component's `reconcile` function.
///
/// Use it once, at the top level of a `cdylib` crate built for `wasm32-wasip2`:
///
/// ```ignore
/// inrun_sdk::export_reconciler!(MyReconciler);
/// ```
#[macro_export]
macro_rules! export_reconciler {
    ($ty:ty) => {
        const _: () = {
            struct InrunReconcilerExport;

            impl $crate::bindings::reconciler2::Guest for InrunReconcilerExport {
                fn reconcile(
                    req: $crate::bindings::types::Request,
                ) -> ::core::result::Result<$crate::bindings::types2::Outcome, ::std::string::String>
                {
                    $crate::__private::reconcile::<$ty>(req)
                }
            }

            $crate::bindings::reconciler2::__export_reconciler2_world!(
                InrunReconcilerExport with_types_in $crate::bindings::reconciler2
            );
        };
    };
}

/// Exports a type implementing [`Hooks`] as the component's `functions` and `call`.
///
/// Use it once, at the top level of a `cdylib` crate built for `wasm32-wasip2`:
///
/// ```ignore
/// inrun_sdk::export_hooks!(MyHooks);
/// ```
#[macro_export]
macro_rules! export_hooks {
    ($ty:ty) => {
        const _: () = {
            struct InrunHooksExport;

            impl $crate::bindings::hooks2::Guest for InrunHooksExport {
                fn functions() -> ::std::vec::Vec<::std::string::String> {
                    <$ty as $crate::Hooks>::functions()
                }

                fn call(
                    function: ::std::string::String,
                    req: $crate::bindings::types::Request,
                    current: $crate::bindings::types2::Outcome,
                ) -> ::core::result::Result<$crate::bindings::types2::Outcome, ::std::string::String>
                {
                    $crate::__private::call_hook::<$ty>(&function, req, current)
                }
            }

            $crate::bindings::hooks2::__export_hooks2_world!(
                InrunHooksExport with_types_in $crate::bindings::hooks2
            );
        };
    };
}

/// Exports a type implementing the raw generated
/// [`bindings::reconciler2::Guest`] trait (the 0.2.0 world), skipping the typed layer.
///
/// Only for guests that must return what [`Outcome`] cannot express, such as a test
/// guest whose resources are not JSON.
#[macro_export]
macro_rules! export_raw_reconciler {
    ($ty:ident) => {
        $crate::bindings::reconciler2::__export_reconciler2_world!(
            $ty with_types_in $crate::bindings::reconciler2
        );
    };
}

/// Glue the export macros expand to; not part of the public API.
#[doc(hidden)]
pub mod __private {
    use crate::bindings::types as wit;
    use crate::bindings::types2 as wit2;
    use crate::{Hooks, Outcome, Reconciler, Request};

    /// Runs a typed reconciler on a WIT request.
    pub fn reconcile<R: Reconciler>(req: wit::Request) -> Result<wit2::Outcome, String> {
        let req = Request::try_from(req)?;
        R::reconcile(req).map(wit2::Outcome::from)
    }

    /// Runs one typed hook function on a WIT request and outcome, refusing names the
    /// hooks do not list.
    pub fn call_hook<H: Hooks>(
        function: &str,
        req: wit::Request,
        current: wit2::Outcome,
    ) -> Result<wit2::Outcome, String> {
        let known = H::functions();
        if !known.iter().any(|f| f == function) {
            return Err(format!(
                "unknown hook function `{function}`; this plugin has: {}",
                known.join(", ")
            ));
        }
        let req = Request::try_from(req)?;
        let current = Outcome::try_from(current)?;
        H::call(function, req, current).map(wit2::Outcome::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::types as wit;

    struct Echo;

    impl Reconciler for Echo {
        fn reconcile(req: Request) -> Result<Outcome, String> {
            if req.finalizing {
                return Err("finalizing".to_owned());
            }
            Ok(Outcome::new().status("name", req.name()))
        }
    }

    struct Tag;

    impl Hooks for Tag {
        fn functions() -> Vec<String> {
            vec!["tag".to_owned()]
        }

        fn call(_function: &str, _req: Request, current: Outcome) -> Result<Outcome, String> {
            Ok(current.label("tagged", "yes"))
        }
    }

    fn wit_request(object: &str) -> wit::Request {
        let mut req = wit::Request::from(&Request::for_object(json!({}), json!({})));
        req.object = object.to_owned();
        req
    }

    #[test]
    fn the_reconcile_glue_parses_the_request_and_writes_the_outcome() {
        let out = __private::reconcile::<Echo>(wit_request(r#"{"metadata":{"name":"a"}}"#));
        assert_eq!(
            out.map(|o| o.status),
            Ok(Some(r#"{"name":"a"}"#.to_owned()))
        );
    }

    #[test]
    fn the_reconcile_glue_turns_bad_json_into_an_error() {
        let out = __private::reconcile::<Echo>(wit_request("{"));
        assert!(out.is_err_and(|e| e.starts_with("request.object is not valid JSON")));
    }

    #[test]
    fn the_reconcile_glue_passes_the_reconcilers_error_through() {
        let mut req = wit_request("{}");
        req.finalizing = true;
        assert_eq!(
            __private::reconcile::<Echo>(req).map(|_| ()),
            Err("finalizing".to_owned())
        );
    }

    #[test]
    fn the_hook_glue_runs_a_listed_function_on_the_current_outcome() {
        let current = crate::bindings::types2::Outcome::from(Outcome::new().label("kept", "1"));
        let out = __private::call_hook::<Tag>("tag", wit_request("{}"), current);
        let labels = out.map(|o| o.labels).unwrap_or_default();
        assert_eq!(
            labels,
            vec![
                ("kept".to_owned(), "1".to_owned()),
                ("tagged".to_owned(), "yes".to_owned())
            ]
        );
    }

    #[test]
    fn the_hook_glue_refuses_an_unlisted_function() {
        let out = __private::call_hook::<Tag>("nope", wit_request("{}"), Outcome::new().into());
        assert_eq!(
            out.map(|_| ()),
            Err("unknown hook function `nope`; this plugin has: tag".to_owned())
        );
    }
}
