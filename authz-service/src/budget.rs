//! Money budgets as a policy states them: per key and per tenant, over a
//! calendar day or month in the tenant's IANA time zone or a rolling window
//! ([`crate::rolling`]), optionally per model; compiled once with the price
//! table ([`crate::prices`]) into [`Money`], the money part of a
//! [`crate::policy::Policy`]. For a request it plans the budgets that apply,
//! each in its current [`Window`], and names their spend counters in the
//! store ([`counter_key`]). Spending them is [`crate::spend`]'s.
//!
//! Nothing here reads a clock: every function takes `now_ms`.

use std::collections::HashMap;

use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};
use serde::{Deserialize, Serialize};

use crate::bucket::BucketSpec;
use crate::prices::{Decimal, Prices, RawPrice};
use crate::rolling::{Rolling, GRACE_MS};
use crate::storage::BucketOp;

/// Largest budget, in nano-dollars ($9,000,000): counters stay exact in
/// the Redis script's doubles.
pub const MAX_BUDGET_NANO: i64 = 9_000_000 * crate::prices::NANO_PER_USD;

/// Budgets of one key or tenant as written in the policy (or given to
/// the admin API, which stores them as written).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawBudgets {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd_per_day: Option<Decimal>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd_per_month: Option<Decimal>,
    /// Warn (header and metric) from this share of a budget on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soft_percent: Option<u8>,
    /// Rolling-window budgets (`crate::rolling`): "the last 24 hours".
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rolling: Vec<RawRolling>,
    /// Budgets per model: an exact `provider/model` or a pattern ending
    /// in `*` (as in a key's `models`), each with its own caps.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub models: std::collections::BTreeMap<String, RawBudgets>,
}

/// One rolling budget as written in the policy:
/// `{window: 24h, usd: 5, soft_percent: 80}`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawRolling {
    pub window: String,
    pub usd: Decimal,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soft_percent: Option<u8>,
}

/// A budget's window: a calendar day or month in the tenant's time zone,
/// or a rolling window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Period {
    Day,
    Month,
    Rolling(Rolling),
}

impl Period {
    /// The kind of window (metric label): `day`, `month`, `rolling`.
    pub fn as_str(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Month => "month",
            Period::Rolling(_) => "rolling",
        }
    }

    /// The window as named in headers and messages: `day`, `month`, `24h`.
    pub fn label(self) -> String {
        match self {
            Period::Rolling(r) => r.label(),
            p => p.as_str().to_string(),
        }
    }

    fn tag(self) -> String {
        match self {
            Period::Day => "$d".to_string(),
            Period::Month => "$m".to_string(),
            Period::Rolling(r) => format!("$r{}", r.label()),
        }
    }
}

/// One budget after validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub period: Period,
    /// Nano-dollars per window.
    pub cap: i64,
    pub soft_percent: Option<u8>,
}

/// One window of a period: its id (local date `2026-11-23` or month
/// `2026-11`) and bounds in unix milliseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub id: String,
    pub start_ms: i64,
    pub end_ms: i64,
    /// The end as local time with its offset, e.g. `2026-11-24T00:00:00+01:00`.
    pub end_local: String,
}

/// The window of `period` holding `now_ms` in `tz`. `None` only for
/// instants outside jiff's range.
///
/// A rolling window's "window" is its current slot (id: the slot index);
/// its end is when its oldest covered slot leaves, the earliest instant
/// spend can free up (in UTC: rolling windows ignore time zones).
pub fn window(period: Period, tz: &TimeZone, now_ms: i64) -> Option<Window> {
    if let Period::Rolling(r) = period {
        let idx = r.slot_of(now_ms);
        let end_ms = r.leaves_at(idx - r.slots + 1);
        return Some(Window {
            id: idx.to_string(),
            start_ms: idx * r.slot_ms,
            end_ms,
            end_local: Timestamp::from_millisecond(end_ms).ok()?.to_string(),
        });
    }
    let z = Timestamp::from_millisecond(now_ms)
        .ok()?
        .to_zoned_datetime(tz.clone());
    let date = z.date();
    let (start, end, id) = match period {
        Period::Day => (date, date.tomorrow().ok()?, date.to_string()),
        // Answered above.
        Period::Rolling(_) => return None,
        Period::Month => {
            let first = date.first_of_month();
            let id = format!("{:04}-{:02}", first.year(), first.month());
            (first, first.checked_add(1.month()).ok()?, id)
        }
    };
    let start = start.to_zoned_datetime(tz.clone()).ok()?;
    let end = end.to_zoned_datetime(tz.clone()).ok()?;
    Some(Window {
        id,
        start_ms: start.timestamp().as_millisecond(),
        end_ms: end.timestamp().as_millisecond(),
        end_local: end.strftime("%Y-%m-%dT%H:%M:%S%:z").to_string(),
    })
}

