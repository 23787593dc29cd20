//! The price table: what one token of each kind costs, per `provider/model`,
//! and the exact cost of a usage report in nano-dollars.
//!
//! Prices are US dollars per 1,000,000 tokens, kept as integers in
//! micro-dollars per million tokens (at most 6 decimal places), so a cost
//! is `tokens × price / 1000` nano-dollars, rounded up once per report:
//! exact to 1 nano-dollar per report, never a float.
//!
//! ```
//! use tollgate_authz::prices::{Prices, Tokens};
//!
//! let p = Prices::shipped().unwrap();
//! // 1,000 prompt tokens (200 of them cached) and 500 completion tokens.
//! let t = Tokens { prompt: 1_000, completion: 500, cached: 200, cache_write: 0, web_searches: 0 };
//! // 800 × $0.15/M + 200 × $0.075/M + 500 × $0.60/M = $0.000435
//! assert_eq!(p.cost("openai/gpt-4o-mini", &t).0, 435_000);
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The table built into the binary: `config/prices.yaml`.
pub const SHIPPED: &str = include_str!("../../config/prices.yaml");

/// Nano-dollars per dollar.
pub const NANO_PER_USD: i64 = 1_000_000_000;

/// A decimal from YAML: a number (`0.15`) or a string (`"0.15"`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged)]
pub enum Decimal {
    Number(f64),
    Text(String),
}

impl Decimal {
    /// The value as an integer count of `10^-scale` units, if it is a
    /// non-negative decimal with at most `scale` places.
    pub fn scaled(&self, scale: u32) -> Option<i64> {
        let text = match self {
            Decimal::Number(f) if f.is_finite() && *f >= 0.0 => format!("{f}"),
            Decimal::Number(_) => return None,
            Decimal::Text(s) => s.trim().to_string(),
        };
        parse_scaled(&text, scale)
    }
}

/// `"12.5"` at scale 6 → `12_500_000`; `None` for anything but a plain
/// non-negative decimal with at most `scale` places that fits an i64.
pub fn parse_scaled(text: &str, scale: u32) -> Option<i64> {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    if int.is_empty() && frac.is_empty()
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
        || frac.len() > scale as usize
    {
        return None;
    }
    let unit = 10i64.checked_pow(scale)?;
    let int: i64 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let frac_val: i64 = if frac.is_empty() {
        0
    } else {
        frac.parse::<i64>().ok()? * 10i64.pow(scale - frac.len() as u32)
    };
    int.checked_mul(unit)?.checked_add(frac_val)
}

/// Nano-dollars as dollars with up to 9 places, trailing zeros cut to
/// cents: `1_500_000_000` → `"1.50"`, `435_000` → `"0.000435"`.
pub fn format_usd(nano: i64) -> String {
    let sign = if nano < 0 { "-" } else { "" };
    let n = nano.unsigned_abs();
    let int = n / NANO_PER_USD as u64;
    let frac = format!("{:09}", n % NANO_PER_USD as u64);
    let frac = frac.trim_end_matches('0');
    let frac = if frac.len() < 2 {
        format!("{frac:0<2}")
    } else {
        frac.to_string()
    };
    format!("{sign}{int}.{frac}")
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPrice {
    input: Decimal,
    output: Decimal,
    #[serde(default)]
    cached_input: Option<Decimal>,
    #[serde(default)]
    cache_write: Option<Decimal>,
    /// US dollars per 1,000 web searches the provider runs for an answer.
    #[serde(default)]
    web_search: Option<Decimal>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTable {
    version: u32,
    models: BTreeMap<String, RawPrice>,
}

/// One model's prices, micro-dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Price {
    pub input: i64,
    pub output: i64,
    pub cached_input: i64,
    pub cache_write: i64,
    /// Micro-dollars per 1,000 web searches (nano-dollars per search).
    pub web_search: i64,
}

impl Price {
    /// The highest of the four token prices.
    pub fn highest(&self) -> i64 {
        self.input
            .max(self.output)
            .max(self.cached_input)
            .max(self.cache_write)
    }
}

/// Token counts of one usage report. `cached` and `cache_write` are parts
/// of `prompt` (OpenAI semantics: `prompt_tokens` counts every input token).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tokens {
    pub prompt: u64,
    pub completion: u64,
    pub cached: u64,
    pub cache_write: u64,
    pub web_searches: u64,
}

/// A price table: shipped models plus a deployment's overrides.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prices {
    models: BTreeMap<String, Price>,
    /// Every field the highest of the table: for models absent from it.
    fallback: Price,
}

