//! The admin API's operations on keys: each reads the key store, checks
//! the change as the policy file would, writes it only if nobody wrote the
//! key meanwhile (else reads again, up to [`TRIES`] times), applies it to
//! this instance, and answers the key as [`KeyView`] shows it. A new or
//! rotated secret is in the answer once and stored nowhere (its SHA-256
//! is).

use std::collections::BTreeMap;

use axum::http::StatusCode;
use axum::response::Response;
use rand::distr::{Alphanumeric, SampleString};
use serde::Serialize;

use super::input::{
    merge_patch, name, parse, refuse_null, rfc3339, time_ms, CreateKey, Editable, ListQuery,
    Rotate, EDITABLE,
};
use super::usage::{self, Usage};
use super::{json, AdminState, ApiError};
use crate::budget::RawBudgets;
use crate::keystore::{KeyStore, KeyStoreError, Previous, Record};
use crate::mcp_rules::RawMcp;
use crate::policy::{check_key_fields, hash_key, raw_limits, Key, KeyFields, Limits, Policy};
use crate::storage::Store;

/// Writes tried before a 409 when others keep writing the same key.
pub const TRIES: usize = 3;

/// A key as the admin API shows it (never a secret, nor its hash).
#[derive(Debug, Clone, Serialize)]
pub struct KeyView {
    pub id: String,
    pub tenant: String,
    /// `api`, or `policy_file` (read-only here).
    pub source: &'static str,
    /// `active`, `expired` or `revoked`.
    pub state: &'static str,
    /// In force on this instance (false: the policy file now contradicts
    /// it, see the log).
    pub applied: bool,
    pub models: Vec<String>,
    pub limits: Limits,
    pub model_limits: BTreeMap<String, Limits>,
    /// As given (policy-file keys: null; their budgets show in `usage`).
    pub budgets: Option<RawBudgets>,
    /// The key's own setting (null: the tenant's applies).
    pub cache_breakpoints: Option<bool>,
    /// The key's MCP servers, tools and calls limits (policy-file keys:
    /// null; a key without them uses no MCP server).
    pub mcp: Option<RawMcp>,
    pub expires_at: Option<String>,
    pub revoked_at: Option<String>,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
    /// Until when each secret a rotation replaced still works.
    pub previous_secrets_valid_until: Vec<String>,
    /// Spend and what is left of each of the key's own limits and budgets
    /// (null when not read: `usage=false`, or the store failed).
    pub usage: Option<Usage>,
    pub usage_error: Option<String>,
}

/// A key with its secret: the answer of create and rotate, given once.
#[derive(Serialize)]
struct WithSecret {
    key: KeyView,
    secret: String,
}

fn unavailable(e: &KeyStoreError) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "store_unavailable",
        format!("The key store (Redis) is unavailable: {e}."),
    )
}

fn not_found(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "key_not_found",
        format!("No key {}.", crate::decision::echo(id)),
    )
}

fn read_only(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "key_read_only",
        format!(
            "Key {id} is defined in the policy file; the admin API cannot change it. Edit the policy file, or make a key through the API."
        ),
    )
}

fn ok<T: Serialize>(status: StatusCode, body: &T) -> Result<Response, ApiError> {
    Ok(json(status, serde_json::to_vec(body).unwrap_or_default()))
}

fn state_of(revoked: Option<i64>, expires: Option<i64>, now: i64) -> &'static str {
    if revoked.is_some() {
        "revoked"
    } else if expires.is_some_and(|t| now >= t) {
        "expired"
    } else {
        "active"
    }
}

/// A policy-file key as the API shows it.
fn file_view(key: &Key) -> KeyView {
    KeyView {
        id: key.id.clone(),
        tenant: key.tenant.clone(),
        source: "policy_file",
        state: "active",
        applied: true,
        models: key.models.clone(),
        limits: raw_limits(&key.limits, key.max_concurrent),
        model_limits: key
            .model_limits
            .iter()
            .map(|(m, l)| (m.clone(), raw_limits(l, None)))
            .collect(),
        budgets: None,
        cache_breakpoints: None,
        mcp: None,
        expires_at: None,
        revoked_at: None,
        created_at: None,
        updated_at: None,
        previous_secrets_valid_until: Vec::new(),
        usage: None,
        usage_error: None,
    }
}

