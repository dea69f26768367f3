//! `reconcile.rollout`: how a change of what reconciles a CRD reaches its CRs — step by
//! step, judged against the version it replaces, and undone when it does harm.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `rollout`: the steps a new version of a reconcile block takes through the CRs, how it
/// is judged, and what happens when it fails.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutSpec {
    /// The steps, each the share of CRs on the new version (increasing, the last 100).
    pub steps: Vec<RolloutStep>,
    /// CRs that move at the first step, whatever its share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub select: Option<RolloutSelect>,
    /// How the new version is judged against the old one.
    #[serde(default)]
    pub analysis: RolloutAnalysis,
    /// What a failed analysis does.
    #[serde(default)]
    pub on_failure: OnFailure,
    /// Before the first CR moves, the host plans the new version over every CR (each
    /// rendered as `inrun plan` renders it, nothing written): if it fails on a CR the old
    /// version serves well, no CR moves and the rollout ends rolled back.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub require_plan: bool,
}

/// One `rollout.steps` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutStep {
    /// The share of CRs on the new version at this step, in percent (1 to 100).
    pub percent: u8,
    /// How long the step holds before the next one (none: the next follows at once).
    #[serde(
        default,
        with = "inrun_contract::duration::serde_opt",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<String>")]
    pub pause: Option<Duration>,
}

/// `rollout.select`: the CRs that go first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutSelect {
    /// Namespaces, each a name or a prefix ending in `*` (`canary-*`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
}

impl RolloutSelect {
    /// Whether a CR in `namespace` (`None`: cluster-scoped) goes first.
    pub fn selects(&self, namespace: Option<&str>) -> bool {
        let Some(namespace) = namespace else {
            return false;
        };
        self.namespaces
            .iter()
            .any(|pattern| match pattern.strip_suffix('*') {
                Some(prefix) => namespace.starts_with(prefix),
                None => pattern == namespace,
            })
    }
}

/// `rollout.analysis`: the thresholds the new version must keep, over a sliding window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutAnalysis {
    /// The window the passes are counted over (default 2m).
    #[serde(
        default = "default_window",
        with = "inrun_contract::duration::serde_str"
    )]
    #[schemars(with = "String")]
    pub window: Duration,
    /// The share of the new version's passes that may fail (errors, traps, deadlines,
    /// refusals), 0 to 1 (default 0.05).
    #[serde(default = "default_failure_rate")]
    pub max_failure_rate: f64,
    /// The share of the CRs the new version reconciled that must be Ready at the end of
    /// a step, 0 to 1 (default 0.9).
    #[serde(default = "default_ready_ratio")]
    pub min_ready_ratio: f64,
}

fn default_window() -> Duration {
    Duration::from_secs(120)
}

fn default_failure_rate() -> f64 {
    0.05
}

fn default_ready_ratio() -> f64 {
    0.9
}

impl Default for RolloutAnalysis {
    fn default() -> Self {
        RolloutAnalysis {
            window: default_window(),
            max_failure_rate: default_failure_rate(),
            min_ready_ratio: default_ready_ratio(),
        }
    }
}

/// `rollout.onFailure`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum OnFailure {
    /// Every CR on the new version goes back to the old one (the default).
    #[default]
    Rollback,
    /// The rollout stops where it is: CRs stay on the version they are on.
    Pause,
}
