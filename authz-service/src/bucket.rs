//! Token-bucket math as pure functions of (state, spec, now).
//!
//! Nothing here reads a clock: the caller passes `now_ms`. The in-memory
//! store uses these functions directly and the Redis Lua script
//! (`storage/bucket.lua`) implements the same rules. One table of test
//! vectors, `tests/fixtures/bucket_vectors.json`, is run against both (these
//! functions, and the script in a real Redis: `tests/bucket_vectors.rs`);
//! a rule changed in one place and not the other fails it.
//!
//! Rules (one for every bucket):
//! * A bucket holds `level` units, at most `capacity` (burst = capacity).
//! * It refills continuously at `capacity / window_ms` units per millisecond.
//! * An absent bucket is full.
//! * A request with cost `take` is admitted by a bucket iff, after refill,
//!   `level >= take && level > 0`. Request buckets use `take = 1`; token
//!   buckets take the request's reservation at Check time, and the usage
//!   report settles the difference afterwards (a debit, which may drive the
//!   level negative, or a refund, capped at capacity).
//! * A request is admitted only if every one of its buckets admits it; a
//!   rejected request takes nothing from any bucket.
//! * An admitted request may also take a lease: up to `want` extra units,
//!   at most an eighth of the level left after its take ([`lease_grant`]).

/// Capacity and refill window of one bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketSpec {
    /// Maximum level (burst) and the number of units refilled per window.
    pub capacity: u64,
    /// Window over which `capacity` units refill, in milliseconds.
    pub window_ms: u64,
}

impl BucketSpec {
    /// Units refilled per millisecond.
    pub fn rate_per_ms(&self) -> f64 {
        if self.window_ms == 0 {
            return f64::INFINITY;
        }
        self.capacity as f64 / self.window_ms as f64
    }
}

/// Stored state of one bucket: its level at time `ts_ms`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketState {
    pub level: f64,
    pub ts_ms: u64,
}

/// Level of a bucket at `now_ms`, after continuous refill, capped at capacity.
/// An absent bucket (`None`) is full. A clock that went backwards refills
/// nothing.
pub fn level_at(state: Option<BucketState>, spec: BucketSpec, now_ms: u64) -> f64 {
    let cap = spec.capacity as f64;
    match state {
        None => cap,
        Some(s) => {
            let elapsed = now_ms.saturating_sub(s.ts_ms) as f64;
            let refilled = s.level + elapsed * spec.rate_per_ms();
            if refilled > cap {
                cap
            } else {
                refilled
            }
        }
    }
}

/// Whether a bucket at `level` admits a request costing `take`.
pub fn admits(level: f64, take: i64) -> bool {
    level > 0.0 && level >= take as f64
}

/// A lease is at most this fraction (1/N) of the level left after a take.
pub const LEASE_SHARE: f64 = 8.0;

/// Whole units granted as a lease beside a take that leaves `left` in the
/// bucket: at most `want`, at most `left / LEASE_SHARE`.
pub fn lease_grant(left: f64, want: u64) -> u64 {
    if left <= 0.0 {
        return 0;
    }
    ((left / LEASE_SHARE).floor() as u64).min(want)
}

/// Milliseconds until a bucket at `level` is full again (OpenAI's "reset").
pub fn ms_until_full(level: f64, spec: BucketSpec) -> u64 {
    let missing = spec.capacity as f64 - level;
    if missing <= 0.0 {
        return 0;
    }
    (missing / spec.rate_per_ms()).ceil() as u64
}

/// Milliseconds until a bucket at `level` admits a request costing `take`
/// (the `retry-after` of a denial).
pub fn ms_until_admits(level: f64, take: i64, spec: BucketSpec) -> u64 {
    let need = if take == 0 { 0.0 } else { take as f64 };
    // Token buckets need a strictly positive level: wait for one whole unit
    // so the retry is not refused again by a hair.
    let target = if take == 0 {
        1.0_f64.min(spec.capacity as f64)
    } else {
        need
    };
    let missing = target - level;
    if missing <= 0.0 && admits(level, take) {
        return 0;
    }
    (missing.max(0.0) / spec.rate_per_ms()).ceil().max(1.0) as u64
}

