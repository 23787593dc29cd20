//! Key cooldown, in one place: a provider key that got 429, 401 or another
//! refusal of its credentials is skipped by every worker until its cooldown
//! ends. The end time (ms since the epoch) lives in proxy-wasm shared data,
//! which all of Envoy's workers see.
//!
//! How long: the provider's own hint when it gives one (`retry-after-ms`,
//! `retry-after` in seconds), else `key_cooldown_seconds` for a refusal
//! (429, 401, 402, 403) and `failure_cooldown_seconds` for a server-side
//! failure (408, 5xx, reset, timeout): [`duration_ms`].

use crate::config::Runtime;
use crate::host::{Host, Level, MetricKind};
use crate::plan::metric_safe;

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
    h.metric(
        MetricKind::Counter,
        &format!("tollgate.key_cooldowns.{}", metric_safe(provider)),
        1,
    );
    h.log(
        Level::Warn,
        &format!("tollgate: provider {provider} refused key {key_id} ({status}); cooling it down for {cooldown_ms} ms"),
    );
}

const FAILURES: &str = "tollgate.failures.";

/// The window in which [`server_failure`] counts a key's failures.
pub const FAILURE_WINDOW_MS: u64 = 10_000;

/// Counts a server-side failure (5xx, 408, reset, timeout: no hint) of
/// `key_id` in shared data; true when it is the `threshold`-th within
/// [`FAILURE_WINDOW_MS`] (the count then starts again). A single 5xx says
/// little about a key; a key that keeps failing leaves the rotation.
pub fn server_failure(h: &mut dyn Host, key_id: &str, now_ms: u64, threshold: u32) -> bool {
    let name = format!("{FAILURES}{key_id}");
    let (count, since) = h
        .shared_get(&name)
        .and_then(|v| String::from_utf8(v).ok())
        .and_then(|s| {
            let (c, t) = s.split_once(':')?;
            Some((c.parse::<u32>().ok()?, t.parse::<u64>().ok()?))
        })
        .filter(|&(_, since)| now_ms.saturating_sub(since) < FAILURE_WINDOW_MS)
        .unwrap_or((0, now_ms));
    let count = count.saturating_add(1);
    let tripped = count >= threshold;
    let value = if tripped {
        format!("0:{now_ms}")
    } else {
        format!("{count}:{since}")
    };
    h.shared_set(&name, value.as_bytes());
    tripped
}

/// A failed attempt on `key_id`: cools it for `status` (0: no answer) and
/// the provider's hint, except a server-side failure without a hint, which
/// cools it only once it [`server_failure`]s `threshold` times.
pub fn after_failure(
    h: &mut dyn Host,
    rt: &Runtime,
    provider: &str,
    key_id: &str,
    status: u16,
    hint: Option<u64>,
    now_ms: u64,
) {
    let refused = matches!(status, 401..=403 | 429);
    if !refused && hint.is_none() && !server_failure(h, key_id, now_ms, rt.failure_threshold) {
        return;
    }
    let ms = duration_ms(status, hint, rt.cooldown_ms, rt.failure_cooldown_ms);
    if ms > 0 {
        // `retry-after: 0`: nothing to wait for (and nothing to log).
        start(h, provider, key_id, status, now_ms, ms);
    }
}

/// The longest cooldown a provider's hint may ask for.
pub const MAX_HINT_MS: u64 = 3_600_000;

/// The provider's hint in response headers: `retry-after-ms` (OpenAI) or
/// `retry-after` in seconds (decimals allowed); an HTTP date is ignored.
pub fn hint_ms(header: &dyn Fn(&str) -> Option<String>) -> Option<u64> {
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok()) {
        return Some(clamp_hint(ms));
    }
    header("retry-after")
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|s| clamp_hint(s * 1000.0))
}

fn clamp_hint(ms: f64) -> u64 {
    if ms.is_finite() && ms > 0.0 {
        (ms.ceil() as u64).min(MAX_HINT_MS)
    } else {
        0
    }
}

/// Does this upstream status fail the attempt (and cool its key)? Statuses
/// another key may answer: rate limits, refused credentials or payment,
/// timeouts and server errors. 0 stands for no answer (reset, timeout).
pub fn fails_attempt(status: u16) -> bool {
    matches!(status, 0 | 401 | 402 | 403 | 408 | 429) || status >= 500
}

/// How long a key cools after `status` (0: no answer), given the provider's
/// hint.
pub fn duration_ms(status: u16, hint: Option<u64>, refused_ms: u64, failure_ms: u64) -> u64 {
    match (status, hint) {
        // A credential refusal lasts whatever the hint says.
        (401..=403, _) => refused_ms,
        (_, Some(h)) => h,
        (429, None) => refused_ms,
        _ => failure_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_failures_trip_at_the_threshold_within_the_window() {
        let mut h = FakeHost::default();
        assert!(!server_failure(&mut h, "k", 1_000, 3));
        assert!(!server_failure(&mut h, "k", 2_000, 3));
        assert!(server_failure(&mut h, "k", 3_000, 3));
        // Counted again from zero.
        assert!(!server_failure(&mut h, "k", 3_100, 3));
        // Failures spread wider than the window never trip.
        for t in 0..5u64 {
            assert!(!server_failure(
                &mut h,
                "j",
                1_000 + t * FAILURE_WINDOW_MS,
                2
            ));
        }
        assert!(server_failure(&mut h, "once", 0, 1));
    }

    #[test]
    fn hints_and_durations() {
        let none = |_: &str| None;
        assert_eq!(hint_ms(&none), None);
        let secs = |n: &str| (n == "retry-after").then(|| "1".to_string());
        assert_eq!(hint_ms(&secs), Some(1_000));
        let both = |n: &str| match n {
            "retry-after-ms" => Some("250.5".to_string()),
            "retry-after" => Some("9".to_string()),
            _ => None,
        };
        assert_eq!(hint_ms(&both), Some(251));
        let date =
            |n: &str| (n == "retry-after").then(|| "Wed, 21 Oct 2015 07:28:00 GMT".to_string());
        assert_eq!(hint_ms(&date), None);
        let huge = |n: &str| (n == "retry-after").then(|| "1e12".to_string());
        assert_eq!(hint_ms(&huge), Some(MAX_HINT_MS));
        let zero = |n: &str| (n == "retry-after").then(|| "0".to_string());
        assert_eq!(hint_ms(&zero), Some(0));
        assert_eq!(duration_ms(429, Some(1_000), 30_000, 5_000), 1_000);
        assert_eq!(duration_ms(429, None, 30_000, 5_000), 30_000);
        assert_eq!(duration_ms(401, Some(1_000), 30_000, 5_000), 30_000);
        assert_eq!(duration_ms(503, None, 30_000, 5_000), 5_000);
        assert_eq!(duration_ms(503, Some(2_000), 30_000, 5_000), 2_000);
        assert_eq!(duration_ms(0, None, 30_000, 5_000), 5_000);
        for s in [0, 401, 402, 403, 408, 429, 500, 503, 529] {
            assert!(fails_attempt(s), "{s}");
        }
        for s in [200, 400, 404, 413, 422] {
            assert!(!fails_attempt(s), "{s}");
        }
    }
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
