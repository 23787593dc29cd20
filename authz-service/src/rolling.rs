//! Rolling windows for money budgets: "the last 24 hours", "the last 7
//! days", beside the calendar day and month of [`crate::budget`].
//!
//! A rolling window is kept as a ring of slots aligned on the unix epoch
//! (a tenant's time zone does not matter): a window of up to 24 hours has
//! one-hour slots, a longer one (a whole number of days, at most 90) has 24
//! slots of `days` hours each, so a window always has at most 24 slots and
//! reading it costs the same whatever its length. The window's spend is the
//! sum of the slots it covers: the current slot and the `slots - 1` before
//! it. Spend is added to the current slot; a reservation is settled in the
//! slot it was taken from.
//!
//! Accuracy bound: the covered slots span between `window - slot` and
//! `window` of history, so a spend is forgotten at most one slot early
//! (1 h for 24 h, 7 h for 7 days, 30 h for 30 days) and never late.
//!
//! Nothing here reads a clock: every function takes `now_ms`.

use std::collections::HashMap;

const HOUR_MS: i64 = 3_600_000;
/// A spend counter outlives its window by this much (late settlements, the
/// CLI): a calendar counter past its window's end, a slot once it has left
/// its rolling window.
pub const GRACE_MS: i64 = 3_600_000;
/// Longest rolling window, in days.
pub const MAX_DAYS: i64 = 90;

/// A rolling window's shape: its length and its slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rolling {
    /// Slot length in milliseconds.
    pub slot_ms: i64,
    /// Number of slots the window covers.
    pub slots: i64,
}

impl Rolling {
    /// Parse `"<n>h"` (1 to 24 hours) or `"<n>d"` (1 to 90 days); `Err`
    /// is the policy message.
    pub fn parse(s: &str) -> Result<Rolling, String> {
        let bad = || {
            format!(
                "rolling window {s:?} must be \"<hours>h\" (1 to 24) or \"<days>d\" (1 to {MAX_DAYS})"
            )
        };
        let (num, unit) = match (s.strip_suffix('h'), s.strip_suffix('d')) {
            (Some(n), _) => (n, "h"),
            (_, Some(n)) => (n, "d"),
            _ => return Err(bad()),
        };
        let n: i64 = num.parse().map_err(|_| bad())?;
        match unit {
            "h" if (1..=24).contains(&n) => Ok(Rolling {
                slot_ms: HOUR_MS,
                slots: n,
            }),
            "d" if n == 1 => Ok(Rolling {
                slot_ms: HOUR_MS,
                slots: 24,
            }),
            "d" if (2..=MAX_DAYS).contains(&n) => Ok(Rolling {
                slot_ms: n * HOUR_MS,
                slots: 24,
            }),
            _ => Err(bad()),
        }
    }

    /// The window's length in milliseconds.
    pub fn length_ms(&self) -> i64 {
        self.slot_ms * self.slots
    }

    /// The label used in keys, headers and the CLI: `24h`, `7d`.
    pub fn label(&self) -> String {
        let hours = self.length_ms() / HOUR_MS;
        if hours > 24 && hours % 24 == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{hours}h")
        }
    }

    /// Index of the slot holding `now_ms`.
    pub fn slot_of(&self, now_ms: i64) -> i64 {
        now_ms.div_euclid(self.slot_ms)
    }

    /// The slots the window covers at `now_ms`, oldest first.
    pub fn covered(&self, now_ms: i64) -> std::ops::RangeInclusive<i64> {
        let cur = self.slot_of(now_ms);
        (cur - self.slots + 1)..=cur
    }

    /// When slot `idx` leaves the window (unix ms).
    pub fn leaves_at(&self, idx: i64) -> i64 {
        (idx + self.slots) * self.slot_ms
    }

    /// When the counter of slot `idx` may expire: once it has left the
    /// window, plus the grace of the calendar counters (late settlements).
    pub fn expires_at(&self, idx: i64) -> i64 {
        self.leaves_at(idx) + GRACE_MS
    }

    /// Redis key of one slot; the tenant is the hash tag, so every slot of
    /// a window lives on the same Redis Cluster node as its calendar
    /// counters and one script reads them all.
    pub fn slot_key(&self, tenant: &str, scope: &str, idx: i64) -> String {
        format!("tg:{{{tenant}}}:$r{}:{idx}:{scope}", self.label())
    }
}

/// The keys of the slots before the current one that a counter key of
/// [`Rolling::slot_key`] shares its window with, oldest first; `None` for
/// any other key (a calendar counter). The stores read them beside the
/// current slot, so the window's spend is decided in the same call.
pub fn older_keys(key: &str) -> Option<Vec<String>> {
    let rest = key.strip_prefix("tg:{")?;
    let (tenant, rest) = rest.split_once("}:$r")?;
    let (label, rest) = rest.split_once(':')?;
    let (idx, scope) = rest.split_once(':')?;
    let r = Rolling::parse(label).ok()?;
    let idx: i64 = idx.parse().ok()?;
    Some(
        (idx - r.slots + 1..idx)
            .map(|i| r.slot_key(tenant, scope, i))
            .collect(),
    )
}

