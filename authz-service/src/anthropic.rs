//! The Anthropic Messages routes (`/v1/messages…`): the same decisions,
//! said the way Anthropic clients read them. A denial's body becomes
//! Anthropic's error shape (`{"type":"error","error":{"type","message"}}`,
//! [`tollgate_wire::anthropic_error_body`]) and every `x-ratelimit-*`
//! header gets its `anthropic-ratelimit-*` twin beside it (limit and
//! remaining as they are; the reset as an RFC 3339 time, as Anthropic
//! sends it, where OpenAI sends a duration).

use std::time::{SystemTime, UNIX_EPOCH};

use crate::decision::Decision;

/// OpenAI rate-limit header → its Anthropic name.
const TWINS: [(&str, &str); 6] = [
    (
        "x-ratelimit-limit-requests",
        "anthropic-ratelimit-requests-limit",
    ),
    (
        "x-ratelimit-remaining-requests",
        "anthropic-ratelimit-requests-remaining",
    ),
    (
        "x-ratelimit-reset-requests",
        "anthropic-ratelimit-requests-reset",
    ),
    (
        "x-ratelimit-limit-tokens",
        "anthropic-ratelimit-tokens-limit",
    ),
    (
        "x-ratelimit-remaining-tokens",
        "anthropic-ratelimit-tokens-remaining",
    ),
    (
        "x-ratelimit-reset-tokens",
        "anthropic-ratelimit-tokens-reset",
    ),
];

/// The decision for a request on the Messages routes; `now_ms` is the wall
/// clock (Unix ms) the reset times are counted from.
pub fn for_messages(mut decision: Decision, now_ms: u64) -> Decision {
    match &mut decision {
        Decision::Allow { rate_headers, .. } => {
            *rate_headers = with_twins(std::mem::take(rate_headers), now_ms);
        }
        Decision::Deny {
            status,
            body,
            headers,
        } => {
            let message = serde_json::from_str::<serde_json::Value>(body)
                .ok()
                .and_then(|v| {
                    v.get("error")
                        .and_then(|e| e.get("message"))
                        .and_then(|m| m.as_str())
                        .map(str::to_string)
                })
                .unwrap_or_else(|| body.clone());
            *body =
                String::from_utf8_lossy(&tollgate_wire::anthropic_error_body(*status, &message))
                    .into_owned();
            *headers = with_twins(std::mem::take(headers), now_ms);
        }
        Decision::Unavailable(_) => {}
    }
    decision
}

/// The headers with each `x-ratelimit-*` one's Anthropic twin added.
fn with_twins(headers: Vec<(&'static str, String)>, now_ms: u64) -> Vec<(&'static str, String)> {
    let mut out = Vec::with_capacity(headers.len() * 2);
    for (name, value) in headers {
        if let Some((_, twin)) = TWINS.iter().find(|(n, _)| *n == name) {
            let v = if name.starts_with("x-ratelimit-reset") {
                rfc3339(now_ms.saturating_add(duration_ms(&value)))
            } else {
                value.clone()
            };
            out.push((name, value));
            out.push((*twin, v));
        } else {
            out.push((name, value));
        }
    }
    out
}

/// Wall clock in Unix ms.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `"1h2m3s"`, `"6m0s"`, `"1s"`, `"120ms"` (the reset format of
/// [`crate::bucket::format_reset`]) → milliseconds; unreadable → 0.
fn duration_ms(s: &str) -> u64 {
    if let Some(ms) = s.strip_suffix("ms") {
        return ms.parse().unwrap_or(0);
    }
    let mut total = 0u64;
    let mut n = 0u64;
    for c in s.chars() {
        match c {
            '0'..='9' => {
                n = n
                    .saturating_mul(10)
                    .saturating_add(u64::from(c) - u64::from('0'))
            }
            'h' => (total, n) = (total.saturating_add(n.saturating_mul(3_600_000)), 0),
            'm' => (total, n) = (total.saturating_add(n.saturating_mul(60_000)), 0),
            's' => (total, n) = (total.saturating_add(n.saturating_mul(1000)), 0),
            _ => return 0,
        }
    }
    total
}

/// Unix ms → `YYYY-MM-DDTHH:MM:SSZ` (UTC, seconds rounded up so the time
/// is never before the reset).
fn rfc3339(ms: u64) -> String {
    let secs = ms.div_ceil(1000);
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_durations() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        // 2026-11-30T12:34:56Z
        assert_eq!(rfc3339(1_796_042_096_000), "2026-11-30T12:34:56Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_500), "1970-01-01T00:00:02Z");
        assert_eq!(duration_ms("6m0s"), 360_000);
        assert_eq!(duration_ms("1h2m3s"), 3_723_000);
        assert_eq!(duration_ms("120ms"), 120);
        assert_eq!(duration_ms("0s"), 0);
        assert_eq!(duration_ms("x"), 0);
    }

    #[test]
    fn denial_is_anthropic_shaped_with_twin_headers() {
        let d = Decision::Deny {
            status: 429,
            body: crate::decision::error_body(
                "Rate limit reached",
                "rate_limit_error",
                "rate_limit_exceeded",
            ),
            headers: vec![
                ("retry-after", "3".to_string()),
                ("x-ratelimit-remaining-requests", "0".to_string()),
                ("x-ratelimit-reset-requests", "2s".to_string()),
            ],
        };
        let Decision::Deny {
            status,
            body,
            headers,
        } = for_messages(d, 0)
        else {
            panic!("still a denial");
        };
        assert_eq!(status, 429);
        assert_eq!(
            body,
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"Rate limit reached"}}"#
        );
        assert!(headers.contains(&("anthropic-ratelimit-requests-remaining", "0".to_string())));
        assert!(headers.contains(&(
            "anthropic-ratelimit-requests-reset",
            "1970-01-01T00:00:02Z".to_string()
        )));
        assert!(headers.contains(&("x-ratelimit-reset-requests", "2s".to_string())));
        assert!(headers.contains(&("retry-after", "3".to_string())));
    }
}