/// An API key's record as the API shows it.
fn record_view(r: &Record, policy: &Policy, now: i64) -> KeyView {
    KeyView {
        id: r.id.clone(),
        tenant: r.tenant.clone(),
        source: "api",
        state: state_of(r.revoked_at_ms, r.expires_at_ms, now),
        applied: policy.key_by_id(&r.id).is_some_and(|k| k.from_api),
        models: r.fields.models.clone(),
        limits: r.fields.limits.clone(),
        model_limits: r.fields.model_limits.clone(),
        budgets: r.fields.budgets.clone(),
        cache_breakpoints: r.fields.cache_breakpoints,
        mcp: r.fields.mcp.clone(),
        expires_at: r.expires_at_ms.map(rfc3339),
        revoked_at: r.revoked_at_ms.map(rfc3339),
        created_at: Some(rfc3339(r.created_at_ms)),
        updated_at: Some(rfc3339(r.updated_at_ms)),
        previous_secrets_valid_until: r
            .previous
            .iter()
            .filter(|p| p.valid_until_ms > now)
            .map(|p| rfc3339(p.valid_until_ms))
            .collect(),
        usage: None,
        usage_error: None,
    }
}

/// Fill in `view.usage` from the store (the key as this instance's policy
/// holds it; nothing when it is not applied).
async fn with_usage<K: KeyStore, S: Store>(
    state: &AdminState<K, S>,
    policy: &Policy,
    mut view: KeyView,
) -> KeyView {
    let Some(key) = policy.key_by_id(&view.id).filter(|_| view.applied) else {
        return view;
    };
    match usage::read(state.authz.store(), policy, key, state.authz.now_ms()).await {
        Ok(u) => view.usage = Some(u),
        Err(e) => view.usage_error = Some(format!("the store could not be read: {e}")),
    }
    view
}

/// The stored record of API key `id`, with its stored JSON; 404 or 409
/// (a policy-file key) otherwise.
async fn stored<K: KeyStore, S: Store>(
    state: &AdminState<K, S>,
    id: &str,
) -> Result<(String, Record), ApiError> {
    if state
        .authz
        .policy()
        .key_by_id(id)
        .is_some_and(|k| !k.from_api)
    {
        return Err(read_only(id));
    }
    let Some(json) = state
        .sync
        .store()
        .get(id)
        .await
        .map_err(|e| unavailable(&e))?
    else {
        return Err(not_found(id));
    };
    let record = serde_json::from_str(&json).map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "record_unreadable",
            format!("The stored record of key {id} is unreadable: {e}."),
        )
    })?;
    Ok((json, record))
}

/// Change API key `id` with `change` (which may refuse: its error is the
/// answer) and write it if nobody wrote it meanwhile; the record written.
async fn change<K: KeyStore, S: Store>(
    state: &AdminState<K, S>,
    id: &str,
    change: impl Fn(&mut Record, i64) -> Result<(), ApiError>,
) -> Result<Record, ApiError> {
    for _ in 0..TRIES {
        let (json, mut record) = stored(state, id).await?;
        let now = state.authz.now_ms();
        change(&mut record, now)?;
        record.updated_at_ms = now;
        match state
            .sync
            .store()
            .put(id, Some(&json), &record.to_json())
            .await
        {
            Ok(_) => {
                // This instance applies its own write before answering.
                let _ = state.sync.poll().await;
                return Ok(record);
            }
            Err(KeyStoreError::Conflict) => continue,
            Err(e) => return Err(unavailable(&e)),
        }
    }
    Err(ApiError::new(
        StatusCode::CONFLICT,
        "key_changed",
        format!("Key {id} kept changing while this change was written; read it and try again."),
    ))
}

/// Refuse a change to a revoked key.
fn not_revoked(r: &Record) -> Result<(), ApiError> {
    match r.revoked_at_ms {
        Some(_) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "key_revoked",
            format!(
                "Key {} is revoked; a revoked key cannot be changed or rotated.",
                r.id
            ),
        )),
        None => Ok(()),
    }
}

/// `expires_at` as unix ms: in the future, or the 400.
fn expiry(s: Option<&str>, now: i64) -> Result<Option<i64>, ApiError> {
    let Some(s) = s else { return Ok(None) };
    let t = time_ms("expires_at", s)?;
    if t <= now {
        return Err(ApiError::invalid(
            "expires_at",
            "expires_at is not in the future; revoke the key to stop it now.",
        ));
    }
    Ok(Some(t))
}