/// The spend of a window and when it next frees up, from its slots'
/// values (oldest first, as [`Rolling::covered`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowSpend {
    /// Nano-dollars spent in the covered slots.
    pub spent: i64,
    /// When the oldest slot holding spend leaves the window (unix ms);
    /// `None` when nothing is spent.
    pub frees_at: Option<i64>,
}

/// Sum the covered slots at `now_ms`; `slot` reads one slot's value.
pub fn window_spend(r: &Rolling, now_ms: i64, slot: impl Fn(i64) -> i64) -> WindowSpend {
    let mut spent = 0i64;
    let mut frees_at = None;
    for idx in r.covered(now_ms) {
        let v = slot(idx);
        if v != 0 && frees_at.is_none() {
            frees_at = Some(r.leaves_at(idx));
        }
        spent = spent.saturating_add(v);
    }
    WindowSpend { spent, frees_at }
}

/// Slots in process memory: the rules a Redis script applies to a rolling
/// window (tests, the `memory://` store).
#[derive(Default)]
pub struct MemorySlots {
    map: std::sync::Mutex<HashMap<String, (i64, i64)>>,
}

/// What a reservation took: the slot key to settle against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reserved {
    pub key: String,
    pub amount: i64,
}

/// Why a reservation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exhausted {
    pub spent: i64,
    /// When spend next frees up (unix ms).
    pub frees_at: Option<i64>,
}

impl MemorySlots {
    fn read(&self, key: &str, now_ms: i64) -> i64 {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        match map.get(key) {
            Some((v, exp)) if *exp > now_ms => *v,
            _ => 0,
        }
    }

    /// The window's spend at `now_ms`.
    pub fn spend(&self, r: &Rolling, tenant: &str, scope: &str, now_ms: i64) -> WindowSpend {
        window_spend(r, now_ms, |idx| {
            self.read(&r.slot_key(tenant, scope, idx), now_ms)
        })
    }

    /// Reserve `amount` against `cap`: refused when the window's spend
    /// plus `amount` would pass the cap, else added to the current slot.
    pub fn reserve(
        &self,
        r: &Rolling,
        tenant: &str,
        scope: &str,
        cap: i64,
        amount: i64,
        now_ms: i64,
    ) -> Result<Reserved, Exhausted> {
        let w = self.spend(r, tenant, scope, now_ms);
        if w.spent >= cap || w.spent.saturating_add(amount) > cap {
            return Err(Exhausted {
                spent: w.spent,
                frees_at: w.frees_at,
            });
        }
        let idx = r.slot_of(now_ms);
        let key = r.slot_key(tenant, scope, idx);
        self.add(&key, amount, r.expires_at(idx), now_ms);
        Ok(Reserved { key, amount })
    }