/// The current window per time zone and period, so a Check computes a
/// calendar window once per day or month, not per request.
#[derive(Default)]
pub struct WindowCache {
    map: std::sync::Mutex<HashMap<String, [Option<Window>; 2]>>,
}

impl WindowCache {
    /// [`window`], from the cache while `now_ms` is inside the cached one.
    pub fn get(&self, zone: &str, tz: &TimeZone, period: Period, now_ms: i64) -> Option<Window> {
        let slot = match period {
            Period::Day => 0,
            Period::Month => 1,
            Period::Rolling(_) => return window(period, tz, now_ms),
        };
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(Some(w)) = map.get(zone).map(|ws| &ws[slot]) {
            if (w.start_ms..w.end_ms).contains(&now_ms) {
                return Some(w.clone());
            }
        }
        let w = window(period, tz, now_ms)?;
        if !map.contains_key(zone) {
            map.insert(zone.to_string(), [None, None]);
        }
        if let Some(ws) = map.get_mut(zone) {
            ws[slot] = Some(w.clone());
        }
        Some(w)
    }
}

/// Budgets of one tenant or key.
#[derive(Debug, Clone, Default)]
pub struct Owner {
    pub budgets: Vec<Budget>,
    /// Per-model budgets: (model or pattern, its budgets), in name order.
    pub models: Vec<(String, Vec<Budget>)>,
}

/// The money part of a policy: prices, time zones, budgets.
#[derive(Debug, Clone, Default)]
pub struct Money {
    pub prices: Prices,
    /// Per tenant: its time zone (name, zone).
    zones: HashMap<String, (String, TimeZone)>,
    tenants: HashMap<String, Owner>,
    keys: HashMap<String, Owner>,
}

/// A time zone by IANA name; `Err` is the policy message.
pub fn zone(owner: &str, name: &str) -> Result<TimeZone, String> {
    TimeZone::get(name).map_err(|_| format!("{owner}: unknown time zone {name:?}"))
}

/// Budgets of one tenant or key, checked and compiled; `Err` is the
/// policy's exact message.
pub fn compile_budgets(owner: &str, raw: &RawBudgets) -> Result<Owner, String> {
    let mut models = Vec::new();
    for (pattern, b) in &raw.models {
        if !tollgate_wire::valid_model(pattern) {
            return Err(format!(
                "{owner}: budgets.models key {pattern:?} must be a model name or a pattern ending in *"
            ));
        }
        let who = format!("{owner} model {pattern:?}");
        if !b.models.is_empty() {
            return Err(format!("{who}: budgets.models cannot be nested"));
        }
        let inner = compile_budgets(&who, b)?;
        if inner.budgets.is_empty() {
            return Err(format!(
                "{who}: a model budget needs usd_per_day, usd_per_month or rolling"
            ));
        }
        models.push((pattern.clone(), inner.budgets));
    }
    let mut budgets = Vec::new();
    for (period, field, v) in [
        (Period::Day, "usd_per_day", &raw.usd_per_day),
        (Period::Month, "usd_per_month", &raw.usd_per_month),
    ] {
        let Some(v) = v else { continue };
        let cap = v.scaled(9).filter(|c| *c > 0 && *c <= MAX_BUDGET_NANO).ok_or(format!(
            "{owner}: budgets.{field} must be a decimal greater than 0 and at most 9000000 with at most 9 places"
        ))?;
        budgets.push(Budget {
            period,
            cap,
            soft_percent: raw.soft_percent,
        });
    }
    for (i, r) in raw.rolling.iter().enumerate() {
        let field = format!("budgets.rolling[{i}]");
        let shape =
            Rolling::parse(&r.window).map_err(|e| format!("{owner}: {field}.window: {e}"))?;
        if budgets.iter().any(|b| b.period == Period::Rolling(shape)) {
            return Err(format!(
                "{owner}: {field}.window {:?} repeats a rolling window",
                r.window
            ));
        }
        let cap = r.usd.scaled(9).filter(|c| *c > 0 && *c <= MAX_BUDGET_NANO).ok_or(format!(
            "{owner}: {field}.usd must be a decimal greater than 0 and at most 9000000 with at most 9 places"
        ))?;
        if let Some(p) = r.soft_percent {
            if p == 0 || p > 100 {
                return Err(format!(
                    "{owner}: {field}.soft_percent must be between 1 and 100"
                ));
            }
        }
        budgets.push(Budget {
            period: Period::Rolling(shape),
            cap,
            soft_percent: r.soft_percent.or(raw.soft_percent),
        });
    }
    if let Some(p) = raw.soft_percent {
        if p == 0 || p > 100 {
            return Err(format!(
                "{owner}: budgets.soft_percent must be between 1 and 100"
            ));
        }
    }
    Ok(Owner { budgets, models })
}