fn check_fields(id: &str, f: &KeyFields) -> Result<(), ApiError> {
    check_key_fields(&format!("key {id:?}"), f)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_key", format!("{e}.")))
}

/// The 409 of a create whose id is taken, and `why`.
fn taken(id: &str, why: &str) -> ApiError {
    ApiError {
        param: Some("id".into()),
        ..ApiError::new(
            StatusCode::CONFLICT,
            "key_exists",
            format!("Key id {id} is taken: {why}."),
        )
    }
}

pub async fn create<K: KeyStore, S: Store>(
    state: &AdminState<K, S>,
    body: &[u8],
) -> Result<Response, ApiError> {
    let req = CreateKey::parse(body)?;
    name("tenant", &req.tenant)?;
    let id = match &req.id {
        Some(id) => id.clone(),
        None => format!(
            "key-{}",
            Alphanumeric
                .sample_string(&mut rand::rng(), 12)
                .to_lowercase()
        ),
    };
    name("id", &id)?;
    let policy = state.authz.policy();
    if policy.tenant(&req.tenant).is_none() {
        return Err(ApiError {
            param: Some("tenant".into()),
            ..ApiError::new(
                StatusCode::BAD_REQUEST,
                "unknown_tenant",
                format!(
                    "Tenant {} is not in the policy file; tenants are defined there.",
                    crate::decision::echo(&req.tenant)
                ),
            )
        });
    }
    if let Some(k) = policy.key_by_id(&id) {
        let why = if k.from_api {
            "a key made through the admin API has it (revoked keys keep their id)"
        } else {
            "the policy file defines a key with it"
        };
        return Err(taken(&id, why));
    }
    let fields = req.grants.fields();
    check_fields(&id, &fields)?;
    let now = state.authz.now_ms();
    let secret = crate::keygen::new_key();
    let record = Record {
        id: id.clone(),
        tenant: req.tenant.clone(),
        sha256: hash_key(&secret),
        previous: Vec::new(),
        fields,
        expires_at_ms: expiry(req.grants.expires_at.as_deref(), now)?,
        revoked_at_ms: None,
        created_at_ms: now,
        updated_at_ms: now,
    };
    match state.sync.store().put(&id, None, &record.to_json()).await {
        Ok(_) => {}
        Err(KeyStoreError::Conflict) => {
            return Err(taken(&id, "a key made through the admin API has it"))
        }
        Err(e) => return Err(unavailable(&e)),
    }
    let _ = state.sync.poll().await;
    let key = shown(state, &record).await;
    ok(StatusCode::CREATED, &WithSecret { key, secret })
}

pub async fn get<K: KeyStore, S: Store>(
    state: &AdminState<K, S>,
    id: &str,
) -> Result<Response, ApiError> {
    let policy = state.authz.policy();
    let view = match policy.key_by_id(id).filter(|k| !k.from_api) {
        Some(k) => file_view(k),
        None => {
            let (_, r) = stored(state, id).await?;
            record_view(&r, &policy, state.authz.now_ms())
        }
    };
    ok(StatusCode::OK, &with_usage(state, &policy, view).await)
}

#[derive(Serialize)]
struct Page {
    data: Vec<KeyView>,
    has_more: bool,
    /// Pass as `after` for the next page.
    next_after: Option<String>,
}

pub async fn list<K: KeyStore, S: Store>(
    state: &AdminState<K, S>,
    query: &str,
) -> Result<Response, ApiError> {
    let q = ListQuery::parse(query)?;
    // Fresh: what any instance wrote until now.
    let _ = state.sync.poll().await;
    let policy = state.authz.policy();
    let now = state.authz.now_ms();
    let mut all: BTreeMap<String, KeyView> = state
        .sync
        .records()
        .await
        .values()
        .map(|r| (r.id.clone(), record_view(r, &policy, now)))
        .collect();
    // The file's keys win a shared id, as in the policy.
    for k in policy.keys().filter(|k| !k.from_api) {
        all.insert(k.id.clone(), file_view(k));
    }
    let mut views = all.into_values().filter(|v| {
        q.tenant.as_ref().is_none_or(|t| &v.tenant == t)
            && q.after.as_ref().is_none_or(|a| v.id.as_str() > a.as_str())
    });
    let mut data = Vec::new();
    for v in views.by_ref().take(q.limit) {
        data.push(if q.usage {
            with_usage(state, &policy, v).await
        } else {
            v
        });
    }
    let has_more = views.next().is_some();
    let next_after = if has_more {
        data.last().map(|v| v.id.clone())
    } else {
        None
    };
    ok(
        StatusCode::OK,
        &Page {
            data,
            has_more,
            next_after,
        },
    )
}

