//! Policy reload: on SIGHUP and whenever the file's content changes (polled,
//! which also catches editors that replace the file by rename). A new policy
//! is swapped in atomically; requests in flight finish on the old one. An
//! invalid file is refused with one log line per change and the old policy
//! stays. The file is compiled with the admin API's keys
//! ([`crate::sources`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::sources::Sources;
use crate::storage::Store;

/// Outcome of one reload attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reload {
    Unchanged,
    Applied,
    Refused(String),
}

/// Watches one policy file for one authorizer.
pub struct Reloader<S: Store> {
    path: PathBuf,
    sources: Arc<Sources<S>>,
    last: Option<Vec<u8>>,
}

impl<S: Store> Reloader<S> {
    /// `initial` is the content the active policy was loaded from.
    pub fn new(path: &Path, sources: Arc<Sources<S>>, initial: Option<Vec<u8>>) -> Self {
        Reloader {
            path: path.to_path_buf(),
            sources,
            last: initial,
        }
    }

    /// Reload if the content changed (or always, when `force`).
    pub fn poll(&mut self, force: bool) -> Reload {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) => {
                let msg = format!("cannot read policy file {}: {e}", self.path.display());
                if force || self.last.is_some() {
                    tracing::error!("policy reload refused, keeping the previous policy: {msg}");
                    self.sources
                        .authz()
                        .metrics()
                        .policy_reloads
                        .with_label_values(&["refused"])
                        .inc();
                }
                self.last = None;
                return Reload::Refused(msg);
            }
        };
        if !force && self.last.as_deref() == Some(bytes.as_slice()) {
            return Reload::Unchanged;
        }
        self.last = Some(bytes.clone());
        let text = String::from_utf8_lossy(&bytes);
        match self.sources.set_file(&text) {
            Ok(p) => {
                tracing::info!(path = %self.path.display(), keys = p.key_count(), tenants = p.tenant_count(), "policy reloaded");
                self.sources
                    .authz()
                    .metrics()
                    .policy_reloads
                    .with_label_values(&["applied"])
                    .inc();
                Reload::Applied
            }
            Err(e) => {
                tracing::error!(path = %self.path.display(), "policy reload refused, keeping the previous policy: {e}");
                self.sources
                    .authz()
                    .metrics()
                    .policy_reloads
                    .with_label_values(&["refused"])
                    .inc();
                Reload::Refused(e.to_string())
            }
        }
    }

    /// Poll every `interval` and reload on SIGHUP, until `shutdown` fires.
    pub async fn run(
        mut self,
        interval: Duration,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        #[cfg(unix)]
        let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            #[cfg(unix)]
            let hup_fut = async {
                match hup.as_mut() {
                    Some(h) => h.recv().await,
                    None => std::future::pending().await,
                }
            };
            #[cfg(not(unix))]
            let hup_fut = std::future::pending::<Option<()>>();
            tokio::select! {
                _ = tick.tick() => { self.poll(false); }
                _ = hup_fut => {
                    tracing::info!("SIGHUP: reloading policy");
                    self.poll(true);
                }
                _ = shutdown.changed() => return,
            }
        }
    }
}
