//! A component linked against the host's imports, typed as the world it implements: the
//! template each instance is made from ([`Pre`]), and a live instance ([`Guest`]).

use wasmtime::Store;

use super::bindings::{
    self, hooks::HooksPre, hooks2::HooksPre as Hooks2Pre, package::PackagePre,
    reconciler::ReconcilerPre, reconciler2::ReconcilerPre as Reconciler2Pre,
};
use super::state::State;

/// A component's pre-linked instance template, typed as its world.
pub(super) enum Pre {
    Reconciler(ReconcilerPre<State>),
    /// A 0.2.0 `reconciler`: its outcome carries conditions and events.
    Reconciler2(Reconciler2Pre<State>),
    Hooks(HooksPre<State>),
    /// 0.2.0 `hooks`.
    Hooks2(Hooks2Pre<State>),
    Package(PackagePre<State>),
}

/// A live instance of a plugin's component, typed as its world.
pub(super) enum Guest {
    Reconciler(bindings::reconciler::Reconciler),
    Reconciler2(bindings::reconciler2::Reconciler),
    Hooks(bindings::hooks::Hooks),
    Hooks2(bindings::hooks2::Hooks),
    Package(bindings::package::Package),
}

impl Pre {
    /// The contract version the component's exports are typed as.
    pub(super) fn contract(&self) -> &'static str {
        match self {
            Pre::Reconciler(_) | Pre::Hooks(_) => "0.1.0",
            Pre::Reconciler2(_) | Pre::Hooks2(_) | Pre::Package(_) => "0.2.0",
        }
    }

    /// A new instance in `store`.
    pub(super) async fn instantiate(&self, store: &mut Store<State>) -> wasmtime::Result<Guest> {
        Ok(match self {
            Pre::Reconciler(pre) => Guest::Reconciler(pre.instantiate_async(store).await?),
            Pre::Reconciler2(pre) => Guest::Reconciler2(pre.instantiate_async(store).await?),
            Pre::Hooks(pre) => Guest::Hooks(pre.instantiate_async(store).await?),
            Pre::Hooks2(pre) => Guest::Hooks2(pre.instantiate_async(store).await?),
            Pre::Package(pre) => Guest::Package(pre.instantiate_async(store).await?),
        })
    }
}
