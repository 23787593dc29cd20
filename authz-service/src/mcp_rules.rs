//! The MCP part of a policy: which MCP servers and tools a key (and its
//! tenant) may use, its calls per minute or day per key, server or tool,
//! and the price of a call, compiled once with the rest of the policy.
//!
//! ```yaml
//! mcp_prices:                      # US dollars per tools/call, counted in money budgets
//!   demo/get_weather: 0.002
//!   demo/*: 0.0005
//! tenants:
//!   acme:
//!     mcp: {tools: ["demo/*"], limits: {"*": {calls_per_minute: 600}}}
//! keys:
//!   - id: acme-ci
//!     mcp:
//!       tools: ["demo/get_weather", "demo/search_*"]   # server/tool patterns, as models
//!       limits:
//!         "*": {calls_per_minute: 120}                 # every tool call of the key
//!         demo: {calls_per_minute: 60}                 # its calls to one server
//!         demo/get_weather: {calls_per_minute: 10}     # one tool
//! ```
//!
//! Limits are buckets like the model limits (`rm`/`rd` buckets in Redis,
//! the same leases): only `tools/call` counts. Names in bucket keys come
//! from the policy, never from the client.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tollgate_wire::mcp::{server_matches, tool_matches};
use tollgate_wire::{valid_model, valid_name};

use crate::bucket::BucketSpec;
use crate::prices::{Decimal, NANO_PER_USD};

/// `mcp:` of a key or tenant as written.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawMcp {
    /// `server/tool` patterns; absent on a key: no MCP server; absent on a
    /// tenant: no restriction beyond the keys' own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// `*`, `<server>` or `<server>/<tool>` → calls per minute / day.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, RawCallLimits>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawCallLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls_per_minute: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls_per_day: Option<u64>,
}

/// One calls bucket: what it counts (`*`, a server, or `server/tool`), its
/// period (`minute`, `day`) and its spec.
#[derive(Debug, Clone, PartialEq)]
pub struct CallLimit {
    pub name: String,
    pub period: &'static str,
    pub spec: BucketSpec,
}

/// The compiled `mcp:` of a key or tenant.
#[derive(Debug, Clone, Default)]
pub struct McpRules {
    /// `None`: no restriction (a tenant without `tools`).
    pub tools: Option<Vec<String>>,
    pub limits: Vec<CallLimit>,
}

impl McpRules {
    /// May `tool` of `server` be called? (`None` tools: yes.)
    pub fn allows_tool(&self, server: &str, tool: &str) -> bool {
        self.tools
            .as_ref()
            .is_none_or(|ps| ps.iter().any(|p| tool_matches(p, server, tool)))
    }

    /// May anything of `server` be used (its other requests pass)?
    pub fn allows_server(&self, server: &str) -> bool {
        self.tools
            .as_ref()
            .is_none_or(|ps| ps.iter().any(|p| server_matches(p, server)))
    }

    /// The limits a call of `tool` on `server` counts in.
    pub fn limits_for<'a>(
        &'a self,
        server: &'a str,
        tool: &'a str,
    ) -> impl Iterator<Item = &'a CallLimit> + 'a {
        self.limits.iter().filter(move |l| {
            l.name == "*"
                || l.name == server
                || l.name
                    .split_once('/')
                    .is_some_and(|(s, t)| s == server && t == tool)
        })
    }
}

const MINUTE_MS: u64 = 60_000;
const DAY_MS: u64 = 86_400_000;

/// Compile the `mcp:` of `owner` (`key "k"`, `tenant "t"`); the error is
/// the exact message the policy loader reports.
pub fn compile(owner: &str, raw: &RawMcp) -> Result<McpRules, String> {
    if let Some(tools) = &raw.tools {
        for p in tools {
            if !valid_model(p) {
                return Err(format!("{owner}: invalid mcp tool pattern {p:?}"));
            }
        }
    }
    let mut limits = Vec::new();
    for (name, l) in &raw.limits {
        let valid = name == "*"
            || valid_name(name)
            || name
                .split_once('/')
                .is_some_and(|(s, t)| valid_name(s) && !t.is_empty() && valid_model(t));
        if !valid || name.len() > 128 {
            return Err(format!(
                "{owner}: mcp.limits key {name:?} must be \"*\", a server or server/tool"
            ));
        }
        for (field, v, period, window_ms) in [
            ("calls_per_minute", l.calls_per_minute, "minute", MINUTE_MS),
            ("calls_per_day", l.calls_per_day, "day", DAY_MS),
        ] {
            match v {
                Some(0) => {
                    return Err(format!(
                        "{owner}: mcp.limits.{name:?}.{field} must be greater than 0"
                    ))
                }
                Some(capacity) => limits.push(CallLimit {
                    name: name.clone(),
                    period,
                    spec: BucketSpec {
                        capacity,
                        window_ms,
                    },
                }),
                None => {}
            }
        }
    }
    Ok(McpRules {
        tools: raw.tools.clone(),
        limits,
    })
}

