//! Key cooldown, in one place: a provider key that got 429, 401 or another
//! refusal of its credentials is skipped by every worker until its cooldown
//! ends. The end time (ms since the epoch) lives in proxy-wasm shared data,
//! which all of Envoy's workers see.

use crate::host::{Host, Level};

const PREFIX: &str = "tollgate.cooldown.";

/// Milliseconds until `key_id`'s cooldown ends (0: the key is usable).
pub fn remaining_ms(h: &dyn Host, key_id: &str, now_ms: u64) -> u64 {
    h.shared_get(&format!("{PREFIX}{key_id}"))
        .and_then(|v| String::from_utf8(v).ok())
        .and_then(|s| s.parse::<u64>().ok())
        .map_or(0, |until| until.saturating_sub(now_ms))
}

/// Is `key_id` cooling down at `now_ms`?
pub fn active(h: &dyn Host, key_id: &str, now_ms: u64) -> bool {
    remaining_ms(h, key_id, now_ms) > 0
}

/// Starts `key_id`'s cooldown of `cooldown_ms` and logs why (never the key).
pub fn start(
    h: &mut dyn Host,
    provider: &str,
    key_id: &str,
    status: u16,
    now_ms: u64,
    cooldown_ms: u64,
) {
    let until = now_ms.saturating_add(cooldown_ms);
    h.shared_set(&format!("{PREFIX}{key_id}"), until.to_string().as_bytes());
    h.log(
        Level::Warn,
        &format!("tollgate: provider {provider} refused key {key_id} ({status}); cooling it down for {cooldown_ms} ms"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::fake::FakeHost;

    #[test]
    fn starts_and_expires() {
        let mut h = FakeHost::default();
        assert!(!active(&h, "k", 1_000));
        start(&mut h, "p", "k", 429, 1_000, 500);
        assert!(active(&h, "k", 1_000) && active(&h, "k", 1_499));
        assert!(!active(&h, "k", 1_500));
        assert!(!active(&h, "other", 1_000));
        assert_eq!(remaining_ms(&h, "k", 1_200), 300);
        assert_eq!(remaining_ms(&h, "k", 2_000), 0);
        assert!(h.logs.borrow().iter().any(|l| l.contains("key k (429)")));
    }
}