/// Time-to-live for a stored bucket: once a bucket would be full it is
/// equivalent to an absent one, so it may expire then. At least one second.
pub fn ttl_ms(level: f64, spec: BucketSpec) -> u64 {
    ms_until_full(level, spec).max(1000)
}

/// Outcome for one bucket of a check.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketOutcome {
    /// Level after the decision (after the take and the lease, if the
    /// request was admitted).
    pub level: f64,
    /// Lease granted beside the take (0 unless admitted).
    pub granted: u64,
}

/// Decide a whole request: every bucket `i` has `states[i]`, `specs[i]`,
/// `takes[i]` and a wanted lease `wants[i]`. Returns the new levels
/// (unchanged if denied, but refilled) and the index of the first bucket
/// that refused, if any.
///
/// If admitted, each bucket's level drops by its take and its granted lease
/// and its timestamp becomes `now_ms`. If denied, nothing is taken and the
/// caller must not store anything.
pub fn check_and_take(
    states: &[Option<BucketState>],
    specs: &[BucketSpec],
    takes: &[i64],
    wants: &[u64],
    now_ms: u64,
) -> (Vec<BucketOutcome>, Option<usize>) {
    let levels: Vec<f64> = states
        .iter()
        .zip(specs)
        .map(|(s, spec)| level_at(*s, *spec, now_ms))
        .collect();
    let denied = levels
        .iter()
        .zip(takes)
        .position(|(level, take)| !admits(*level, *take));
    let outcomes = levels
        .iter()
        .zip(takes)
        .zip(wants)
        .map(|((level, take), want)| {
            if denied.is_some() {
                return BucketOutcome {
                    level: *level,
                    granted: 0,
                };
            }
            let left = level - *take as f64;
            let granted = lease_grant(left, *want);
            BucketOutcome {
                level: left - granted as f64,
                granted,
            }
        })
        .collect();
    (outcomes, denied)
}

/// Debit `amount` from a bucket at `now_ms` (usage reports); the level may
/// go negative. A negative amount is a refund, capped at capacity. Returns
/// the new state.
pub fn debit(
    state: Option<BucketState>,
    spec: BucketSpec,
    amount: i64,
    now_ms: u64,
) -> BucketState {
    BucketState {
        level: (level_at(state, spec, now_ms) - amount as f64).min(spec.capacity as f64),
        ts_ms: now_ms,
    }
}