/// What the policy says about money, before compiling.
pub struct MoneyInput<'a> {
    pub default_zone: Option<&'a str>,
    pub prices: &'a std::collections::BTreeMap<String, RawPrice>,
    /// (tenant, its time zone, its budgets)
    pub tenants: Vec<(&'a str, Option<&'a str>, Option<&'a RawBudgets>)>,
    /// (key id, its budgets)
    pub keys: Vec<(&'a str, Option<&'a RawBudgets>)>,
}

impl Money {
    /// Compile the money part of a policy; `Err` is the exact message.
    pub fn compile(input: &MoneyInput) -> Result<Money, String> {
        let mut prices = Prices::shipped().map_err(|e| format!("shipped price table: {e}"))?;
        prices
            .extend(input.prices)
            .map_err(|e| format!("prices: {e}"))?;
        let default_name = input.default_zone.unwrap_or("UTC");
        let default_zone = zone("defaults", default_name)?;
        let mut m = Money {
            prices,
            ..Money::default()
        };
        for (name, tz, budgets) in &input.tenants {
            let owner = format!("tenant {name:?}");
            let z = match tz {
                Some(n) => (n.to_string(), zone(&owner, n)?),
                None => (default_name.to_string(), default_zone.clone()),
            };
            m.zones.insert(name.to_string(), z);
            if let Some(b) = budgets {
                m.tenants
                    .insert(name.to_string(), compile_budgets(&owner, b)?);
            }
        }
        for (id, budgets) in &input.keys {
            if let Some(b) = budgets {
                m.keys
                    .insert(id.to_string(), compile_budgets(&format!("key {id:?}"), b)?);
            }
        }
        Ok(m)
    }

    /// Whether any budget applies to key `key_id` of `tenant` (its own or
    /// its tenant's).
    pub fn applies(&self, key_id: &str, tenant: &str) -> bool {
        self.keys.contains_key(key_id) || self.tenants.contains_key(tenant)
    }

    /// Whether a per-model budget of key `key_id` or its `tenant` exists: a
    /// Check must then declare its model (`x-tollgate-model`).
    pub fn has_model_budgets(&self, key_id: &str, tenant: &str) -> bool {
        [self.keys.get(key_id), self.tenants.get(tenant)]
            .into_iter()
            .flatten()
            .any(|o| !o.models.is_empty())
    }

    /// The budgets of key `key_id` itself (not its tenant's).
    pub fn key_budgets(&self, key_id: &str) -> Option<&Owner> {
        self.keys.get(key_id)
    }

    /// The budgets of `tenant` itself (not its keys').
    pub fn tenant_budgets(&self, tenant: &str) -> Option<&Owner> {
        self.tenants.get(tenant)
    }

    /// The ids of the keys with budgets of their own, in no order.
    pub fn keys_with_budgets(&self) -> impl Iterator<Item = &str> {
        self.keys.keys().map(String::as_str)
    }

    /// The time zone of a tenant (UTC when unknown).
    pub fn zone_of(&self, tenant: &str) -> (String, TimeZone) {
        self.zones
            .get(tenant)
            .cloned()
            .unwrap_or_else(|| ("UTC".to_string(), TimeZone::UTC))
    }

    /// The budgets of key `key_id` of `tenant`: its own first (scope
    /// `k:<id>`), then its tenant's (scope `t`), then, when `model` is
    /// known, the per-model budgets whose pattern matches it (scopes
    /// `km:<id>:<pattern>` and `tm:<pattern>`), each with its current window
    /// at `now_ms`.
    pub fn plan(
        &self,
        key_id: &str,
        tenant: &str,
        model: Option<&str>,
        now_ms: i64,
        windows: &WindowCache,
    ) -> Vec<Planned> {
        let (zone, tz) = self.zone_of(tenant);
        let mut out = Vec::new();
        let mut push = |scope: Scope, pattern: Option<&str>, budgets: &[Budget]| {
            for b in budgets {
                let Some(w) = windows.get(&zone, &tz, b.period, now_ms) else {
                    continue;
                };
                let scope_key = scope_key(scope, key_id, pattern);
                out.push(Planned {
                    key: counter_key(tenant, b.period, &w.id, &scope_key),
                    budget: *b,
                    scope,
                    model: pattern.map(str::to_string),
                    window: w,
                });
            }
        };
        let owners = [
            (Scope::Key, self.keys.get(key_id)),
            (Scope::Tenant, self.tenants.get(tenant)),
        ];
        for (scope, owner) in owners {
            if let Some(o) = owner {
                push(scope, None, &o.budgets);
            }
        }
        if let Some(m) = model {
            for (scope, owner) in owners {
                for (pattern, budgets) in owner.map(|o| o.models.as_slice()).unwrap_or_default() {
                    if tollgate_wire::model_matches(pattern, m) {
                        push(scope, Some(pattern), budgets);
                    }
                }
            }
        }
        out
    }
}