    /// Settle a reservation at its real cost: the difference goes to the
    /// slot the reservation was taken from (a slot already expired is not
    /// brought back).
    pub fn settle(&self, reserved: &Reserved, cost: i64, now_ms: i64) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((v, exp)) = map.get_mut(&reserved.key) {
            if *exp > now_ms {
                *v = v.saturating_add(cost - reserved.amount);
            }
        }
    }

    fn add(&self, key: &str, amount: i64, expires_at: i64, now_ms: i64) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let e = map.entry(key.to_string()).or_insert((0, expires_at));
        if e.1 <= now_ms {
            *e = (0, expires_at);
        }
        e.0 = e.0.saturating_add(amount);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::Timestamp;

    fn ms(s: &str) -> i64 {
        s.parse::<Timestamp>().unwrap().as_millisecond()
    }

    const USD: i64 = 1_000_000_000;

    #[test]
    fn parse_picks_at_most_24_slots() {
        let h24 = Rolling::parse("24h").unwrap();
        assert_eq!((h24.slot_ms, h24.slots), (HOUR_MS, 24));
        assert_eq!(Rolling::parse("1d").unwrap(), h24);
        let d7 = Rolling::parse("7d").unwrap();
        assert_eq!((d7.slot_ms, d7.slots), (7 * HOUR_MS, 24));
        assert_eq!(d7.length_ms(), 7 * 24 * HOUR_MS);
        assert_eq!(d7.label(), "7d");
        assert_eq!(Rolling::parse("30d").unwrap().slot_ms, 30 * HOUR_MS);
        assert_eq!(Rolling::parse("6h").unwrap().label(), "6h");
        for bad in [
            "", "h", "0h", "25h", "0d", "91d", "7w", "-1d", "1.5d", "7é", "é",
        ] {
            let e = Rolling::parse(bad).unwrap_err();
            assert!(e.contains("rolling window"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_slot_leaves_the_window_at_its_exact_boundary() {
        let r = Rolling::parse("24h").unwrap();
        let m = MemorySlots::default();
        let t0 = ms("2026-11-23T10:15:00Z");
        m.reserve(&r, "acme", "k:a", 10 * USD, 3 * USD, t0).unwrap();
        // The 10:00 slot covers 10:00-11:00 and leaves at 10:00 next day.
        let leaves = ms("2026-11-24T10:00:00Z");
        let w = m.spend(&r, "acme", "k:a", leaves - 1);
        assert_eq!(w.spent, 3 * USD);
        assert_eq!(w.frees_at, Some(leaves));
        let w = m.spend(&r, "acme", "k:a", leaves);
        assert_eq!(
            w,
            WindowSpend {
                spent: 0,
                frees_at: None
            }
        );
    }

    #[test]
    fn a_hard_cap_refuses_and_says_when_spend_frees_up() {
        let r = Rolling::parse("7d").unwrap();
        let m = MemorySlots::default();
        let t0 = ms("2026-11-20T01:00:00Z");
        let t1 = t0 + 3 * 24 * HOUR_MS;
        m.reserve(&r, "acme", "t", 5 * USD, 2 * USD, t0).unwrap();
        m.reserve(&r, "acme", "t", 5 * USD, 3 * USD, t1).unwrap();
        let e = m.reserve(&r, "acme", "t", 5 * USD, 1, t1).unwrap_err();
        assert_eq!(e.spent, 5 * USD);
        // The oldest slot with spend is t0's 7-hour slot; it leaves 7 days
        // after its start.
        let start = r.slot_of(t0) * r.slot_ms;
        assert!(start <= t0 && t0 < start + r.slot_ms);
        assert_eq!(e.frees_at, Some(start + r.length_ms()));
        // Once it has left, its $2 are free again, t1's $3 are not.
        let free = e.frees_at.unwrap();
        assert!(m
            .reserve(&r, "acme", "t", 5 * USD, 2 * USD + 1, free)
            .is_err());
        m.reserve(&r, "acme", "t", 5 * USD, 2 * USD, free).unwrap();
    }

    #[test]
    fn a_reservation_is_settled_in_its_own_slot() {
        let r = Rolling::parse("24h").unwrap();
        let m = MemorySlots::default();
        let t0 = ms("2026-11-23T10:59:59Z");
        let res = m.reserve(&r, "acme", "k:a", 10 * USD, 4 * USD, t0).unwrap();
        // Settled an hour later, in the next slot: the 10:00 slot is
        // corrected, nothing lands in the 11:00 slot.
        let t1 = t0 + HOUR_MS;
        m.settle(&res, USD + 250_000_000, t1);
        let w = m.spend(&r, "acme", "k:a", t1);
        assert_eq!(w.spent, USD + 250_000_000);
        assert_eq!(w.frees_at, Some(ms("2026-11-24T10:00:00Z")));
        assert_eq!(m.read(&r.slot_key("acme", "k:a", r.slot_of(t1)), t1), 0);
    }

    #[test]
    fn every_slot_expires_once_it_cannot_count() {
        let r = Rolling::parse("30d").unwrap();
        let t = ms("2026-11-23T12:00:00Z");
        let idx = r.slot_of(t);
        assert_eq!(r.expires_at(idx), r.leaves_at(idx) + GRACE_MS);
        // The slot is still covered just before it leaves, not at it.
        assert!(r.covered(r.leaves_at(idx) - 1).contains(&idx));
        assert!(!r.covered(r.leaves_at(idx)).contains(&idx));
        assert!(r.slot_key("acme", "t", idx).starts_with("tg:{acme}:$r30d:"));
    }

    #[test]
    fn a_slot_key_names_the_older_slots_of_its_window() {
        let r = Rolling::parse("6h").unwrap();
        let key = r.slot_key("acme", "km:a:openai/*", 100);
        let older = older_keys(&key).unwrap();
        assert_eq!(older.len(), 5);
        assert_eq!(older[0], r.slot_key("acme", "km:a:openai/*", 95));
        assert_eq!(older[4], r.slot_key("acme", "km:a:openai/*", 99));
        assert_eq!(older_keys("tg:{acme}:$d:2026-11-23:t"), None);
        assert_eq!(older_keys("tg:{acme}:$r99h:1:t"), None);
    }

    #[test]
    fn the_window_ignores_time_zones_and_local_midnight() {
        // Slots are aligned on the epoch: the same instants give the same
        // slots whatever zone a tenant has (there is no zone input at all),
        // and a DST change (Paris, 2026-10-25 03:00 local) moves nothing.
        let r = Rolling::parse("24h").unwrap();
        let before = ms("2026-10-25T00:30:00Z");
        let after = ms("2026-10-25T01:30:00Z");
        assert_eq!(r.slot_of(after) - r.slot_of(before), 1);
        assert_eq!(r.covered(after).count(), 24);
    }
}
