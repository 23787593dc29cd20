//! What the admin API reads: request bodies (unknown fields refused, like
//! the policy file), a JSON merge patch (RFC 7396) for updates, times in
//! RFC 3339 and the list's query string. Every error is an [`ApiError`]
//! naming the field.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{ApiError, MAX_GRACE_SECONDS};
use crate::budget::RawBudgets;
use crate::decision::{clip, ECHO_MAX_CHARS};
use crate::mcp_rules::RawMcp;
use crate::policy::{valid_policy_name, KeyFields, Limits};

/// What a key grants and its expiry: the body of a create (beside its
/// `tenant` and `id`), and the whole a patch applies to.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Editable {
    /// Absent: any model (`*`).
    #[serde(default)]
    pub models: Option<Vec<String>>,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub model_limits: BTreeMap<String, Limits>,
    #[serde(default)]
    pub budgets: Option<RawBudgets>,
    /// Absent: the tenant's `cache_breakpoints`.
    #[serde(default)]
    pub cache_breakpoints: Option<bool>,
    /// The MCP servers and tools the key may use, and its calls limits
    /// (as a policy file's key writes them); absent: none.
    #[serde(default)]
    pub mcp: Option<RawMcp>,
    /// RFC 3339; absent or null: never.
    #[serde(default)]
    pub expires_at: Option<String>,
}

impl Editable {
    /// From a JSON object's fields; `Err` is the 400.
    pub fn from_value(v: serde_json::Value) -> Result<Editable, ApiError> {
        serde_json::from_value(v).map_err(|e| invalid_body(&e))
    }

    pub fn fields(&self) -> KeyFields {
        KeyFields {
            models: self
                .models
                .clone()
                .unwrap_or_else(|| KeyFields::default().models),
            limits: self.limits.clone(),
            model_limits: self.model_limits.clone(),
            budgets: self.budgets.clone(),
            cache_breakpoints: self.cache_breakpoints,
            mcp: self.mcp.clone(),
        }
    }
}

/// The fields of a key the admin API makes and changes (an update may
/// patch only these).
pub const EDITABLE: [&str; 7] = [
    "models",
    "limits",
    "model_limits",
    "budgets",
    "cache_breakpoints",
    "mcp",
    "expires_at",
];

/// `POST /admin/keys`: a tenant, an id (generated when absent) and the
/// fields of [`Editable`].
#[derive(Debug)]
pub struct CreateKey {
    pub tenant: String,
    pub id: Option<String>,
    pub grants: Editable,
}

impl CreateKey {
    pub fn parse(body: &[u8]) -> Result<CreateKey, ApiError> {
        let v: serde_json::Value = parse(body)?;
        let serde_json::Value::Object(mut fields) = v else {
            return Err(ApiError::invalid("body", "The body must be a JSON object."));
        };
        // Every editable field but expires_at (nullable: never) has a
        // meaning when absent and none when null.
        refuse_null(&fields, EDITABLE.into_iter().filter(|f| *f != "expires_at"))?;
        let mut text = |name: &str, required: bool| match fields.remove(name) {
            Some(serde_json::Value::String(s)) => Ok(Some(s)),
            None | Some(serde_json::Value::Null) if !required => Ok(None),
            _ => Err(ApiError::invalid(name, format!("{name} must be a string."))),
        };
        let tenant = text("tenant", true)?.unwrap_or_default();
        let id = text("id", false)?;
        Ok(CreateKey {
            tenant,
            id,
            grants: Editable::from_value(serde_json::Value::Object(fields))?,
        })
    }
}

/// `Err` naming the first of `names` that `fields` sets to `null`:
/// admin.yaml gives them no `nullable` (absent has a meaning, such as any
/// model; `null` has none, and must not be read as absent).
pub fn refuse_null<'a>(
    fields: &serde_json::Map<String, serde_json::Value>,
    names: impl IntoIterator<Item = &'a str>,
) -> Result<(), ApiError> {
    match names
        .into_iter()
        .find(|n| fields.get(*n).is_some_and(serde_json::Value::is_null))
    {
        Some(n) => Err(ApiError::invalid(
            n,
            format!("{n} must not be null; leave it out for its default."),
        )),
        None => Ok(()),
    }
}

/// `POST /admin/keys/{id}/rotate` (the body may be empty).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rotate {
    /// How long the replaced secret keeps working. Absent: the default;
    /// `null` is refused, as admin.yaml gives it no `nullable`.
    #[serde(default, deserialize_with = "not_null")]
    pub grace_seconds: Option<u64>,
}

/// A field that may be absent (`#[serde(default)]`) but not `null`.
fn not_null<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

impl Rotate {
    pub fn grace_seconds(&self) -> Result<u64, ApiError> {
        let g = self.grace_seconds.unwrap_or(super::DEFAULT_GRACE_SECONDS);
        if g > MAX_GRACE_SECONDS {
            return Err(ApiError::invalid(
                "grace_seconds",
                format!("grace_seconds must be at most {MAX_GRACE_SECONDS} (30 days)."),
            ));
        }
        Ok(g)
    }
}

/// The 400 of a body serde could not read (its message cut short: it can
/// quote the input).
fn invalid_body(e: &serde_json::Error) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::BAD_REQUEST,
        "invalid_body",
        format!(
            "Invalid request body: {}",
            clip(&e.to_string(), 3 * ECHO_MAX_CHARS)
        ),
    )
}

/// A JSON body as `T`; `Err` is the 400 (serde's message cut short: it
/// can quote the input).
pub fn parse<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| invalid_body(&e))
}

