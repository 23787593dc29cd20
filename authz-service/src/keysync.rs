//! Keys made through the admin API reach this instance: the key store is
//! asked every `--keys-poll-ms` (default 200 ms) what changed since the
//! version this instance holds, in one call that answers with the changed
//! records; a change is compiled into the policy ([`crate::sources`]). So a
//! key made, changed or revoked on any instance applies on every other one
//! within a poll plus a compile, and a Check never calls the key store:
//! keys are held in memory, in the compiled policy.
//!
//! While the store is unreachable the keys last read stay in force (and at
//! start-up, before the first read, API keys are unknown: 401).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::keystore::{KeyStore, KeyStoreError, Record};
use crate::sources::Sources;
use crate::storage::Store;

#[derive(Default)]
struct Held {
    /// The key store's version of `records` (0: nothing read yet).
    seen: u64,
    records: BTreeMap<String, Record>,
    /// The last poll failed (logged once until one succeeds).
    failing: bool,
}

/// One instance's copy of the admin API's keys.
pub struct KeySync<K: KeyStore, S: Store> {
    store: Arc<K>,
    sources: Arc<Sources<S>>,
    held: tokio::sync::Mutex<Held>,
}

impl<K: KeyStore, S: Store> KeySync<K, S> {
    pub fn new(store: Arc<K>, sources: Arc<Sources<S>>) -> Self {
        KeySync {
            store,
            sources,
            held: Default::default(),
        }
    }

    pub fn store(&self) -> &Arc<K> {
        &self.store
    }

    /// Read what changed and apply it: whether anything did.
    pub async fn poll(&self) -> Result<bool, KeyStoreError> {
        let mut held = self.held.lock().await;
        let metrics = self.sources.authz().metrics().clone();
        let changes = match self.store.since(held.seen).await {
            Ok(c) => c,
            Err(e) => {
                metrics.key_syncs.with_label_values(&["failed"]).inc();
                if !held.failing {
                    tracing::warn!(error = %e, "cannot read the admin API's keys; the keys read last stay in force");
                    held.failing = true;
                }
                return Err(e);
            }
        };
        if held.failing {
            tracing::info!("the admin API's keys are readable again");
            held.failing = false;
        }
        if changes.version == held.seen {
            return Ok(false);
        }
        if changes.full {
            held.records.clear();
        }
        for json in &changes.records {
            match serde_json::from_str::<Record>(json) {
                Ok(r) => {
                    held.records.insert(r.id.clone(), r);
                }
                // The id is not known here: say only that one was unreadable.
                Err(e) => tracing::warn!(error = %e, "an API key record is unreadable; left out"),
            }
        }
        held.seen = changes.version;
        let api = held
            .records
            .values()
            .filter_map(Record::to_api_key)
            .collect();
        match self.sources.set_api(api) {
            Ok(_) => {
                metrics.key_syncs.with_label_values(&["applied"]).inc();
                Ok(true)
            }
            Err(e) => {
                // Only the file can fail a compile, and it compiled before.
                tracing::error!(error = %e, "the admin API's keys could not be applied");
                metrics.key_syncs.with_label_values(&["failed"]).inc();
                Ok(false)
            }
        }
    }

    /// The records held, by id.
    pub async fn records(&self) -> BTreeMap<String, Record> {
        self.held.lock().await.records.clone()
    }

    /// Poll every `interval` until `shutdown` fires.
    pub async fn run(
        self: Arc<Self>,
        interval: Duration,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => { let _ = self.poll().await; }
                _ = shutdown.changed() => return,
            }
        }
    }
}
