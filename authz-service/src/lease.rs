//! Leases: bucket units this instance took from the store ahead of demand,
//! so most Checks are decided in memory and the store is asked per bucket,
//! not per request.
//!
//! Trade-off (design and accuracy bound in `docs/architecture.md`,
//! "Admission"): leased units are taken in the store when granted, so
//! instances together never admit more than the store grants; units still
//! leased when demand stops are admitted by no one until they are returned
//! (after [`IDLE`]), and an instance that dies loses its leases. Leases are
//! small: [`HORIZON`] of this instance's recent demand, and at most an
//! eighth of what the bucket has left ([`crate::bucket::lease_grant`]).
//!
//! Nothing here reads a clock: callers pass `now`.
//!
//! Memory: kept small because an instance may hold millions of active
//! keys (`examples/lease_memory.rs` measures it). Entries are grouped by
//! scope: the map key is a bucket key without its kind segment
//! (`tg:{tenant}:k:id` for `tg:{tenant}:rm:k:id` and `tg:{tenant}:tm:k:id`),
//! so a virtual key's buckets share one hash-map slot and one key string,
//! and each bucket is a 56-byte [`Entry`] in its group's boxed slice, tagged
//! by its kind: times as 4-byte [`Tick`]s from the first `now` seen, no
//! allocation of its own. Keys with no short kind segment after the hash
//! tag are kept whole, one group each.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crate::bucket::BucketSpec;
use crate::storage::{BucketOp, Outcome};

/// A lease covers this much of the instance's recent demand.
pub const HORIZON: Duration = Duration::from_millis(200);
/// A lease unused this long is returned and its entry dropped.
pub const IDLE: Duration = Duration::from_secs(1);
/// Longest a refusal is answered from memory while the store is healthy.
pub const DENIAL_CACHE: Duration = Duration::from_secs(1);

/// One refill at a time per lease set; Checks that find the lease short
/// wait on it and then take from what it brought.
#[derive(Default)]
pub struct Refill {
    pub lock: tokio::sync::Mutex<()>,
    waiting: AtomicU32,
}

impl Refill {
    /// Mark one more Check waiting for this refill; the guard unmarks it.
    pub fn wait(self: &Arc<Self>) -> Waiting {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        Waiting(self.clone())
    }

    fn waiting(&self) -> u64 {
        u64::from(self.waiting.load(Ordering::Relaxed))
    }
}