/// Format a duration the way OpenAI's `x-ratelimit-reset-*` headers do:
/// `"1s"`, `"6m0s"`, `"1h2m3s"`, sub-second values as `"120ms"`, zero as `"0s"`.
pub fn format_reset(ms: u64) -> String {
    if ms == 0 {
        return "0s".to_string();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let total_s = ms.div_ceil(1000);
    let h = total_s / 3600;
    let m = (total_s % 3600) / 60;
    let s = total_s % 60;
    if h > 0 {
        format!("{h}h{m}m{s}s")
    } else if m > 0 {
        format!("{m}m{s}s")
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RPM5: BucketSpec = BucketSpec {
        capacity: 5,
        window_ms: 60_000,
    };

    #[test]
    fn absent_bucket_is_full() {
        assert_eq!(level_at(None, RPM5, 123), 5.0);
    }

    #[test]
    fn refill_is_continuous_and_capped() {
        let s = BucketState {
            level: 0.0,
            ts_ms: 1_000,
        };
        // 5 per 60 s: one unit every 12 s.
        assert_eq!(level_at(Some(s), RPM5, 13_000), 1.0);
        assert!((level_at(Some(s), RPM5, 7_000) - 0.5).abs() < 1e-9);
        assert_eq!(level_at(Some(s), RPM5, 1_000_000), 5.0);
    }

    #[test]
    fn clock_going_backwards_refills_nothing() {
        let s = BucketState {
            level: 2.0,
            ts_ms: 10_000,
        };
        assert_eq!(level_at(Some(s), RPM5, 5_000), 2.0);
    }

    #[test]
    fn limit_of_five_admits_five_then_denies() {
        let mut state = None;
        for i in 0..5 {
            let (out, denied) = check_and_take(&[state], &[RPM5], &[1], &[0], 0);
            assert_eq!(denied, None, "request {i}");
            state = Some(BucketState {
                level: out[0].level,
                ts_ms: 0,
            });
        }
        let (out, denied) = check_and_take(&[state], &[RPM5], &[1], &[0], 0);
        assert_eq!(denied, Some(0));
        assert_eq!(out[0].level, 0.0);
        // 12 s later exactly one more fits.
        let (_, denied) = check_and_take(&[state], &[RPM5], &[1], &[0], 12_000);
        assert_eq!(denied, None);
    }

    #[test]
    fn rejected_request_takes_nothing_from_any_bucket() {
        let key = Some(BucketState {
            level: 3.0,
            ts_ms: 0,
        });
        let tenant = Some(BucketState {
            level: 0.5,
            ts_ms: 0,
        });
        let (out, denied) = check_and_take(&[key, tenant], &[RPM5, RPM5], &[1, 1], &[9, 9], 0);
        assert_eq!(denied, Some(1));
        assert_eq!(out[0].level, 3.0);
        assert_eq!(out[1].level, 0.5);
    }

    #[test]
    fn token_bucket_admits_while_positive_and_may_go_negative() {
        let tpm = BucketSpec {
            capacity: 100,
            window_ms: 60_000,
        };
        let s = debit(None, tpm, 250, 0);
        assert_eq!(s.level, -150.0);
        let (_, denied) = check_and_take(&[Some(s)], &[tpm], &[0], &[0], 0);
        assert_eq!(denied, Some(0));
        // -150 refills at 100/min: positive after 90 s.
        let (_, denied) = check_and_take(&[Some(s)], &[tpm], &[0], &[0], 90_000);
        assert_eq!(denied, Some(0), "level exactly 0 is not positive");
        let (out, denied) = check_and_take(&[Some(s)], &[tpm], &[0], &[0], 90_600);
        assert_eq!(denied, None);
        assert!(out[0].level > 0.0 && out[0].level < 1.01);
        assert_eq!(ms_until_admits(-150.0, 0, tpm), 90_600);
    }

    #[test]
    fn leases_are_an_eighth_of_what_is_left_and_shrink_to_nothing() {
        let big = BucketSpec {
            capacity: 1000,
            window_ms: 60_000,
        };
        let (out, denied) = check_and_take(&[None], &[big], &[1], &[500], 0);
        assert_eq!(denied, None);
        assert_eq!(out[0].granted, 124, "floor(999 / 8)");
        assert_eq!(out[0].level, 875.0);
        let (out, _) = check_and_take(&[None], &[big], &[1], &[10], 0);
        assert_eq!(out[0].granted, 10, "no more than wanted");
        let low = Some(BucketState {
            level: 8.5,
            ts_ms: 0,
        });
        let (out, _) = check_and_take(&[low], &[big], &[1], &[10], 0);
        assert_eq!(
            out[0].granted, 0,
            "7.5 left: an eighth is less than one unit"
        );
        assert_eq!(out[0].level, 7.5);
    }

    #[test]
    fn a_refund_is_capped_at_capacity() {
        let s = debit(None, RPM5, 3, 0);
        assert_eq!(s.level, 2.0);
        assert_eq!(debit(Some(s), RPM5, -2, 0).level, 4.0);
        assert_eq!(debit(Some(s), RPM5, -10, 0).level, 5.0);
    }

    #[test]
    fn reset_and_retry_times() {
        assert_eq!(ms_until_full(5.0, RPM5), 0);
        assert_eq!(ms_until_full(4.0, RPM5), 12_000);
        assert_eq!(ms_until_admits(0.0, 1, RPM5), 12_000);
        assert_eq!(ms_until_admits(0.5, 1, RPM5), 6_000);
        assert_eq!(ms_until_admits(2.0, 1, RPM5), 0);
        assert_eq!(ttl_ms(5.0, RPM5), 1000);
        assert_eq!(ttl_ms(-5.0, RPM5), 120_000);
    }

    #[test]
    fn openai_duration_format() {
        assert_eq!(format_reset(0), "0s");
        assert_eq!(format_reset(120), "120ms");
        assert_eq!(format_reset(1000), "1s");
        assert_eq!(format_reset(1001), "2s");
        assert_eq!(format_reset(360_000), "6m0s");
        assert_eq!(format_reset(3_723_000), "1h2m3s");
    }
}