pub async fn update<K: KeyStore, S: Store>(
    state: &AdminState<K, S>,
    id: &str,
    body: &[u8],
) -> Result<Response, ApiError> {
    let patch: serde_json::Value = parse(body)?;
    let Some(fields) = patch.as_object() else {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_body",
            "The body must be a JSON object (a merge patch of the key).",
        ));
    };
    // A null field is removed by the merge; `models` removed would mean any
    // model, so its null is refused (admin.yaml: not nullable).
    refuse_null(fields, ["models"])?;
    if let Some(f) = fields.keys().find(|f| !EDITABLE.contains(&f.as_str())) {
        return Err(ApiError::invalid(
            "body",
            format!(
                "Field {} cannot be changed; an update changes {}.",
                crate::decision::echo(f),
                EDITABLE.join(", ")
            ),
        ));
    }
    let record = change(state, id, |r, now| {
        not_revoked(r)?;
        let mut doc = serde_json::json!({
            "models": r.fields.models,
            "limits": r.fields.limits,
            "model_limits": r.fields.model_limits,
            "budgets": r.fields.budgets,
            "cache_breakpoints": r.fields.cache_breakpoints,
            "mcp": r.fields.mcp,
            "expires_at": r.expires_at_ms.map(rfc3339),
        });
        merge_patch(&mut doc, &patch);
        let e = Editable::from_value(doc)?;
        let f = e.fields();
        check_fields(id, &f)?;
        // An unchanged expiry may be in the past already: keep it.
        let unchanged = e.expires_at.is_some() && e.expires_at == r.expires_at_ms.map(rfc3339);
        if !unchanged {
            r.expires_at_ms = expiry(e.expires_at.as_deref(), now)?;
        }
        r.fields = f;
        Ok(())
    })
    .await?;
    respond(state, &record).await
}

/// A key as written, with its usage.
async fn shown<K: KeyStore, S: Store>(state: &AdminState<K, S>, record: &Record) -> KeyView {
    let policy = state.authz.policy();
    let view = record_view(record, &policy, state.authz.now_ms());
    with_usage(state, &policy, view).await
}

/// The answer of a change: the key as written, with its usage.
async fn respond<K: KeyStore, S: Store>(
    state: &AdminState<K, S>,
    record: &Record,
) -> Result<Response, ApiError> {
    ok(StatusCode::OK, &shown(state, record).await)
}

pub async fn revoke<K: KeyStore, S: Store>(
    state: &AdminState<K, S>,
    id: &str,
) -> Result<Response, ApiError> {
    let record = change(state, id, |r, now| {
        // Revoking twice keeps the first time.
        r.revoked_at_ms.get_or_insert(now);
        Ok(())
    })
    .await?;
    respond(state, &record).await
}

pub async fn rotate<K: KeyStore, S: Store>(
    state: &AdminState<K, S>,
    id: &str,
    body: &[u8],
) -> Result<Response, ApiError> {
    let req: Rotate = if body.iter().all(u8::is_ascii_whitespace) {
        Rotate::default()
    } else {
        parse(body)?
    };
    let grace_ms = req.grace_seconds()? as i64 * 1000;
    let secret = crate::keygen::new_key();
    let hash = hash_key(&secret);
    let record = change(state, id, |r, now| {
        not_revoked(r)?;
        // Secrets whose grace is over are forgotten now (401
        // invalid_api_key); the one replaced is kept even with no grace,
        // so its clients hear it was rotated (401 key_expired).
        r.previous.retain(|p| p.valid_until_ms > now);
        r.previous.push(Previous {
            sha256: r.sha256.clone(),
            valid_until_ms: now + grace_ms,
        });
        r.sha256 = hash.clone();
        Ok(())
    })
    .await?;
    let key = shown(state, &record).await;
    ok(StatusCode::OK, &WithSecret { key, secret })
}
