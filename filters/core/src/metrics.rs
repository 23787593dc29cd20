//! The filter's per-request metrics and the request facts it exposes to
//! Envoy's access log and tracer.
//!
//! Metrics are Envoy stats named
//! `tollgate.tenant.<t>.key.<k>.provider.<p>.model.<m>.<metric>`; the
//! `stats_tags` of `envoy.yaml` turn the fragments into Prometheus labels.
//! Every name of one (tenant, key id, provider, model) combination is
//! defined once per worker and its ids are cached in a [`Series`], so a
//! request records by id and never formats a metric name. Label values come
//! only from the policy (tenant and key id, set by authz-service) and the
//! config (provider and model); anything that is not a valid name becomes
//! `other`, and past [`MAX_SERIES`] combinations per worker new tenants and
//! keys are counted as `other` too, so cardinality stays bounded.

use std::collections::HashMap;
use std::rc::Rc;

use crate::host::{Host, MetricKind};
use crate::plan::metric_safe;

/// Combinations (tenant, key, provider, model) one worker defines metrics
/// for; later ones are counted under tenant and key `other`.
pub const MAX_SERIES: usize = 10_000;

/// The label value of anything outside the name rules (or missing).
pub const OTHER: &str = "other";

/// Why a routed request failed, the `tollgate_error_class` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Envoy's own reply (connect failure, timeout, overflow).
    Gateway,
    /// No answer at all (the client went away, a fan-out call failed).
    NoResponse,
    /// The provider answered 429.
    RateLimited,
    /// Another 4xx from the provider.
    Upstream4xx,
    /// A 5xx from the provider.
    Upstream5xx,
}

impl ErrorClass {
    pub const ALL: [ErrorClass; 5] = [
        ErrorClass::Gateway,
        ErrorClass::NoResponse,
        ErrorClass::RateLimited,
        ErrorClass::Upstream4xx,
        ErrorClass::Upstream5xx,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Gateway => "gateway",
            ErrorClass::NoResponse => "no_response",
            ErrorClass::RateLimited => "rate_limited",
            ErrorClass::Upstream4xx => "upstream_4xx",
            ErrorClass::Upstream5xx => "upstream_5xx",
        }
    }

    /// The class of an answer: `status` 0 when none came; `envoy_reply`
    /// when Envoy answered itself. `None` for a success.
    pub fn of(status: u16, envoy_reply: bool) -> Option<ErrorClass> {
        match status {
            _ if envoy_reply => Some(ErrorClass::Gateway),
            0 => Some(ErrorClass::NoResponse),
            429 => Some(ErrorClass::RateLimited),
            400..=499 => Some(ErrorClass::Upstream4xx),
            500.. => Some(ErrorClass::Upstream5xx),
            _ => None,
        }
    }
}

/// The metric ids of one (tenant, key, provider, model) combination
/// (`None` where the host refused to define one).
#[derive(Debug)]
pub struct Series {
    pub requests: Option<u32>,
    pub prompt_tokens: Option<u32>,
    pub completion_tokens: Option<u32>,
    pub cached_tokens: Option<u32>,
    pub upstream_latency_ms: Option<u32>,
    pub ttft_ms: Option<u32>,
    pub tokens_per_second: Option<u32>,
    /// Attempts after the first (Envoy's retries on another key).
    pub retries: Option<u32>,
    /// Requests an alias's fallback served.
    pub fallbacks: Option<u32>,
    errors: [Option<u32>; 5],
}

impl Series {
    fn define(h: &mut dyn Host, prefix: &str) -> Series {
        let mut def = |kind, what: &str| h.define_metric(kind, &format!("{prefix}.{what}"));
        use MetricKind::{Counter, Histogram};
        Series {
            requests: def(Counter, "requests"),
            prompt_tokens: def(Counter, "prompt_tokens"),
            completion_tokens: def(Counter, "completion_tokens"),
            cached_tokens: def(Counter, "cached_tokens"),
            upstream_latency_ms: def(Histogram, "upstream_latency_ms"),
            ttft_ms: def(Histogram, "ttft_ms"),
            tokens_per_second: def(Histogram, "tokens_per_second"),
            retries: def(Counter, "retries"),
            fallbacks: def(Counter, "fallbacks"),
            errors: ErrorClass::ALL.map(|c| def(Counter, &format!("errors.{}", c.as_str()))),
        }
    }