/// Whether a usage report's model was in the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priced {
    Listed,
    /// Priced at the table's highest prices.
    Unlisted,
}

/// Compile one raw price; `Err` names the field.
pub fn compile_price(model: &str, p: &RawPrice) -> Result<Price, String> {
    let f = |name: &str, d: &Decimal| {
        d.scaled(6).ok_or(format!(
            "price of {model:?}: {name} must be a non-negative decimal with at most 6 places"
        ))
    };
    let input = f("input", &p.input)?;
    Ok(Price {
        input,
        output: f("output", &p.output)?,
        cached_input: p
            .cached_input
            .as_ref()
            .map(|d| f("cached_input", d))
            .transpose()?
            .unwrap_or(input),
        cache_write: p
            .cache_write
            .as_ref()
            .map(|d| f("cache_write", d))
            .transpose()?
            .unwrap_or(input),
        web_search: p
            .web_search
            .as_ref()
            .map(|d| f("web_search", d))
            .transpose()?
            .unwrap_or(0),
    })
}

impl Prices {
    /// The table built into the binary.
    pub fn shipped() -> Result<Prices, String> {
        Prices::from_yaml(SHIPPED)
    }

    /// Parse a price table file's text.
    pub fn from_yaml(text: &str) -> Result<Prices, String> {
        let raw: RawTable = serde_norway::from_str(text).map_err(|e| e.to_string())?;
        if raw.version != 1 {
            return Err(format!(
                "unsupported price table version {} (expected 1)",
                raw.version
            ));
        }
        let mut p = Prices::default();
        p.extend(&raw.models)?;
        Ok(p)
    }

    /// Add or replace models (a deployment's overrides).
    pub fn extend(&mut self, models: &BTreeMap<String, RawPrice>) -> Result<(), String> {
        for (model, raw) in models {
            if !tollgate_wire::valid_model(model) || model.contains('*') {
                return Err(format!("price of {model:?}: must be an exact model name"));
            }
            self.models
                .insert(model.clone(), compile_price(model, raw)?);
        }
        let mut f = Price::default();
        for p in self.models.values() {
            f.input = f.input.max(p.input);
            f.output = f.output.max(p.output);
            f.cached_input = f.cached_input.max(p.cached_input);
            f.cache_write = f.cache_write.max(p.cache_write);
            f.web_search = f.web_search.max(p.web_search);
        }
        self.fallback = f;
        Ok(())
    }

    /// The prices of `model`, or the table's highest when it is absent.
    pub fn price(&self, model: &str) -> (Price, Priced) {
        match self.models.get(model) {
            Some(p) => (*p, Priced::Listed),
            None => (self.fallback, Priced::Unlisted),
        }
    }

    /// Listed model names (metric label values come from here).
    pub fn contains(&self, model: &str) -> bool {
        self.models.contains_key(model)
    }

    /// The highest price of any kind among the listed models that one of
    /// `patterns` allows (`*`, a prefix ending in `*`, or an exact name);
    /// the table's highest when none is listed. Micro-dollars per million.
    pub fn highest_for(&self, patterns: &[String]) -> i64 {
        self.models
            .iter()
            .filter(|(m, _)| patterns.iter().any(|p| tollgate_wire::model_matches(p, m)))
            .map(|(_, p)| p.highest())
            .max()
            .unwrap_or_else(|| self.fallback.highest())
    }

    /// Cost of `t` on `model` in nano-dollars, rounded up.
    pub fn cost(&self, model: &str, t: &Tokens) -> (i64, Priced) {
        let (p, priced) = self.price(model);
        (cost_nano(&p, t), priced)
    }
}

/// `t` priced at `p`, in nano-dollars, rounded up (saturating).
pub fn cost_nano(p: &Price, t: &Tokens) -> i64 {
    let cached = t.cached.min(t.prompt);
    let write = t.cache_write.min(t.prompt - cached);
    let plain = t.prompt - cached - write;
    let parts = [
        (plain, p.input),
        (cached, p.cached_input),
        (write, p.cache_write),
        (t.completion, p.output),
    ];
    let micro_per_million: u128 = parts
        .iter()
        .map(|&(n, price)| n as u128 * price.max(0) as u128)
        .sum();
    let searches = t.web_searches as u128 * p.web_search.max(0) as u128;
    i64::try_from(micro_per_million.div_ceil(1000) + searches).unwrap_or(i64::MAX)
}

