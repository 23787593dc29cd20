//! The buckets of a request: which limits of its key, the key's tenant and
//! the request's model apply, the storage op of each, and what a Check or a
//! usage report takes from it. A Check ([`crate::authz`]) and a usage
//! report ([`crate::usage`]) plan the same buckets.

use crate::policy::{Key, Kind, Limit, Policy};
use crate::storage::{bucket_key, BucketOp};

/// Which scope a bucket belongs to (for the 429 message).
#[derive(Clone, Copy)]
pub enum Scope {
    Key,
    Tenant,
    KeyModel,
    TenantModel,
    /// MCP tool calls of a key (`crate::mcp_rules`): bucket scope
    /// `kx:<key id>:<limit name>`.
    KeyMcp,
    /// MCP tool calls of a tenant: `tx:<limit name>`.
    TenantMcp,
}

impl Scope {
    /// Key and tenant token buckets hold reservations; per-model token
    /// buckets (known at Check time only from `x-tollgate-model`) do not.
    pub fn reserves(self) -> bool {
        matches!(self, Scope::Key | Scope::Tenant)
    }

    /// The `scope` label of `tollgate_authz_denials_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Key => "key",
            Scope::Tenant => "tenant",
            Scope::KeyModel => "key_model",
            Scope::TenantModel => "tenant_model",
            Scope::KeyMcp => "key_mcp",
            Scope::TenantMcp => "tenant_mcp",
        }
    }
}

/// One bucket of a request: its storage op, the limit it enforces and
/// whose it is.
pub struct Planned {
    pub op: BucketOp,
    pub limit: Limit,
    pub scope: Scope,
}

/// What a plan takes from each bucket.
#[derive(Clone, Copy)]
pub enum Take {
    /// A Check: 1 per request bucket, `reserve` per key or tenant token
    /// bucket, 0 (admit while positive) per per-model token bucket.
    Check { reserve: u64 },
    /// A usage report: `tokens` minus `reserved` from the buckets that held
    /// the reservation, `tokens` from the others.
    Settle { tokens: u64, reserved: u64 },
    /// A top-up of an admitted request's reservation: `extra` more from
    /// the key and tenant token buckets, nothing from the others.
    TopUp { extra: u64 },
}

/// The buckets of a request of `key` (on `model`, when known): the key's
/// own, its tenant's, then the model's limits of each, every one with what
/// `how` takes from it.
pub fn plan(policy: &Policy, key: &Key, model: Option<&str>, how: Take) -> Vec<Planned> {
    let mut out = Vec::new();
    let tenant = policy.tenant(&key.tenant);
    let mut add = |limits: &[Limit], scope_key: String, scope: Scope| {
        for l in limits {
            let take = match (how, l.kind) {
                (Take::Settle { tokens, reserved }, Kind::Tokens) if scope.reserves() => {
                    tokens as i64 - reserved as i64
                }
                (Take::Settle { tokens, .. }, Kind::Tokens) => tokens as i64,
                (Take::Settle { .. }, Kind::Requests) => continue,
                (Take::Check { .. }, Kind::Requests) => 1,
                (Take::Check { reserve }, Kind::Tokens) if scope.reserves() => reserve as i64,
                (Take::Check { .. }, Kind::Tokens) => 0,
                (Take::TopUp { extra }, Kind::Tokens) if scope.reserves() => extra as i64,
                (Take::TopUp { .. }, _) => continue,
            };
            let kp = match (l.kind, l.period) {
                (Kind::Requests, "day") => "rd",
                (Kind::Requests, _) => "rm",
                (Kind::Tokens, "day") => "td",
                (Kind::Tokens, _) => "tm",
            };
            out.push(Planned {
                op: BucketOp {
                    key: bucket_key(&key.tenant, kp, &scope_key),
                    spec: l.spec,
                    take,
                    lease: 0,
                },
                limit: *l,
                scope,
            });
        }
    };
    add(&key.limits, format!("k:{}", key.id), Scope::Key);
    if let Some(t) = tenant {
        add(&t.limits, "t".to_string(), Scope::Tenant);
    }
    if let Some(m) = model {
        if let Some(ls) = key.model_limits.get(m) {
            add(ls, format!("km:{}:{m}", key.id), Scope::KeyModel);
        }
        if let Some(ls) = tenant.and_then(|t| t.model_limits.get(m)) {
            add(ls, format!("tm:{m}"), Scope::TenantModel);
        }
    }
    out
}