/// RFC 7396: `patch` applied to `target` (objects merge, `null` removes,
/// anything else replaces).
pub fn merge_patch(target: &mut serde_json::Value, patch: &serde_json::Value) {
    let serde_json::Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = serde_json::Value::Object(Default::default());
    }
    if let serde_json::Value::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(serde_json::Value::Null), v);
            }
        }
    }
}

/// An RFC 3339 time as unix ms, `field` naming it in the error.
pub fn time_ms(field: &str, s: &str) -> Result<i64, ApiError> {
    s.parse::<jiff::Timestamp>()
        .map(|t| t.as_millisecond())
        .map_err(|_| {
            ApiError::invalid(
                field,
                format!(
                    "{field} must be an RFC 3339 time such as 2027-01-31T00:00:00Z, not {}.",
                    crate::decision::echo(s)
                ),
            )
        })
}

/// Unix ms as RFC 3339 (UTC).
pub fn rfc3339(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// A tenant or key id, `field` naming it in the error.
pub fn name(field: &str, s: &str) -> Result<(), ApiError> {
    if valid_policy_name(s) {
        Ok(())
    } else {
        Err(ApiError::invalid(
            field,
            format!(
                "{field} must match [A-Za-z0-9._-]{{1,64}}, not {}.",
                crate::decision::echo(s)
            ),
        ))
    }
}

/// `GET /admin/keys`'s query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    pub tenant: Option<String>,
    /// Only keys after this id (the previous page's `next_after`).
    pub after: Option<String>,
    pub limit: usize,
    /// Read spend and what is left from the store (default true).
    pub usage: bool,
}

/// Most keys on one page.
pub const MAX_PAGE: usize = 1000;
/// Keys on a page unless `limit` says otherwise.
pub const DEFAULT_PAGE: usize = 100;

impl ListQuery {
    /// `tenant=T&after=ID&limit=N&usage=false`: names only, no escapes
    /// (names never need one).
    pub fn parse(query: &str) -> Result<ListQuery, ApiError> {
        let mut q = ListQuery {
            tenant: None,
            after: None,
            limit: DEFAULT_PAGE,
            usage: true,
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "tenant" => {
                    name("tenant", v)?;
                    q.tenant = Some(v.to_string());
                }
                "after" => {
                    name("after", v)?;
                    q.after = Some(v.to_string());
                }
                "limit" => {
                    q.limit = v
                        .parse()
                        .ok()
                        .filter(|n| (1..=MAX_PAGE).contains(n))
                        .ok_or_else(|| {
                            ApiError::invalid(
                                "limit",
                                format!("limit must be an integer from 1 to {MAX_PAGE}."),
                            )
                        })?;
                }
                "usage" => {
                    q.usage = match v {
                        "true" | "1" => true,
                        "false" | "0" => false,
                        _ => {
                            return Err(ApiError::invalid("usage", "usage must be true or false."))
                        }
                    }
                }
                other => {
                    return Err(ApiError::invalid(
                        "query",
                        format!(
                            "Unknown query parameter {}: use tenant, after, limit or usage.",
                            crate::decision::echo(other)
                        ),
                    ))
                }
            }
        }
        Ok(q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_follows_rfc_7396() {
        let mut t = json!({"models": ["*"], "limits": {"requests_per_minute": 5, "tokens_per_minute": 9}, "expires_at": "x"});
        merge_patch(
            &mut t,
            &json!({"models": ["openai/*"], "limits": {"requests_per_minute": 7, "tokens_per_minute": null}, "expires_at": null, "budgets": {"usd_per_day": 2}}),
        );
        assert_eq!(
            t,
            json!({"models": ["openai/*"], "limits": {"requests_per_minute": 7}, "budgets": {"usd_per_day": 2}})
        );
    }

    #[test]
    fn list_query() {
        assert_eq!(
            ListQuery::parse("tenant=demo&limit=5&after=k1&usage=false").unwrap(),
            ListQuery {
                tenant: Some("demo".into()),
                after: Some("k1".into()),
                limit: 5,
                usage: false
            }
        );
        for bad in ["limit=0", "limit=x", "tenant=a%20b", "usage=maybe", "x=1"] {
            assert!(ListQuery::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rotate_grace_may_be_absent_but_not_null() {
        let r: Rotate = parse(b"{}").unwrap();
        assert_eq!(
            r.grace_seconds().unwrap(),
            super::super::DEFAULT_GRACE_SECONDS
        );
        let r: Rotate = parse(br#"{"grace_seconds":0}"#).unwrap();
        assert_eq!(r.grace_seconds().unwrap(), 0);
        let e = parse::<Rotate>(br#"{"grace_seconds":null}"#).unwrap_err();
        assert_eq!((e.status.as_u16(), e.code), (400, "invalid_body"));
        assert!(e.message.contains("null"), "{}", e.message);
    }

    #[test]
    fn a_create_refuses_null_where_absent_has_a_meaning() {
        for field in [
            "models",
            "limits",
            "model_limits",
            "budgets",
            "cache_breakpoints",
            "mcp",
        ] {
            let body = format!(r#"{{"tenant":"demo","{field}":null}}"#);
            let e = CreateKey::parse(body.as_bytes()).unwrap_err();
            assert_eq!(
                (e.status.as_u16(), e.param.as_deref()),
                (400, Some(field)),
                "{field}"
            );
        }
        // expires_at is nullable (never), and id null is generated.
        assert!(CreateKey::parse(br#"{"tenant":"demo","expires_at":null,"id":null}"#).is_ok());
    }

    #[test]
    fn times() {
        assert_eq!(time_ms("t", "1970-01-01T00:00:01Z").unwrap(), 1000);
        assert_eq!(rfc3339(1000), "1970-01-01T00:00:01Z");
        let e = time_ms("expires_at", "tomorrow").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("expires_at"));
    }
}