/// Prices per tool call, in nano-dollars, by `server/tool` pattern.
#[derive(Debug, Clone, Default)]
pub struct McpPrices(Vec<(String, i64)>);

/// Highest price of one call: $1,000 (keeps budget arithmetic exact).
const MAX_CALL_NANO: i64 = 1_000 * NANO_PER_USD;

impl McpPrices {
    /// `mcp_prices:` of the policy: pattern → US dollars per call (≤ 9
    /// places).
    pub fn compile(raw: &BTreeMap<String, Decimal>) -> Result<McpPrices, String> {
        let mut out = Vec::new();
        for (pattern, usd) in raw {
            if !valid_model(pattern) {
                return Err(format!("mcp_prices: invalid pattern {pattern:?}"));
            }
            match usd.scaled(9) {
                Some(nano) if nano <= MAX_CALL_NANO => out.push((pattern.clone(), nano)),
                _ => {
                    return Err(format!(
                        "mcp_prices.{pattern:?}: must be a decimal of US dollars from 0 to 1000 with at most 9 places"
                    ))
                }
            }
        }
        Ok(McpPrices(out))
    }

    /// The price of one call of `tool` on `server`: the most specific
    /// matching pattern's (an exact name, else the longest prefix); 0 when
    /// none matches.
    pub fn of(&self, server: &str, tool: &str) -> i64 {
        self.0
            .iter()
            .filter(|(p, _)| tool_matches(p, server, tool))
            .max_by_key(|(p, _)| (!p.ends_with('*'), p.len()))
            .map_or(0, |(_, nano)| *nano)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(yaml: &str) -> Result<McpRules, String> {
        compile("key \"k\"", &serde_norway::from_str(yaml).unwrap())
    }

    #[test]
    fn tools_and_servers() {
        let r = rules("{tools: [\"demo/get_*\", \"docs/search\"]}").unwrap();
        assert!(r.allows_tool("demo", "get_weather"));
        assert!(!r.allows_tool("demo", "delete_repo"));
        assert!(r.allows_tool("docs", "search"));
        assert!(r.allows_server("docs") && r.allows_server("demo"));
        assert!(!r.allows_server("weather"));
        let none = rules("{}").unwrap();
        assert!(none.allows_tool("any", "thing"), "a tenant without tools");
    }

    #[test]
    fn limits_apply_by_name() {
        let r = rules(
            "{limits: {\"*\": {calls_per_minute: 9}, demo: {calls_per_day: 5}, demo/a: {calls_per_minute: 1}, docs/a: {calls_per_minute: 2}}}",
        )
        .unwrap();
        let names: Vec<_> = r
            .limits_for("demo", "a")
            .map(|l| (l.name.as_str(), l.period))
            .collect();
        assert_eq!(
            names,
            [("*", "minute"), ("demo", "day"), ("demo/a", "minute")]
        );
        assert_eq!(r.limits_for("demo", "b").count(), 2);
    }

    #[test]
    fn invalid_rules_say_what() {
        assert_eq!(
            rules("{limits: {demo: {calls_per_minute: 0}}}").unwrap_err(),
            "key \"k\": mcp.limits.\"demo\".calls_per_minute must be greater than 0"
        );
        assert_eq!(
            rules("{limits: {\"de mo\": {calls_per_minute: 1}}}").unwrap_err(),
            "key \"k\": mcp.limits key \"de mo\" must be \"*\", a server or server/tool"
        );
        assert_eq!(
            rules("{tools: [\"a,b\"]}").unwrap_err(),
            "key \"k\": invalid mcp tool pattern \"a,b\""
        );
    }

    #[test]
    fn the_most_specific_price_wins() {
        let raw: BTreeMap<String, Decimal> =
            serde_norway::from_str("{demo/get_weather: 0.002, \"demo/*\": 0.0005, \"*\": 0.1}")
                .unwrap();
        let p = McpPrices::compile(&raw).unwrap();
        assert_eq!(p.of("demo", "get_weather"), 2_000_000);
        assert_eq!(p.of("demo", "other"), 500_000);
        assert_eq!(p.of("docs", "x"), 100_000_000);
        assert_eq!(McpPrices::default().of("demo", "x"), 0);
        let bad: BTreeMap<String, Decimal> = serde_norway::from_str("{x/y: 5000}").unwrap();
        assert!(McpPrices::compile(&bad).is_err());
    }
}