/// The scope part of a counter key: `k:<id>`, `t`, and with a model
/// pattern `km:<id>:<pattern>`, `tm:<pattern>` (names from the policy).
pub fn scope_key(scope: Scope, key_id: &str, pattern: Option<&str>) -> String {
    match (scope, pattern) {
        (Scope::Key, None) => format!("k:{key_id}"),
        (Scope::Tenant, None) => "t".to_string(),
        (Scope::Key, Some(m)) => format!("km:{key_id}:{m}"),
        (Scope::Tenant, Some(m)) => format!("tm:{m}"),
    }
}

/// Redis key of one spend counter; the tenant is the hash tag.
pub fn counter_key(tenant: &str, period: Period, window_id: &str, scope: &str) -> String {
    format!("tg:{{{tenant}}}:{}:{window_id}:{scope}", period.tag())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Key,
    Tenant,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Key => "key",
            Scope::Tenant => "tenant",
        }
    }
}

/// One budget of a request, in its current window.
#[derive(Debug, Clone)]
pub struct Planned {
    pub key: String,
    pub budget: Budget,
    pub scope: Scope,
    /// The model pattern of a per-model budget.
    pub model: Option<String>,
    pub window: Window,
}

impl Planned {
    /// `key`, `tenant`, `key model openai/gpt-4o`, `tenant model anthropic/*`.
    pub fn scope_label(&self) -> String {
        match &self.model {
            Some(m) => format!("{} model {m}", self.scope.as_str()),
            None => self.scope.as_str().to_string(),
        }
    }
}

impl Planned {
    /// The counter operation: the spec carries the cap and the window's
    /// end plus grace (when the counter expires).
    pub fn op(&self, take: i64) -> BucketOp {
        let expires = match self.budget.period {
            // The current slot leaves the window last.
            Period::Rolling(r) => r.expires_at(r.slot_of(self.window.start_ms)),
            _ => self.window.end_ms + GRACE_MS,
        };
        BucketOp {
            key: self.key.clone(),
            spec: BucketSpec {
                capacity: self.budget.cap as u64,
                window_ms: expires.max(0) as u64,
            },
            take,
            lease: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(s: &str) -> i64 {
        s.parse::<Timestamp>().unwrap().as_millisecond()
    }

    #[test]
    fn day_rolls_over_at_local_midnight() {
        let tz = TimeZone::get("Europe/Paris").unwrap();
        // 22:59:59.999 UTC on 2026-11-23 is 23:59:59.999 in Paris (UTC+1).
        let before = window(Period::Day, &tz, ms("2026-11-23T22:59:59.999Z")).unwrap();
        let after = window(Period::Day, &tz, ms("2026-11-23T23:00:00Z")).unwrap();
        assert_eq!(before.id, "2026-11-23");
        assert_eq!(after.id, "2026-11-24");
        assert_eq!(before.end_ms, after.start_ms);
        assert_eq!(before.end_ms, ms("2026-11-23T23:00:00Z"));
        assert_eq!(before.end_local, "2026-11-24T00:00:00+01:00");
    }

    #[test]
    fn month_rolls_over_at_local_month_end() {
        let tz = TimeZone::get("America/New_York").unwrap();
        // 04:59:59 UTC on Dec 1 is 23:59:59 on Nov 30 in New York (UTC-5).
        let nov = window(Period::Month, &tz, ms("2026-12-01T04:59:59Z")).unwrap();
        let dec = window(Period::Month, &tz, ms("2026-12-01T05:00:00Z")).unwrap();
        assert_eq!((nov.id.as_str(), dec.id.as_str()), ("2026-11", "2026-12"));
        assert_eq!(nov.end_ms, ms("2026-12-01T05:00:00Z"));
        // November started under daylight saving time (UTC-4).
        assert_eq!(nov.start_ms, ms("2026-11-01T04:00:00Z"));
    }

    #[test]
    fn the_window_cache_follows_the_clock() {
        let tz = TimeZone::get("Europe/Paris").unwrap();
        let c = WindowCache::default();
        let at = |t| c.get("Europe/Paris", &tz, Period::Day, ms(t)).unwrap().id;
        assert_eq!(at("2026-11-23T22:59:59.999Z"), "2026-11-23");
        assert_eq!(at("2026-11-23T23:00:00Z"), "2026-11-24");
        assert_eq!(at("2026-11-23T12:00:00Z"), "2026-11-23", "a clock set back");
    }

    #[test]
    fn a_dst_day_is_23_hours_long() {
        let tz = TimeZone::get("Europe/Paris").unwrap();
        let w = window(Period::Day, &tz, ms("2026-03-29T12:00:00Z")).unwrap();
        assert_eq!(w.end_ms - w.start_ms, 23 * 3_600_000);
    }
}
