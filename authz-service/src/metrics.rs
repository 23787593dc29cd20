//! Prometheus metrics, one registry per service instance (so tests can run
//! several instances in one process).

use prometheus::{
    CounterVec, Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, Opts, Registry, TextEncoder,
};

pub struct Metrics {
    registry: Registry,
    /// `tollgate_authz_decisions_total{result, reason}`.
    pub decisions: IntCounterVec,
    /// `tollgate_authz_check_duration_seconds`.
    pub check_duration: Histogram,
    /// `tollgate_authz_redis_errors_total{op, error}`.
    pub redis_errors: IntCounterVec,
    /// `tollgate_authz_redis_duration_seconds{op}`.
    pub redis_duration: HistogramVec,
    /// `tollgate_authz_fail_open_total`: requests admitted because Redis failed.
    pub fail_open: IntCounter,
    /// `tollgate_authz_usage_reports_total{result}`.
    pub usage_reports: IntCounterVec,
    /// `tollgate_authz_usage_tokens_total{tenant}`.
    pub usage_tokens: CounterVec,
    /// `tollgate_authz_policy_reloads_total{result}`.
    pub policy_reloads: IntCounterVec,
    /// `tollgate_authz_policy_keys`.
    pub policy_keys: IntGauge,
    /// `tollgate_authz_checks_total`: every Check decided.
    pub checks: IntCounter,
    /// `tollgate_authz_redis_calls_total{op}`: every Redis round trip.
    pub redis_calls: IntCounterVec,
    /// `tollgate_authz_usage_queued`: usage debits waiting for Redis.
    pub usage_queued: IntGauge,
    /// `tollgate_authz_usage_dropped_total`: queued debits dropped (oldest
    /// first) because the queue was full.
    pub usage_dropped: IntCounter,
    /// Money spent (settled usage × prices), by tenant, key and model.
    pub spend_usd: CounterVec,
    /// Checks admitted past a budget's soft cap.
    pub budget_soft_cap: IntCounterVec,
    /// `tollgate_authz_denials_total{tenant, limit, period, scope}`: 429s by
    /// the limit that refused them; every label value comes from the policy.
    pub denials: IntCounterVec,
    /// `tollgate_authz_mcp_refusals_total{tenant, key, server, tool, reason}`:
    /// MCP requests refused before the server (`tool` is `-` for other
    /// methods; a name the policy does not grant is never a label value).
    pub mcp_refusals: IntCounterVec,
    /// `tollgate_authz_top_ups_total{result}`: reservations the filter
    /// asked to top up (`added`, `covered`, `refused`, `error`).
    pub top_ups: IntCounterVec,
    /// `tollgate_authz_slots_total{op}`: concurrency slots `acquired`,
    /// `refused`, `released`, `renewed`, `expired` (gone when their release
    /// or renewal came).
    pub slots: IntCounterVec,
    /// `tollgate_authz_key_syncs_total{result}`: polls of the admin API's
    /// keys that applied a change (`applied`) or failed (`failed`).
    pub key_syncs: IntCounterVec,
    /// `tollgate_authz_admin_requests_total{route, status}`: admin API
    /// calls (route names, never a key id or secret).
    pub admin_requests: IntCounterVec,
}

const LATENCY_BUCKETS: &[f64] = &[
    0.000005, 0.00001, 0.000025, 0.00005, 0.000075, 0.0001, 0.00015, 0.0002, 0.0003, 0.0005, 0.001,
    0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
];