/// Tokens × price (micro-dollars per million) in nano-dollars, rounded up:
/// the money reserved for `tokens` at the highest price of a key's models.
pub fn reserve_nano(tokens: u64, highest: i64) -> i64 {
    i64::try_from((tokens as u128 * highest.max(0) as u128).div_ceil(1000)).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_exact() {
        assert_eq!(parse_scaled("0.15", 6), Some(150_000));
        assert_eq!(parse_scaled("10", 6), Some(10_000_000));
        assert_eq!(parse_scaled(".5", 2), Some(50));
        assert_eq!(parse_scaled("0.0000001", 6), None);
        for bad in ["", ".", "-1", "1e3", "1.2.3", " 1"] {
            assert_eq!(parse_scaled(bad, 6), None, "{bad:?}");
        }
        assert_eq!(Decimal::Number(0.075).scaled(6), Some(75_000));
        assert_eq!(Decimal::Number(-1.0).scaled(6), None);
        assert_eq!(Decimal::Text("3.75".into()).scaled(6), Some(3_750_000));
    }

    #[test]
    fn usd_formatting() {
        assert_eq!(format_usd(1_500_000_000), "1.50");
        assert_eq!(format_usd(435_000), "0.000435");
        assert_eq!(format_usd(0), "0.00");
        assert_eq!(format_usd(-20_000_000), "-0.02");
        assert_eq!(format_usd(1), "0.000000001");
    }

    #[test]
    fn shipped_table_parses_and_prices_every_kind() {
        let p = Prices::shipped().unwrap();
        let sonnet = p.price("anthropic/claude-sonnet-4-5").0;
        assert_eq!(
            sonnet,
            Price {
                input: 3_000_000,
                output: 15_000_000,
                cached_input: 300_000,
                cache_write: 3_750_000,
                web_search: 10_000_000,
            }
        );
        // 1,000,000 prompt tokens: 100,000 read, 200,000 written, the rest plain.
        let t = Tokens {
            prompt: 1_000_000,
            completion: 100_000,
            cached: 100_000,
            cache_write: 200_000,
            web_searches: 0,
        };
        // 0.7 × 3 + 0.1 × 0.30 + 0.2 × 3.75 + 0.1 × 15 = 2.1 + 0.03 + 0.75 + 1.5
        assert_eq!(
            p.cost("anthropic/claude-sonnet-4-5", &t),
            (4_380_000_000, Priced::Listed)
        );
        // Unlisted: the table's highest of each kind (sonnet's, but cached
        // input at gpt-4o's $1.25): 0.1 × 1.25 instead of 0.1 × 0.30.
        assert_eq!(p.cost("x/unknown", &t).1, Priced::Unlisted);
        assert_eq!(p.cost("x/unknown", &t).0, 4_475_000_000);
        assert_eq!(p.highest_for(&["openai/*".into()]), 10_000_000);
        assert_eq!(p.highest_for(&["nobody/*".into()]), 15_000_000);
    }

    #[test]
    fn costs_round_up_once() {
        let p = Price {
            input: 150_000,
            output: 600_000,
            cached_input: 75_000,
            cache_write: 150_000,
            web_search: 10_000_000,
        };
        // 1 token at $0.15/M = 150 nano-dollars; 1 at $0.000001/M rounds up to 1.
        let one = Tokens {
            prompt: 1,
            ..Tokens::default()
        };
        assert_eq!(cost_nano(&p, &one), 150);
        let tiny = Price {
            input: 1,
            ..Price::default()
        };
        assert_eq!(cost_nano(&tiny, &one), 1);
        // Cached beyond prompt is clamped to the prompt.
        let odd = Tokens {
            prompt: 10,
            cached: 50,
            ..Tokens::default()
        };
        assert_eq!(cost_nano(&p, &odd), 750_000u64.div_ceil(1000) as i64);
        assert_eq!(reserve_nano(1000, 15_000_000), 15_000_000);
        // Three web searches at $10 per 1,000: 3 cents, beside the tokens.
        let searched = Tokens {
            prompt: 1,
            web_searches: 3,
            ..Tokens::default()
        };
        assert_eq!(cost_nano(&p, &searched), 150 + 30_000_000);
    }

    #[test]
    fn bad_prices_are_named() {
        let e = Prices::from_yaml("version: 1\nmodels:\n  a/b: {input: -1, output: 1}\n");
        assert_eq!(
            e.unwrap_err(),
            "price of \"a/b\": input must be a non-negative decimal with at most 6 places"
        );
        assert!(Prices::from_yaml("version: 1\nmodels:\n  a/b: {input: 1}\n").is_err());
    }
}
