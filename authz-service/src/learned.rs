//! Answer reservations learned per key: what a key's recent requests needed
//! for their answers, so a Check reserves that rather than the tenant's
//! `reserve_completion_tokens`.
//!
//! ext_authz sees headers only: the request's own output limit
//! (`max_tokens`…) is in its body, which the filter reads. The filter
//! reports each request's need (its declared output limit, after the
//! gateway lowered it, or the tenant's default when it declared none) with
//! its usage, and a top-up ([`tollgate_wire::TopUp`]) reports it at once;
//! a Check then reserves the largest need the key reported in the last
//! [`PERIOD`] to 2 × [`PERIOD`]. A request needing more than that is topped
//! up by the filter before it is forwarded, so the reservation is never
//! short; one needing less is refunded at settlement.
//!
//! Trade-off: learned per key and per instance (not per model, and not
//! shared through Redis). A key whose clients mix output limits reserves
//! the largest of them; a wrong guess costs a top-up call or a larger
//! refund, never admission accuracy. Nothing here reads a clock: callers
//! pass `now`.

use std::collections::HashMap;
use std::sync::{OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

/// A need is remembered for one to two periods.
pub const PERIOD: Duration = Duration::from_secs(10);

/// The needs seen of one key in its two latest periods.
#[derive(Debug, Clone, Copy)]
struct Seen {
    /// Index of the period of `current` (periods since the epoch).
    period: u64,
    current: u64,
    previous: u64,
}

/// Learned answer reservations of one instance, by key id.
#[derive(Default)]
pub struct Learned {
    map: RwLock<HashMap<Box<str>, Seen>>,
    /// The first `now` passed in: periods count from it.
    epoch: OnceLock<Instant>,
}

impl Learned {
    pub fn new() -> Learned {
        Learned::default()
    }

    fn period(&self, now: Instant) -> u64 {
        let epoch = *self.epoch.get_or_init(|| now);
        (now.saturating_duration_since(epoch).as_millis() / PERIOD.as_millis()) as u64
    }

    fn read(&self) -> RwLockReadGuard<'_, HashMap<Box<str>, Seen>> {
        self.map.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, HashMap<Box<str>, Seen>> {
        self.map.write().unwrap_or_else(|p| p.into_inner())
    }

    /// A request of `key_id` needed `need` output tokens.
    pub fn observe(&self, key_id: &str, need: u64, now: Instant) {
        let period = self.period(now);
        let mut map = self.write();
        let Some(seen) = map.get_mut(key_id) else {
            map.insert(
                key_id.into(),
                Seen {
                    period,
                    current: need,
                    previous: 0,
                },
            );
            return;
        };
        match period.saturating_sub(seen.period) {
            0 => seen.current = seen.current.max(need),
            1 => {
                *seen = Seen {
                    period,
                    current: need,
                    previous: seen.current,
                }
            }
            _ => {
                *seen = Seen {
                    period,
                    current: need,
                    previous: 0,
                }
            }
        }
    }

    /// The largest need `key_id` reported in its last one to two periods;
    /// None when it reported none.
    pub fn output(&self, key_id: &str, now: Instant) -> Option<u64> {
        let period = self.period(now);
        let map = self.read();
        let seen = map.get(key_id)?;
        match period.saturating_sub(seen.period) {
            0 => Some(seen.current.max(seen.previous)),
            1 => Some(seen.current),
            _ => None,
        }
    }

    /// Forget keys that reported nothing for two periods.
    pub fn sweep(&self, now: Instant) {
        let period = self.period(now);
        let stale = |s: &Seen| period.saturating_sub(s.period) >= 2;
        if self.read().values().any(stale) {
            self.write().retain(|_, s| !stale(s));
        }
    }

    /// Keys remembered.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_recent_need_is_kept_for_one_to_two_periods() {
        let l = Learned::new();
        let t0 = Instant::now();
        assert_eq!(l.output("k", t0), None, "nothing reported: the default");
        l.observe("k", 16, t0);
        l.observe("k", 4000, t0 + Duration::from_secs(1));
        l.observe("k", 16, t0 + Duration::from_secs(2));
        assert_eq!(l.output("k", t0 + Duration::from_secs(3)), Some(4000));
        assert_eq!(l.output("other", t0), None);
        // Next period: the last one's largest still counts...
        l.observe("k", 16, t0 + PERIOD);
        assert_eq!(l.output("k", t0 + PERIOD), Some(4000));
        // ...then only what came in it.
        assert_eq!(l.output("k", t0 + 2 * PERIOD), Some(16));
        l.observe("k", 32, t0 + 2 * PERIOD);
        assert_eq!(l.output("k", t0 + 2 * PERIOD), Some(32));
        // Silence for two periods: forgotten.
        assert_eq!(l.output("k", t0 + 4 * PERIOD), None);
        l.sweep(t0 + 4 * PERIOD);
        assert!(l.is_empty());
    }

    #[test]
    fn a_gap_of_a_period_drops_the_old_needs() {
        let l = Learned::new();
        let t0 = Instant::now();
        l.observe("k", 4000, t0);
        l.observe("k", 16, t0 + 3 * PERIOD);
        assert_eq!(l.output("k", t0 + 3 * PERIOD), Some(16));
        l.sweep(t0 + 3 * PERIOD);
        assert_eq!(l.len(), 1, "still fresh");
    }
}