/// A Check counted as waiting on a refill (see [`Refill::wait`]).
pub struct Waiting(Arc<Refill>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A time as milliseconds since the first `now` a [`Leases`] saw (plus one), wrapping
/// every 49.7 days; never 0, so `Option<Tick>` is 4 bytes too. Two ticks
/// compare correctly while they are less than 24.8 days apart, far more than
/// any duration kept here (a day's refill at most).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tick(NonZeroU32);

impl Tick {
    fn at(epoch: Instant, now: Instant) -> Tick {
        // + 1: the epoch itself is tick 1 (0 is Option's None).
        let ms = (now.saturating_duration_since(epoch).as_millis() as u32).wrapping_add(1);
        Tick(NonZeroU32::new(ms).unwrap_or(NonZeroU32::MIN))
    }

    /// Time from `earlier` to `self` (zero if `earlier` is later).
    fn since(self, earlier: Tick) -> Duration {
        let d = self.0.get().wrapping_sub(earlier.0.get()) as i32;
        Duration::from_millis(d.max(0) as u64)
    }

    fn after(self, d: Duration) -> Tick {
        let ms = d.as_millis().min(i32::MAX as u128) as u32;
        let t = self.0.get().wrapping_add(ms);
        Tick(NonZeroU32::new(t).unwrap_or(NonZeroU32::MIN))
    }

    fn is_later_than(self, other: Tick) -> bool {
        (self.0.get().wrapping_sub(other.0.get()) as i32) > 0
    }
}

/// A bucket key's kind segment (`rm`, `tm`, `$d`…: the one after the hash
/// tag), zero-padded; all zeros for a key kept whole (see [`split`]).
type Tag = [u8; 4];

/// One bucket's lease state (56 bytes, no allocation of its own).
#[derive(Clone, Copy)]
struct Entry {
    tag: Tag,
    /// Units taken since `granted_at` (the demand estimate), saturating.
    used: u32,
    granted_at: Tick,
    last_used: Tick,
    /// Refuse from memory until then (the store refused this bucket).
    denied_until: Option<Tick>,
    /// While the store is unreachable, refuse until then (the bucket was
    /// seen exhausted and cannot have refilled yet).
    exhausted_until: Option<Tick>,
    spec: BucketSpec,
    /// Leased units not used yet.
    units: i64,
    /// The store's level after this instance's last call (leases excluded).
    level: f64,
}

impl Entry {
    fn new(tag: Tag, spec: BucketSpec, now: Tick) -> Entry {
        Entry {
            tag,
            used: 0,
            granted_at: now,
            last_used: now,
            denied_until: None,
            exhausted_until: None,
            spec,
            units: 0,
            level: spec.capacity as f64,
        }
    }

    /// Whether this entry covers `op` without the store. A take of 0 (a
    /// bucket that only needs to be positive) trusts the last known level
    /// for one [`HORIZON`].
    fn covers(&self, op: &BucketOp, now: Tick) -> bool {
        if op.take == 0 {
            self.level + self.units as f64 > 0.0 && now.since(self.granted_at) < HORIZON
        } else {
            self.units >= op.take
        }
    }

    /// Whether the level last seen (plus the units leased) holds `op`'s
    /// take: a cached refusal does not apply to it (a smaller take than the
    /// one refused, or a refund this instance settled since).
    fn holds(&self, op: &BucketOp) -> bool {
        let left = self.level + self.units as f64;
        if op.take == 0 {
            left > 0.0
        } else {
            op.take as f64 <= left
        }
    }

    /// Unused for [`IDLE`] and nothing exhausted to remember.
    fn idle(&self, now: Tick) -> bool {
        now.since(self.last_used) >= IDLE
            && self.exhausted_until.is_none_or(|t| !t.is_later_than(now))
    }
}

/// The buckets of one scope (e.g. a virtual key's requests and tokens per
/// minute), under one map key: the bucket key without its kind segment.
#[derive(Default)]
struct Group {
    buckets: Box<[Entry]>,
    /// The refill lock of lease sets whose first bucket is in this group.
    refill: Option<Arc<Refill>>,
}

impl Group {
    /// The index of bucket `tag`, added if missing.
    fn index(&mut self, tag: Tag, spec: BucketSpec, now: Tick) -> usize {
        match self.buckets.iter().position(|e| e.tag == tag) {
            Some(i) => i,
            None => {
                // Exactly one more: no spare capacity kept per group.
                let mut v = Vec::with_capacity(self.buckets.len() + 1);
                v.extend_from_slice(&self.buckets);
                v.push(Entry::new(tag, spec, now));
                self.buckets = v.into_boxed_slice();
                self.buckets.len() - 1
            }
        }
    }
}

/// A bucket key as `(group key head, group key tail, tag)`: the kind
/// segment after the hash tag (`tg:{tenant}:rm:k:id` → `tg:{tenant}:` +
/// `k:id`, tag `rm`), or the whole key with an empty tag when it has no
/// such segment of 1 to 4 bytes.
fn split(key: &str) -> (&str, &str, Tag) {
    if let Some(p) = tag_end(key) {
        let rest = &key[p..];
        if let Some(c) = rest.find(':') {
            let kind = &rest.as_bytes()[..c];
            if (1..=4).contains(&c) && !kind.contains(&0) {
                let mut tag = [0; 4];
                tag[..c].copy_from_slice(kind);
                return (&key[..p], &rest[c + 1..], tag);
            }
        }
    }
    (key, "", [0; 4])
}

/// Just past the hash tag and its colon: the first `}` when a `:` follows
/// it (a byte search: this runs for every bucket of every Check).
fn tag_end(key: &str) -> Option<usize> {
    let i = key.find('}')?;
    (key.as_bytes().get(i + 1) == Some(&b':')).then_some(i + 2)
}

/// The bucket key of `tag` in group `group` (the inverse of [`split`]).
fn bucket_key(group: &str, tag: Tag) -> String {
    let kind = &tag[..tag.iter().position(|&b| b == 0).unwrap_or(tag.len())];
    let Some(p) = tag_end(group).filter(|_| !kind.is_empty()) else {
        return group.to_string();
    };
    let mut key = String::with_capacity(group.len() + kind.len() + 1);
    key.push_str(&group[..p]);
    key.extend(kind.iter().map(|&b| b as char));
    key.push(':');
    key.push_str(&group[p..]);
    key
}

/// What memory alone decides for a Check.
#[derive(Debug, Clone, PartialEq)]
pub enum Local {
    /// Admitted from leases; levels as the client should see them.
    Taken(Vec<f64>),
    /// Refused: bucket `index` was refused by the store recently; the
    /// levels last seen of every bucket.
    Denied { index: usize, levels: Vec<f64> },
    /// The store must be asked.
    Miss,
}

#[derive(Default)]
struct Map {
    groups: HashMap<Box<str>, Group>,
    /// Scratch space for a group key while looking it up.
    buf: String,
}

impl Map {
    /// Puts bucket `key`'s group key in `buf`; returns the bucket's tag.
    fn group_key(&mut self, key: &str) -> Tag {
        let (head, tail, tag) = split(key);
        self.buf.clear();
        self.buf.push_str(head);
        self.buf.push_str(tail);
        tag
    }

    /// The group of bucket `key`, and the bucket's tag in it.
    fn group(&mut self, key: &str) -> (Option<&mut Group>, Tag) {
        let tag = self.group_key(key);
        (self.groups.get_mut(self.buf.as_str()), tag)
    }

    fn get(&mut self, key: &str) -> Option<&mut Entry> {
        let (group, tag) = self.group(key);
        group?.buckets.iter_mut().find(|e| e.tag == tag)
    }

    /// Bucket `op`'s entry and its group's refill lock, created if missing.
    fn entry(&mut self, op: &BucketOp, now: Tick) -> (&mut Entry, &mut Option<Arc<Refill>>) {
        let tag = self.group_key(&op.key);
        // The key is allocated only for a new group.
        if !self.groups.contains_key(self.buf.as_str()) {
            self.groups
                .insert(self.buf.as_str().into(), Group::default());
        }
        let Some(group) = self.groups.get_mut(self.buf.as_str()) else {
            unreachable!("inserted above")
        };
        let i = group.index(tag, op.spec, now);
        (&mut group.buckets[i], &mut group.refill)
    }
}

/// Leases of one instance, by bucket key.
#[derive(Default)]
pub struct Leases {
    map: Mutex<Map>,
    /// The first `now` passed in: what every [`Tick`] counts from.
    epoch: OnceLock<Instant>,
    /// Units to give back to the store (from a policy reload).
    returns: Mutex<Vec<BucketOp>>,
}

impl Leases {
    pub fn new() -> Leases {
        Leases::default()
    }

    fn map(&self) -> MutexGuard<'_, Map> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn tick(&self, now: Instant) -> Tick {
        Tick::at(*self.epoch.get_or_init(|| now), now)
    }

    /// Buckets currently held (entries, leased or not).
    pub fn len(&self) -> usize {
        self.map().groups.values().map(|g| g.buckets.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Decide from memory: refuse if a bucket was refused recently and this
    /// instance holds too little of it; admit (taking every op's `take` from
    /// the leases) if every bucket is covered; otherwise [`Local::Miss`].
    pub fn try_take(&self, ops: &[BucketOp], now: Instant) -> Local {
        let now = self.tick(now);
        let mut map = self.map();
        // One lookup per bucket when all are covered (the common case):
        // take while checking; put back what was taken when one is not.
        let mut levels = Vec::with_capacity(ops.len());
        let mut before: Vec<(u32, Tick)> = Vec::with_capacity(ops.len());
        let mut covered = true;
        for (index, op) in ops.iter().enumerate() {
            match map.get(&op.key) {
                Some(e) if e.spec == op.spec => {
                    if e.covers(op, now) {
                        if covered {
                            before.push((e.used, e.last_used));
                            e.units -= op.take;
                            e.used = e
                                .used
                                .saturating_add(op.take.clamp(0, u32::MAX as i64) as u32);
                            e.last_used = now;
                            levels.push(e.level + e.units as f64);
                        }
                        continue;
                    }
                    if e.denied_until.is_some_and(|t| t.is_later_than(now)) && !e.holds(op) {
                        put_back(&mut map, ops, &before);
                        return Local::Denied {
                            index,
                            levels: seen(&mut map, ops),
                        };
                    }
                    covered = false;
                }
                _ => covered = false,
            }
        }
        if !covered {
            put_back(&mut map, ops, &before);
            return Local::Miss;
        }
        Local::Taken(levels)
    }

    /// The refill lock of a lease set (kept with its first bucket).
    pub fn refill(&self, op: &BucketOp, now: Instant) -> Arc<Refill> {
        let now = self.tick(now);
        let mut map = self.map();
        let (_, refill) = map.entry(op, now);
        refill.get_or_insert_with(Default::default).clone()
    }

    /// Extra units to ask for beside each op's take: [`HORIZON`] of this
    /// instance's demand since the last grant, and one take for every
    /// other Check waiting on the same refill.
    pub fn wants(&self, ops: &[BucketOp], refill: &Refill, now: Instant) -> Vec<u64> {
        let now = self.tick(now);
        let mut map = self.map();
        let waiting = refill.waiting().saturating_sub(1);
        ops.iter()
            .map(|op| {
                let take = op.take.max(0) as u64;
                let by_rate = map.get(&op.key).map_or(0, |e| {
                    let elapsed = now.since(e.granted_at).max(Duration::from_millis(1));
                    (e.used as f64 * HORIZON.as_secs_f64() / elapsed.as_secs_f64()).ceil() as u64
                });
                by_rate.max(take.saturating_mul(waiting))
            })
            .collect()
    }

    /// Record what the store granted to an admitted Check; returns the
    /// levels the client should see (the store's level plus what this
    /// instance still holds).
    pub fn grant(&self, ops: &[BucketOp], outcome: &Outcome, now: Instant) -> Vec<f64> {
        let now = self.tick(now);
        let mut map = self.map();
        let mut levels = Vec::with_capacity(ops.len());
        for (i, op) in ops.iter().enumerate() {
            let (e, _) = map.entry(op, now);
            if e.spec != op.spec {
                *e = Entry::new(e.tag, op.spec, now);
            }
            let granted = outcome.granted.get(i).copied().unwrap_or(0);
            e.units += granted as i64;
            e.level = outcome.levels.get(i).copied().unwrap_or(e.level);
            e.used = op.take.clamp(0, u32::MAX as i64) as u32;
            e.granted_at = now;
            e.last_used = now;
            e.denied_until = None;
            e.exhausted_until = None;
            levels.push(e.level + e.units as f64);
        }
        levels
    }

    /// The store reported `levels` for `ops` (after a debit or refund made
    /// by this instance): the levels clients see follow.
    pub fn observe(&self, ops: &[BucketOp], levels: &[f64]) {
        let mut map = self.map();
        for (op, level) in ops.iter().zip(levels) {
            if let Some(e) = map.get(&op.key).filter(|e| e.spec == op.spec) {
                e.level = *level;
            }
        }
    }

    /// The store refused bucket `op` at `level`; it admits again in
    /// `retry`. Refuse takes that `level` (as settlements since change it)
    /// does not hold from memory for at most [`DENIAL_CACHE`], and while
    /// the store is unreachable until it can have refilled.
    pub fn deny(&self, op: &BucketOp, level: f64, retry: Duration, now: Instant) {
        let now = self.tick(now);
        let mut map = self.map();
        let (e, _) = map.entry(op, now);
        if e.spec != op.spec {
            return;
        }
        e.level = level;
        e.last_used = now;
        e.denied_until = Some(now.after(retry.min(DENIAL_CACHE)));
        e.exhausted_until = Some(now.after(retry));
    }

    /// Take back the units this instance still leases of bucket `key` (its
    /// cached refusal stays): one refund op for the store, if any.
    pub fn release(&self, key: &str) -> Option<BucketOp> {
        let mut map = self.map();
        let e = map.get(key).filter(|e| e.units > 0)?;
        let op = refund(key.to_string(), e);
        e.units = 0;
        Some(op)
    }

    /// While the store is unreachable: the first bucket of `ops` known to be
    /// exhausted now (and not covered by a lease), with every bucket's level
    /// last seen.
    pub fn known_exhausted(&self, ops: &[BucketOp], now: Instant) -> Option<(usize, Vec<f64>)> {
        let now = self.tick(now);
        let mut map = self.map();
        let i = ops.iter().position(|op| {
            map.get(&op.key).is_some_and(|e| {
                e.spec == op.spec
                    && !e.covers(op, now)
                    && e.exhausted_until.is_some_and(|t| t.is_later_than(now))
            })
        })?;
        Some((i, seen(&mut map, ops)))
    }

    /// Drop entries idle for [`IDLE`] (none waiting, nothing exhausted to
    /// remember) and return what they still held: one refund op each.
    pub fn sweep(&self, now: Instant) -> Vec<BucketOp> {
        let now = self.tick(now);
        let mut out = std::mem::take(&mut *self.returns.lock().unwrap_or_else(|p| p.into_inner()));
        let mut map = self.map();
        map.groups.retain(|key, g| {
            if g.refill.as_ref().is_some_and(|r| Arc::strong_count(r) > 1)
                || !g.buckets.iter().any(|e| e.idle(now))
            {
                return true;
            }
            for e in g.buckets.iter().filter(|e| e.idle(now) && e.units > 0) {
                out.push(refund(bucket_key(key, e.tag), e));
            }
            g.buckets = g.buckets.iter().filter(|e| !e.idle(now)).copied().collect();
            !g.buckets.is_empty()
        });
        // The table does not shrink by itself: give back most of it once
        // most keys went idle.
        let len = map.groups.len();
        if map.groups.capacity() > 4 * len.max(1024) {
            map.groups.shrink_to(2 * len);
        }
        out
    }

    /// Forget every lease and cached refusal (a policy reload); what was
    /// held is returned by the next [`Leases::sweep`].
    pub fn clear(&self) {
        let drained: Vec<BucketOp> = self
            .map()
            .groups
            .drain()
            .flat_map(|(key, g)| {
                g.buckets
                    .iter()
                    .filter(|e| e.units > 0)
                    .map(|e| refund(bucket_key(&key, e.tag), e))
                    .collect::<Vec<_>>()
            })
            .collect();
        self.returns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(drained);
    }
}

/// Undo what [`Leases::try_take`] took from the first `before.len()` of
/// `ops` (their demand counters and last use as they were).
fn put_back(map: &mut Map, ops: &[BucketOp], before: &[(u32, Tick)]) {
    for (op, &(used, last_used)) in ops.iter().zip(before).rev() {
        if let Some(e) = map.get(&op.key) {
            e.units += op.take;
            e.used = used;
            e.last_used = last_used;
        }
    }
}

/// Levels last seen of `ops` (the store's level plus what this instance
/// holds; full when unknown).
fn seen(map: &mut Map, ops: &[BucketOp]) -> Vec<f64> {
    ops.iter()
        .map(|op| match map.get(&op.key) {
            Some(e) if e.spec == op.spec => e.level + e.units as f64,
            _ => op.spec.capacity as f64,
        })
        .collect()
}

fn refund(key: String, e: &Entry) -> BucketOp {
    BucketOp {
        key,
        spec: e.spec,
        take: -e.units,
        lease: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: BucketSpec = BucketSpec {
        capacity: 100,
        window_ms: 60_000,
    };

    fn op(key: &str, take: i64) -> BucketOp {
        BucketOp {
            key: key.into(),
            spec: SPEC,
            take,
            lease: 0,
        }
    }

    fn outcome(levels: &[f64], granted: &[u64]) -> Outcome {
        Outcome {
            denied: None,
            levels: levels.to_vec(),
            granted: granted.to_vec(),
        }
    }

    #[test]
    fn a_granted_lease_serves_checks_until_it_runs_out() {
        let l = Leases::new();
        let t0 = Instant::now();
        let ops = [op("a", 1), op("b", 1)];
        assert_eq!(l.try_take(&ops, t0), Local::Miss);
        // The store took 1 + 2 from a and 1 + 5 from b.
        let seen = l.grant(&ops, &outcome(&[97.0, 94.0], &[2, 5]), t0);
        assert_eq!(seen, vec![99.0, 99.0]);
        assert_eq!(l.try_take(&ops, t0), Local::Taken(vec![98.0, 98.0]));
        assert_eq!(l.try_take(&ops, t0), Local::Taken(vec![97.0, 97.0]));
        // a is used up: nothing is taken from b either.
        assert_eq!(l.try_take(&ops, t0), Local::Miss);
        assert_eq!(l.try_take(&[op("b", 3)], t0), Local::Taken(vec![94.0]));
    }

    #[test]
    fn a_refused_take_does_not_refuse_what_the_level_holds() {
        // A top-up of 390 refused at a level of 350: a Check reserving 40
        // goes to the store, and so does one of 600 once this instance
        // settled a refund that brought the level to 988.
        let l = Leases::new();
        let t0 = Instant::now();
        l.deny(&op("a", 390), 350.0, Duration::from_secs(30), t0);
        assert!(matches!(
            l.try_take(&[op("a", 400)], t0),
            Local::Denied { .. }
        ));
        assert_eq!(l.try_take(&[op("a", 40)], t0), Local::Miss);
        assert!(matches!(
            l.try_take(&[op("a", 600)], t0),
            Local::Denied { .. }
        ));
        l.observe(&[op("a", -620)], &[988.0]);
        assert_eq!(l.try_take(&[op("a", 600)], t0), Local::Miss);
    }

    #[test]
    fn a_refusal_is_answered_from_memory_for_at_most_a_second() {
        let l = Leases::new();
        let t0 = Instant::now();
        let ops = [op("a", 1), op("b", 1)];
        l.deny(&ops[1], 0.4, Duration::from_secs(30), t0);
        let denied = Local::Denied {
            index: 1,
            levels: vec![100.0, 0.4],
        };
        assert_eq!(l.try_take(&ops, t0), denied);
        assert_eq!(l.try_take(&ops, t0 + Duration::from_millis(999)), denied);
        assert_eq!(l.try_take(&ops, t0 + DENIAL_CACHE), Local::Miss);
        // Unreachable store: still known exhausted until it can refill.
        assert_eq!(
            l.known_exhausted(&ops, t0 + Duration::from_secs(29)),
            Some((1, vec![100.0, 0.4]))
        );
        assert_eq!(l.known_exhausted(&ops, t0 + Duration::from_secs(30)), None);
    }

    #[test]
    fn wants_follow_demand_and_waiters() {
        let l = Leases::new();
        let t0 = Instant::now();
        let ops = [op("a", 1)];
        let r = l.refill(&ops[0], t0);
        let _w = r.wait();
        assert_eq!(
            l.wants(&ops, &r, t0),
            vec![0],
            "no history, nobody else waiting"
        );
        let _w2 = r.wait();
        let _w3 = r.wait();
        assert_eq!(l.wants(&ops, &r, t0), vec![2], "two others wait");
        drop((_w2, _w3));
        l.grant(&ops, &outcome(&[50.0], &[49]), t0);
        for _ in 0..9 {
            l.try_take(&ops, t0);
        }
        // 10 units in 100 ms: 20 per 200 ms.
        assert_eq!(l.wants(&ops, &r, t0 + Duration::from_millis(100)), vec![20]);
    }

    #[test]
    fn idle_leases_are_returned_and_dropped() {
        let l = Leases::new();
        let t0 = Instant::now();
        let ops = [op("a", 1), op("b", 1)];
        l.grant(&ops, &outcome(&[90.0, 99.0], &[9, 0]), t0);
        assert!(l.sweep(t0 + Duration::from_millis(500)).is_empty());
        let back = l.sweep(t0 + IDLE);
        assert_eq!(back.len(), 1);
        assert_eq!((back[0].key.as_str(), back[0].take), ("a", -9));
        assert!(l.is_empty(), "both entries dropped");
    }

    #[test]
    fn buckets_of_one_scope_share_a_group_and_keep_their_keys() {
        let l = Leases::new();
        let t0 = Instant::now();
        let keys = [
            "tg:{acme}:rm:k:key-1",
            "tg:{acme}:tm:k:key-1",
            "tg:{acme}:rm:t",
            "tg:{acme}:$d:2026-11-23:k:key-1",
            "tg:{acme}:k:key-1",
            "tg:{acme}:long-kind:k:key-1",
            "no-hash-tag",
            "tg:{a}::x",
        ];
        let ops: Vec<BucketOp> = keys.iter().map(|k| op(k, 1)).collect();
        let granted = vec![3; keys.len()];
        l.grant(&ops, &outcome(&vec![90.0; keys.len()], &granted), t0);
        assert_eq!(l.len(), keys.len());
        assert_eq!(l.map().groups.len(), 7, "rm and tm of k:key-1 share one");
        assert!(matches!(l.try_take(&ops, t0), Local::Taken(_)));
        let mut back: Vec<(String, i64)> = l
            .sweep(t0 + IDLE)
            .into_iter()
            .map(|o| (o.key, o.take))
            .collect();
        back.sort();
        let mut want: Vec<(String, i64)> = keys.iter().map(|k| (k.to_string(), -2)).collect();
        want.sort();
        assert_eq!(back, want, "every refund names its bucket's own key");
        assert!(l.is_empty());
    }

    #[test]
    fn a_miss_leaves_every_bucket_as_it_was() {
        let l = Leases::new();
        let t0 = Instant::now();
        let ops = [op("tg:{t}:rm:k:a", 1), op("tg:{t}:tm:k:a", 1), op("b", 1)];
        l.grant(&ops[..2], &outcome(&[90.0, 90.0], &[5, 5]), t0);
        let t1 = t0 + Duration::from_millis(100);
        let r = l.refill(&ops[0], t0);
        let _w = r.wait();
        let wants = l.wants(&ops, &r, t1);
        // b holds nothing: a Miss; the others keep units, demand, last use.
        assert_eq!(l.try_take(&ops, t1), Local::Miss);
        assert_eq!(l.wants(&ops, &r, t1), wants);
        drop((_w, r));
        let back: Vec<i64> = l.sweep(t0 + IDLE).iter().map(|o| o.take).collect();
        assert_eq!(
            back,
            vec![-5, -5],
            "idle one IDLE after the grant, units intact"
        );
    }

    #[test]
    fn an_entry_is_56_bytes() {
        assert_eq!(std::mem::size_of::<Entry>(), 56);
    }

    #[test]
    fn ticks_compare_across_their_wrap() {
        let t0 = Instant::now();
        assert_eq!(Tick::at(t0, t0).0.get(), 1);
        assert_eq!(Tick::at(t0, t0 + IDLE).since(Tick::at(t0, t0)), IDLE);
        let before_wrap = Tick(NonZeroU32::new(u32::MAX - 10).unwrap());
        let after_wrap = before_wrap.after(Duration::from_millis(30));
        assert_eq!(after_wrap.0.get(), 19);
        assert!(after_wrap.is_later_than(before_wrap));
        assert!(!before_wrap.is_later_than(after_wrap));
        assert_eq!(after_wrap.since(before_wrap), Duration::from_millis(30));
        assert_eq!(before_wrap.since(after_wrap), Duration::ZERO);
        // A day ahead (the longest retry kept) still compares as later.
        let day = before_wrap.after(Duration::from_secs(86_400));
        assert!(day.is_later_than(after_wrap));
    }

    #[test]
    fn clear_returns_everything_held() {
        let l = Leases::new();
        let t0 = Instant::now();
        l.grant(&[op("a", 1)], &outcome(&[90.0], &[9]), t0);
        l.clear();
        assert!(l.is_empty());
        let back = l.sweep(t0);
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].take, -9);
    }

    #[test]
    fn a_positive_only_bucket_trusts_its_level_for_one_horizon() {
        let l = Leases::new();
        let t0 = Instant::now();
        let ops = [op("a", 1), op("m", 0)];
        l.grant(&ops, &outcome(&[90.0, 5.0], &[9, 0]), t0);
        assert!(matches!(l.try_take(&ops, t0), Local::Taken(_)));
        assert_eq!(l.try_take(&ops, t0 + HORIZON), Local::Miss);
    }
}
