//! The active policy has two sources: the policy file and the keys made
//! through the admin API. When either changes, both are compiled again
//! ([`Policy::from_yaml_with`]) and the result swapped in; requests in
//! flight finish on the old one.
//!
//! The file's errors refuse the new file (the last valid one stays); an
//! API key the file contradicts (its id defined by the file, its tenant
//! gone) is left out with one warning per change, and works again once the
//! file allows it.

use std::sync::{Arc, Mutex};

use crate::authz::Authorizer;
use crate::policy::{ApiKey, Policy, PolicyError};
use crate::storage::Store;

struct State {
    /// The last valid policy file's text.
    file: String,
    api: Arc<Vec<ApiKey>>,
    /// Why API keys were left out at the last compile.
    left_out: Vec<String>,
}

/// Both sources of one authorizer's policy.
pub struct Sources<S: Store> {
    authz: Arc<Authorizer<S>>,
    state: Mutex<State>,
}

impl<S: Store> Sources<S> {
    /// `file` is the text the active policy was compiled from.
    pub fn new(authz: Arc<Authorizer<S>>, file: String) -> Self {
        Sources {
            authz,
            state: Mutex::new(State {
                file,
                api: Arc::new(Vec::new()),
                left_out: Vec::new(),
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn authz(&self) -> &Arc<Authorizer<S>> {
        &self.authz
    }

    /// A new policy file: compiled with the API keys and swapped in, or
    /// refused (the active policy stays).
    pub fn set_file(&self, text: &str) -> Result<Arc<Policy>, PolicyError> {
        let mut st = self.state();
        let (policy, left_out) = Policy::from_yaml_with(text, &st.api)?;
        st.file = text.to_string();
        Ok(self.swap(&mut st, policy, left_out))
    }

    /// New API keys (every one, sorted by id): compiled with the last
    /// valid file and swapped in.
    pub fn set_api(&self, api: Vec<ApiKey>) -> Result<Arc<Policy>, PolicyError> {
        let mut st = self.state();
        let (policy, left_out) = Policy::from_yaml_with(&st.file, &api)?;
        st.api = Arc::new(api);
        Ok(self.swap(&mut st, policy, left_out))
    }

    fn swap(&self, st: &mut State, policy: Policy, left_out: Vec<String>) -> Arc<Policy> {
        if left_out != st.left_out {
            for why in &left_out {
                tracing::warn!("{why}");
            }
            st.left_out = left_out;
        }
        self.authz.set_policy(policy);
        self.authz.policy()
    }
}