impl Metrics {
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new();
        let decisions = IntCounterVec::new(
            Opts::new(
                "tollgate_authz_decisions_total",
                "Check decisions by result and reason",
            ),
            &["result", "reason"],
        )?;
        let check_duration = Histogram::with_opts(
            HistogramOpts::new(
                "tollgate_authz_check_duration_seconds",
                "Time to answer one Check",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
        )?;
        let redis_errors = IntCounterVec::new(
            Opts::new(
                "tollgate_authz_redis_errors_total",
                "Failed Redis calls by operation and error",
            ),
            &["op", "error"],
        )?;
        let redis_duration = HistogramVec::new(
            HistogramOpts::new(
                "tollgate_authz_redis_duration_seconds",
                "Redis call latency by operation",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &["op"],
        )?;
        let fail_open = IntCounter::new(
            "tollgate_authz_fail_open_total",
            "Requests admitted without a rate-limit decision because Redis failed",
        )?;
        let usage_reports = IntCounterVec::new(
            Opts::new(
                "tollgate_authz_usage_reports_total",
                "POST /v1/usage by result",
            ),
            &["result"],
        )?;
        let usage_tokens = CounterVec::new(
            Opts::new(
                "tollgate_authz_usage_tokens_total",
                "Tokens debited from usage reports (settled in the store), by tenant",
            ),
            &["tenant"],
        )?;
        let policy_reloads = IntCounterVec::new(
            Opts::new(
                "tollgate_authz_policy_reloads_total",
                "Policy reloads by result",
            ),
            &["result"],
        )?;
        let policy_keys = IntGauge::new(
            "tollgate_authz_policy_keys",
            "Virtual keys in the active policy",
        )?;
        let checks = IntCounter::new("tollgate_authz_checks_total", "Checks decided")?;
        let redis_calls = IntCounterVec::new(
            Opts::new(
                "tollgate_authz_redis_calls_total",
                "Redis round trips by operation",
            ),
            &["op"],
        )?;
        let usage_queued = IntGauge::new(
            "tollgate_authz_usage_queued",
            "Usage debits queued while Redis is unreachable",
        )?;
        let usage_dropped = IntCounter::new(
            "tollgate_authz_usage_dropped_total",
            "Queued usage debits dropped, oldest first, because the queue was full",
        )?;
        let spend_usd = CounterVec::new(
            Opts::new(
                "tollgate_authz_spend_usd_total",
                "Money spent (settled usage priced by the price table), US dollars",
            ),
            &["tenant", "key", "model"],
        )?;
        let budget_soft_cap = IntCounterVec::new(
            Opts::new(
                "tollgate_authz_budget_soft_cap_total",
                "Requests admitted past a money budget's soft cap",
            ),
            &["tenant", "scope", "period"],
        )?;
        registry.register(Box::new(spend_usd.clone()))?;
        registry.register(Box::new(budget_soft_cap.clone()))?;
        let denials = IntCounterVec::new(
            Opts::new(
                "tollgate_authz_denials_total",
                "Requests refused by a rate limit (429), by tenant and the limit that refused them",
            ),
            &["tenant", "limit", "period", "scope"],
        )?;
        registry.register(Box::new(denials.clone()))?;
        let mcp_refusals = IntCounterVec::new(
            Opts::new(
                "tollgate_authz_mcp_refusals_total",
                "MCP requests refused before reaching the server, by tenant, key, server, tool and reason",
            ),
            &["tenant", "key", "server", "tool", "reason"],
        )?;
        registry.register(Box::new(mcp_refusals.clone()))?;
        let top_ups = IntCounterVec::new(
            Opts::new(
                "tollgate_authz_top_ups_total",
                "Reservations topped up for a request's own output limit, by result",
            ),
            &["result"],
        )?;
        registry.register(Box::new(top_ups.clone()))?;
        let slots = IntCounterVec::new(
            Opts::new(
                "tollgate_authz_slots_total",
                "Concurrency slots by operation",
            ),
            &["op"],
        )?;
        registry.register(Box::new(slots.clone()))?;
        let key_syncs = IntCounterVec::new(
            Opts::new(
                "tollgate_authz_key_syncs_total",
                "Polls of the admin API's keys that applied a change or failed",
            ),
            &["result"],
        )?;
        let admin_requests = IntCounterVec::new(
            Opts::new(
                "tollgate_authz_admin_requests_total",
                "Admin API requests by route and status",
            ),
            &["route", "status"],
        )?;
        registry.register(Box::new(key_syncs.clone()))?;
        registry.register(Box::new(admin_requests.clone()))?;
        registry.register(Box::new(checks.clone()))?;
        registry.register(Box::new(redis_calls.clone()))?;
        registry.register(Box::new(usage_queued.clone()))?;
        registry.register(Box::new(usage_dropped.clone()))?;
        registry.register(Box::new(decisions.clone()))?;
        registry.register(Box::new(check_duration.clone()))?;
        registry.register(Box::new(redis_errors.clone()))?;
        registry.register(Box::new(redis_duration.clone()))?;
        registry.register(Box::new(fail_open.clone()))?;
        registry.register(Box::new(usage_reports.clone()))?;
        registry.register(Box::new(usage_tokens.clone()))?;
        registry.register(Box::new(policy_reloads.clone()))?;
        registry.register(Box::new(policy_keys.clone()))?;
        Ok(Metrics {
            registry,
            decisions,
            check_duration,
            redis_errors,
            redis_duration,
            fail_open,
            usage_reports,
            usage_tokens,
            policy_reloads,
            policy_keys,
            checks,
            redis_calls,
            usage_queued,
            usage_dropped,
            spend_usd,
            budget_soft_cap,
            denials,
            mcp_refusals,
            top_ups,
            slots,
            key_syncs,
            admin_requests,
        })
    }

    /// Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        if TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .is_err()
        {
            return String::new();
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}
