//! Calls into a `package` component (`inrun:reconciler@0.2.0`): each one a fresh store
//! with the plugin's limits and grants, like a reconcile, and each answer checked against
//! the output cap before the host reads it.

use inrun_contract::package::{Change, Event, Identity, Observation, Options, Progress, Workflow};
use serde_json::Value;

use super::bindings::package::inrun::reconciler0_2_0::infrastructure as wit;
use super::call::truncate_owned;
use super::error::{CallError, CallFailure};
use super::grants::Grants;
use super::guest::Guest;
use super::limits::Limits;
use super::plugin::Plugin;
use super::state::State;

/// Which export a call runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Export {
    Validate,
    Identity,
    Observe,
    Converge,
    Delete,
}

enum Answer {
    Errors(Vec<String>),
    Identity(Result<wit::Identity, String>),
    Observation(Result<wit::Observation, String>),
    Workflow(Result<wit::Workflow, String>),
}

impl Plugin {
    /// `validate`: the problems with `opts`, empty when they are valid.
    ///
    /// # Errors
    /// [`CallError`] when the call itself failed (deadline, memory, trap, oversized answer).
    pub async fn package_validate(
        &self,
        opts: &Options,
        limits: &Limits,
        grants: &Grants,
    ) -> Result<Vec<String>, CallError> {
        self.observed(async {
            match self
                .package_call(Export::Validate, opts, limits, grants)
                .await?
            {
                Answer::Errors(errors) => {
                    let size: usize = errors.iter().map(String::len).sum();
                    self.within(size, limits)?;
                    Ok(errors)
                }
                _ => unreachable!("validate answers errors"),
            }
        })
        .await
    }

    /// `identity`: which thing the CR stands for.
    ///
    /// # Errors
    /// [`CallError`], also for an `err` the package returned.
    pub async fn package_identity(
        &self,
        opts: &Options,
        limits: &Limits,
        grants: &Grants,
    ) -> Result<Identity, CallError> {
        self.observed(async {
            let Answer::Identity(answer) = self
                .package_call(Export::Identity, opts, limits, grants)
                .await?
            else {
                unreachable!("identity answers an identity")
            };
            let id = answer.map_err(|e| self.returned(e))?;
            let size = id.boundary.len()
                + id.profile.len()
                + id.state.iter().flatten().map(String::len).sum::<usize>();
            self.within(size, limits)?;
            Ok(Identity {
                boundary: id.boundary,
                profile: id.profile,
                state: id.state,
            })
        })
        .await
    }

    /// `observe`: what the thing looks like now.
    ///
    /// # Errors
    /// [`CallError`], also for an `err` the package returned.
    pub async fn package_observe(
        &self,
        opts: &Options,
        limits: &Limits,
        grants: &Grants,
    ) -> Result<Observation, CallError> {
        self.observed(async {
            let Answer::Observation(answer) = self
                .package_call(Export::Observe, opts, limits, grants)
                .await?
            else {
                unreachable!("observe answers an observation")
            };
            let o = answer.map_err(|e| self.returned(e))?;
            Ok(Observation {
                exists: o.exists,
                matches: o.matches,
                ready: o.ready,
            })
        })
        .await
    }

    /// `converge` or `delete`, as `change` says: a workflow outcome.
    ///
    /// # Errors
    /// [`CallError`], also for an `err` the package returned.
    pub async fn package_workflow(
        &self,
        change: Change,
        opts: &Options,
        limits: &Limits,
        grants: &Grants,
    ) -> Result<Workflow, CallError> {
        self.observed(async {
            let export = match change {
                Change::Converge => Export::Converge,
                Change::Delete => Export::Delete,
            };
            let Answer::Workflow(answer) = self.package_call(export, opts, limits, grants).await?
            else {
                unreachable!("converge and delete answer a workflow")
            };
            let w = answer.map_err(|e| self.returned(e))?;
            self.within(w.detail.as_ref().map_or(0, String::len), limits)?;
            Ok(Workflow {
                progress: match w.progress {
                    wit::Progress::Completed => Progress::Completed,
                    wit::Progress::Pending => Progress::Pending,
                    wit::Progress::Failed => Progress::Failed,
                },
                detail: w.detail.map(|d| truncate_owned(d, 500)),
            })
        })
        .await
    }

    async fn package_call(
        &self,
        export: Export,
        opts: &Options,
        limits: &Limits,
        grants: &Grants,
    ) -> Result<Answer, CallError> {
        let wit_opts = to_wit(opts);
        let call = async |store: &mut wasmtime::Store<State>, guest: &Guest| {
            let Guest::Package(guest) = guest else {
                return Err(wasmtime::format_err!(
                    "a {} component is not a package",
                    self.world().name()
                ));
            };
            Ok(match export {
                Export::Validate => Answer::Errors(guest.call_validate(store, &wit_opts).await?),
                Export::Identity => Answer::Identity(guest.call_identity(store, &wit_opts).await?),
                Export::Observe => Answer::Observation(guest.call_observe(store, &wit_opts).await?),
                Export::Converge => Answer::Workflow(guest.call_converge(store, &wit_opts).await?),
                Export::Delete => Answer::Workflow(guest.call_delete(store, &wit_opts).await?),
            })
        };
        // A package's calls always get a fresh instance: they carry credentials.
        self.in_store(limits, grants, opts.namespace.clone(), None, call, Ok)
            .await
    }

    fn returned(&self, message: String) -> CallError {
        CallError {
            plugin: self.id().clone(),
            failure: CallFailure::Returned(truncate_owned(message, 500)),
        }
    }

    fn within(&self, size: usize, limits: &Limits) -> Result<(), CallError> {
        if size <= limits.output_bytes {
            return Ok(());
        }
        Err(CallError {
            plugin: self.id().clone(),
            failure: CallFailure::BadOutput(format!(
                "{size} bytes of output, more than its limit of {} bytes",
                limits.output_bytes
            )),
        })
    }
}

fn to_wit(opts: &Options) -> wit::Options {
    wit::Options {
        config: Value::Object(opts.config.clone()).to_string(),
        profile: opts.profile.clone(),
        state: opts.state.clone(),
        event: match opts.event {
            Event::Changed => wit::Event::Changed,
            Event::Interval => wit::Event::Interval,
            Event::Requested => wit::Event::Requested,
            Event::Retry => wit::Event::Retry,
            Event::Deleting => wit::Event::Deleting,
        },
        resource: wit::Descriptor {
            group: opts.resource.group.clone(),
            version: opts.resource.version.clone(),
            plural: opts.resource.plural.clone(),
            kind: opts.resource.kind.clone(),
        },
        namespace: opts.namespace.clone(),
        name: opts.name.clone(),
    }
}