    pub fn error(&self, class: ErrorClass) -> Option<u32> {
        self.errors[class as usize]
    }
}

/// Adds `value` to a counter, or records it in a histogram.
pub fn record(h: &mut dyn Host, kind: MetricKind, id: Option<u32>, value: u64) {
    // Adding 0 to a counter changes nothing: no host call.
    if kind == MetricKind::Counter && value == 0 {
        return;
    }
    if let Some(id) = id {
        h.record_metric(kind, id, value);
    }
}

/// A tenant or key id as a label value: itself if it is a valid name
/// ([`tollgate_wire::valid_name`]), else `other`.
pub fn label(v: Option<&str>) -> &str {
    match v {
        Some(s) if tollgate_wire::valid_name(s) => s,
        _ => OTHER,
    }
}

/// One worker's cache of [`Series`].
#[derive(Debug, Default)]
pub struct Metrics {
    series: HashMap<SeriesKey, Rc<Series>>,
    /// The series found last: most requests of a worker repeat the one
    /// before, and comparing borrowed labels spares the key's three
    /// allocations and its hash.
    last: Option<(SeriesKey, Rc<Series>)>,
}

/// (tenant label, key label, provider index, model).
type SeriesKey = (String, String, usize, String);

impl Metrics {
    /// The series of a request, defined on first use. `provider` is the
    /// provider's index in the config, `provider_name` its name.
    pub fn series(
        &mut self,
        h: &mut dyn Host,
        tenant: Option<&str>,
        key_id: Option<&str>,
        provider: usize,
        provider_name: &str,
        model: &str,
    ) -> Rc<Series> {
        let (tenant, key_id) = (label(tenant), label(key_id));
        if let Some((k, s)) = &self.last {
            if k.0 == tenant && k.1 == key_id && k.2 == provider && k.3 == model {
                return Rc::clone(s);
            }
        }
        let s = self.find_or_define(h, tenant, key_id, provider, provider_name, model);
        self.last = Some((
            (
                tenant.to_string(),
                key_id.to_string(),
                provider,
                model.to_string(),
            ),
            Rc::clone(&s),
        ));
        s
    }

    fn find_or_define(
        &mut self,
        h: &mut dyn Host,
        tenant: &str,
        key_id: &str,
        provider: usize,
        provider_name: &str,
        model: &str,
    ) -> Rc<Series> {
        let mut k = (
            tenant.to_string(),
            key_id.to_string(),
            provider,
            model.to_string(),
        );
        if let Some(s) = self.series.get(&k) {
            return Rc::clone(s);
        }
        if self.series.len() >= MAX_SERIES {
            k.0 = OTHER.to_string();
            k.1 = OTHER.to_string();
            if let Some(s) = self.series.get(&k) {
                return Rc::clone(s);
            }
        }
        let prefix = format!(
            "tollgate.tenant.{}.key.{}.provider.{}.model.{}",
            metric_safe(&k.0),
            metric_safe(&k.1),
            metric_safe(provider_name),
            metric_safe(&k.3)
        );
        let s = Rc::new(Series::define(h, &prefix));
        self.series.insert(k, Rc::clone(&s));
        s
    }

    pub fn len(&self) -> usize {
        self.series.len()
    }

    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }
}

/// Generation speed: output tokens per second over `ms` milliseconds.
pub fn tokens_per_second(completion_tokens: u64, ms: u64) -> u64 {
    completion_tokens.saturating_mul(1000) / ms.max(1)
}

