//! API keys in this process only (`--redis-url memory://`): one instance,
//! lost at exit. The same rules as `keys.lua`.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::{Changes, KeyStore, KeyStoreError};

#[derive(Default)]
struct State {
    version: u64,
    /// id → (version that wrote it, stored JSON).
    records: BTreeMap<String, (u64, String)>,
}

#[derive(Default)]
pub struct MemoryKeyStore {
    state: Mutex<State>,
}

impl MemoryKeyStore {
    pub fn new() -> Self {
        MemoryKeyStore::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl KeyStore for MemoryKeyStore {
    async fn since(&self, seen: u64) -> Result<Changes, KeyStoreError> {
        let s = self.state();
        let full = seen == 0 || s.version < seen;
        let records = if s.version == seen {
            Vec::new()
        } else {
            s.records
                .values()
                .filter(|(v, _)| full || *v > seen)
                .map(|(_, json)| json.clone())
                .collect()
        };
        Ok(Changes {
            version: s.version,
            full: full && s.version != seen,
            records,
        })
    }

    async fn get(&self, id: &str) -> Result<Option<String>, KeyStoreError> {
        Ok(self.state().records.get(id).map(|(_, j)| j.clone()))
    }

    async fn put(&self, id: &str, read: Option<&str>, new: &str) -> Result<u64, KeyStoreError> {
        let mut s = self.state();
        if s.records.get(id).map(|(_, j)| j.as_str()) != read {
            return Err(KeyStoreError::Conflict);
        }
        s.version += 1;
        let v = s.version;
        s.records.insert(id.to_string(), (v, new.to_string()));
        Ok(v)
    }
}
