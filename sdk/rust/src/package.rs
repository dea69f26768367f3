//! Infrastructure packages: a custom resource that stands for something outside
//! Kubernetes (a database, a bucket, a DNS zone). The host calls [`Package::validate`],
//! [`Package::identity`] and [`Package::observe`], and [`Package::converge`] or
//! [`Package::delete`] only when what it observes calls for it; the world is `package` of
//! `inrun:reconciler@0.2.0`, exported with [`export_package!`](crate::export_package).
//!
//! A package reaches its backend through [`http`](crate::http) (hosts the Blueprint
//! grants) with the credentials [`credential`] reads (keys of Secrets the Blueprint
//! grants, in the CR's namespace); it sees no environment. Errors and
//! [`Workflow::detail`] reach only the host's log: the CR's status carries generic reasons.

pub use inrun_contract::package::{
    Descriptor, Event, Identity, Observation, Options, Progress, Workflow,
};

use crate::bindings::package::inrun::reconciler0_2_0::infrastructure as wit;

/// The value of `key` in the Secret `name` of the CR's namespace, when the Blueprint
/// grants it (`package.capabilities.credentials`). Keep it out of what the package
/// returns: an error text or a workflow detail reaches the host's log.
///
/// # Errors
/// Why not: not granted, the Secret or key missing, the read failed (never the value).
pub fn credential(name: &str, key: &str) -> Result<String, String> {
    crate::bindings::package::inrun::reconciler0_2_0::credentials::get(name, key)
}

/// An infrastructure package. Every call receives the same [`Options`]; each must be
/// idempotent (the host calls `converge` again after a retry, and `delete` again while the
/// thing still exists).
pub trait Package {
    /// Problems with the options; empty when they are valid. The default accepts all.
    fn validate(opts: &Options) -> Vec<String> {
        let _ = opts;
        Vec::new()
    }

    /// Which thing the CR stands for.
    ///
    /// # Errors
    /// Text for the host's log; the CR shows `IdentityFailed`.
    fn identity(opts: &Options) -> Result<Identity, String>;

    /// What the thing looks like now.
    ///
    /// # Errors
    /// Text for the host's log; the CR shows `ObserveFailed`.
    fn observe(opts: &Options) -> Result<Observation, String>;

    /// Make the thing as the options describe.
    ///
    /// # Errors
    /// Text for the host's log; the CR shows `ConvergeFailed`.
    fn converge(opts: &Options) -> Result<Workflow, String>;

    /// Delete the thing.
    ///
    /// # Errors
    /// Text for the host's log; the CR shows `DeleteFailed`.
    fn delete(opts: &Options) -> Result<Workflow, String>;
}

/// Glue the export macro expands to; not part of the public API.
#[doc(hidden)]
pub mod glue {
    use super::{Package, wit};
    use inrun_contract::package::{Descriptor, Event, Options, Progress, Workflow};

    /// The typed options of a WIT call.
    pub fn options(o: wit::Options) -> Result<Options, String> {
        let config = match serde_json::from_str(&o.config) {
            Ok(serde_json::Value::Object(m)) => m,
            Ok(_) => return Err("options.config is not a JSON object".into()),
            Err(e) => return Err(format!("options.config is not valid JSON: {e}")),
        };
        Ok(Options {
            config,
            profile: o.profile,
            state: o.state,
            event: match o.event {
                wit::Event::Changed => Event::Changed,
                wit::Event::Interval => Event::Interval,
                wit::Event::Requested => Event::Requested,
                wit::Event::Retry => Event::Retry,
                wit::Event::Deleting => Event::Deleting,
            },
            resource: Descriptor {
                group: o.resource.group,
                version: o.resource.version,
                plural: o.resource.plural,
                kind: o.resource.kind,
            },
            namespace: o.namespace,
            name: o.name,
        })
    }

    fn to_wit(w: Workflow) -> wit::Workflow {
        wit::Workflow {
            progress: match w.progress {
                Progress::Completed => wit::Progress::Completed,
                Progress::Pending => wit::Progress::Pending,
                Progress::Failed => wit::Progress::Failed,
            },
            detail: w.detail,
        }
    }

    /// `validate`.
    pub fn validate<P: Package>(o: wit::Options) -> Vec<String> {
        match options(o) {
            Ok(opts) => P::validate(&opts),
            Err(e) => vec![e],
        }
    }

    /// `identity`.
    pub fn identity<P: Package>(o: wit::Options) -> Result<wit::Identity, String> {
        let id = P::identity(&options(o)?)?;
        Ok(wit::Identity {
            boundary: id.boundary,
            profile: id.profile,
            state: id.state,
        })
    }

    /// `observe`.
    pub fn observe<P: Package>(o: wit::Options) -> Result<wit::Observation, String> {
        let seen = P::observe(&options(o)?)?;
        Ok(wit::Observation {
            exists: seen.exists,
            matches: seen.matches,
            ready: seen.ready,
        })
    }

    /// `converge` or `delete`.
    pub fn workflow<P: Package>(delete: bool, o: wit::Options) -> Result<wit::Workflow, String> {
        let opts = options(o)?;
        let w = if delete {
            P::delete(&opts)?
        } else {
            P::converge(&opts)?
        };
        Ok(to_wit(w))
    }
}

/// Exports a type implementing [`Package`](crate::package::Package) as the component's
/// `package` world.
///
/// ```ignore
/// inrun_sdk::export_package!(MyDatabase);
/// ```
#[macro_export]
macro_rules! export_package {
    ($ty:ty) => {
        const _: () = {
            use $crate::bindings::package::inrun::reconciler0_2_0::infrastructure as wit;

            struct InrunPackageExport;

            impl $crate::bindings::package::Guest for InrunPackageExport {
                fn validate(opts: wit::Options) -> ::std::vec::Vec<::std::string::String> {
                    $crate::package::glue::validate::<$ty>(opts)
                }
                fn identity(
                    opts: wit::Options,
                ) -> ::core::result::Result<wit::Identity, ::std::string::String> {
                    $crate::package::glue::identity::<$ty>(opts)
                }
                fn observe(
                    opts: wit::Options,
                ) -> ::core::result::Result<wit::Observation, ::std::string::String> {
                    $crate::package::glue::observe::<$ty>(opts)
                }
                fn converge(
                    opts: wit::Options,
                ) -> ::core::result::Result<wit::Workflow, ::std::string::String> {
                    $crate::package::glue::workflow::<$ty>(false, opts)
                }
                fn delete(
                    opts: wit::Options,
                ) -> ::core::result::Result<wit::Workflow, ::std::string::String> {
                    $crate::package::glue::workflow::<$ty>(true, opts)
                }
            }

            $crate::bindings::package::__export_package_world!(
                InrunPackageExport with_types_in $crate::bindings::package
            );
        };
    };
}