/// Envoy filter state (`wasm.<name>`) the filter sets for the access log
/// and the tracer's custom tags (`%FILTER_STATE(wasm.<name>:PLAIN)%`).
/// Values are policy names, config names and numbers: never a secret.
pub mod property {
    pub const TENANT: &str = "tollgate.tenant";
    pub const KEY_ID: &str = "tollgate.key_id";
    pub const PROVIDER: &str = "tollgate.provider";
    pub const MODEL: &str = "tollgate.model";
    /// `chat` or `embeddings` (GenAI's `gen_ai.operation.name`).
    pub const OPERATION: &str = "tollgate.operation";
    pub const INPUT_TOKENS: &str = "tollgate.input_tokens";
    pub const OUTPUT_TOKENS: &str = "tollgate.output_tokens";
    pub const CACHED_TOKENS: &str = "tollgate.cached_tokens";
    /// The hash of the request's session (16 hex digits,
    /// [`crate::session`]), never the client's raw id; unset without one.
    pub const SESSION: &str = "tollgate.session";
    /// `anthropic`, set only on the Messages routes: once the request is
    /// routed (`:path` rewritten for the provider), Envoy's own replies
    /// (`local_reply_config`) read it to choose Anthropic's error shape.
    pub const API: &str = "tollgate.api";
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::fake::FakeHost;

    #[test]
    fn labels_outside_the_name_rules_are_other() {
        assert_eq!(label(Some("acme")), "acme");
        assert_eq!(label(Some("team.a-1_b")), "team.a-1_b");
        assert_eq!(label(Some("a b")), OTHER);
        assert_eq!(label(Some("x{y}")), OTHER);
        assert_eq!(label(Some("")), OTHER);
        assert_eq!(label(None), OTHER);
    }

    #[test]
    fn a_series_is_defined_once_and_names_every_label() {
        let mut h = FakeHost::default();
        let mut m = Metrics::default();
        let a = m.series(&mut h, Some("acme"), Some("k1"), 0, "openai", "gpt-4o");
        let defined = h.metric_names.len();
        let b = m.series(&mut h, Some("acme"), Some("k1"), 0, "openai", "gpt-4o");
        assert_eq!(h.metric_names.len(), defined, "no new definitions");
        assert!(Rc::ptr_eq(&a, &b));
        assert!(h
            .metric_names
            .contains(&"tollgate.tenant.acme.key.k1.provider.openai.model.gpt-4o.requests".into()));
        assert!(h.metric_names.contains(
            &"tollgate.tenant.acme.key.k1.provider.openai.model.gpt-4o.errors.upstream_5xx".into()
        ));
        // Dots of a name become `_` (they separate the name's fragments).
        m.series(&mut h, Some("t.1"), None, 1, "bedrock", "amazon.titan:0");
        assert!(h.metric_names.contains(
            &"tollgate.tenant.t_1.key.other.provider.bedrock.model.amazon_titan_0.requests".into()
        ));
    }

    #[test]
    fn past_the_cap_new_tenants_and_keys_are_other() {
        let mut h = FakeHost::default();
        let mut m = Metrics::default();
        for i in 0..MAX_SERIES {
            m.series(&mut h, Some(&format!("t{i}")), Some("k"), 0, "openai", "m");
        }
        let s = m.series(&mut h, Some("late"), Some("k"), 0, "openai", "m");
        assert_eq!(m.len(), MAX_SERIES + 1);
        assert!(h
            .metric_names
            .contains(&"tollgate.tenant.other.key.other.provider.openai.model.m.requests".into()));
        let again = m.series(&mut h, Some("later"), Some("k2"), 0, "openai", "m");
        assert!(Rc::ptr_eq(&s, &again));
        assert_eq!(m.len(), MAX_SERIES + 1);
    }

    #[test]
    fn error_classes_and_speed() {
        assert_eq!(ErrorClass::of(200, false), None);
        assert_eq!(ErrorClass::of(200, true), Some(ErrorClass::Gateway));
        assert_eq!(ErrorClass::of(0, false), Some(ErrorClass::NoResponse));
        assert_eq!(ErrorClass::of(429, false), Some(ErrorClass::RateLimited));
        assert_eq!(ErrorClass::of(404, false), Some(ErrorClass::Upstream4xx));
        assert_eq!(ErrorClass::of(503, false), Some(ErrorClass::Upstream5xx));
        assert_eq!(tokens_per_second(50, 500), 100);
        assert_eq!(tokens_per_second(7, 0), 7000);
    }
}
