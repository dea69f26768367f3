//! What a package CR stands for: the identity the package names, as the pass stores it in
//! status ([`Stored`]) and hashes it ([`identity_hash`]).

use serde_json::Value;
use sha2::{Digest, Sha256};

use inrun_contract::package::Identity;

/// The state identity's hash: sha256 over each entry in order, an absent one as a single
/// `0` byte, a present one as `1`, its length (8 bytes, big-endian) and its UTF-8 bytes;
/// lowercase hex. Unambiguous (`["a", "b"]` and `["ab"]` differ) and the same on every run.
pub fn identity_hash(state: &[Option<String>]) -> String {
    let mut h = Sha256::new();
    for entry in state {
        match entry {
            None => h.update([0u8]),
            Some(s) => {
                h.update([1u8]);
                h.update((s.len() as u64).to_be_bytes());
                h.update(s.as_bytes());
            }
        }
    }
    hex::encode(h.finalize())
}

/// What the pass stores in status besides the conditions.
#[derive(Debug, Clone, Default)]
pub(super) struct Stored {
    pub(super) profile: Option<String>,
    pub(super) boundary: Option<String>,
    pub(super) identity: Option<String>,
}

impl Stored {
    pub(super) fn of(object: &Value) -> Self {
        let get = |k: &str| {
            object
                .pointer(&format!("/status/{k}"))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        Stored {
            profile: get("profile"),
            boundary: get("boundary"),
            identity: get("identity"),
        }
    }

    /// Which part of the identity `now` changes against this stored one, if any: the state,
    /// the boundary or the profile (a part not stored yet changes nothing).
    pub(super) fn changed(&self, now: &Stored) -> Option<&'static str> {
        self.identity.as_ref()?;
        let differs =
            |stored: &Option<String>, now: &Option<String>| stored.is_some() && stored != now;
        if differs(&self.identity, &now.identity) {
            Some("state")
        } else if differs(&self.boundary, &now.boundary) {
            Some("boundary")
        } else if differs(&self.profile, &now.profile) {
            Some("profile")
        } else {
            None
        }
    }

    pub(super) fn from(id: &Identity) -> Self {
        Stored {
            profile: Some(id.profile.clone()),
            boundary: Some(id.boundary.clone()),
            identity: Some(identity_hash(&id.state)),
        }
    }
}
