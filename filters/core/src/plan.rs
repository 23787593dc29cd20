//! The route planner: a pure function from a request's facts and the
//! config to what the request becomes — the route (provider, model, key,
//! what the response side needs) and the header and body mutations — with
//! no host calls. [`crate::flow`] gathers the facts and applies the plan.
//!
//! New front doors (another client API) add an [`Endpoint`] and parse into
//! the same planner; a per-attempt key choice re-runs [`choose_key`].

use std::borrow::Cow;

use serde_json::Value;

use tollgate_wire::header::{CLUSTER, KEY_ID, MODEL, MODELS, RESERVED, SLOT, TENANT};
use tollgate_wire::models_allowed;

use crate::config::{Key, Kind, ModelCfg, Provider, Resolved, Runtime};
use crate::error::{echo, ApiError, INVALID_REQUEST, SERVER};
use crate::hash::hash_bytes;
use crate::lift::{self, Insert};
use crate::scan::{leading_model, TopLevel};
use crate::session::{self, Session};
use crate::translate::{
    for_route, messages, parse_client_body, Endpoint, Front, RequestCtx, ResponseCtx, Translator,
    UpstreamRequest,
};

/// What the planner knows about a request.
#[derive(Debug, Clone, Copy)]
pub struct RequestFacts<'a> {
    pub endpoint: Endpoint,
    /// The client API (OpenAI routes, or the Anthropic Messages routes).
    pub front: Front,
    pub body: &'a [u8],
    /// The names of the client's request headers (`None` when the host
    /// could not list them: then [`REMOVED`] are removed).
    pub header_names: Option<&'a [String]>,
    /// `x-tollgate-models`, the key's allow-list ("" when absent).
    pub allowed: &'a str,
    /// `x-tollgate-model`, the model the client declared for admission.
    pub declared_model: Option<&'a str>,
    pub now_ms: u64,
    /// Random source of the weighted key choice.
    pub random: u32,
    /// `x-tollgate-tenant` ("" when absent): sessions are per tenant.
    pub tenant: &'a str,
    /// The client's session header ([`crate::session::SESSION_HEADERS`]).
    pub session_header: Option<&'a str>,
    /// `x-tollgate-cache-breakpoints: 1`: the key's policy asks for
    /// Anthropic cache breakpoints where the client sets none.
    pub cache_breakpoints: bool,
}

/// Where a request goes and what its response side needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Index in [`Runtime::providers`].
    pub provider: usize,
    /// `provider/model`.
    pub canonical: String,
    /// Index in the provider's keys.
    pub key: usize,
    pub stream: bool,
    pub include_usage: bool,
    pub json_mode: bool,
    pub prompt_estimate: u64,
    pub embed_base64: bool,
    pub upstream_model: String,
    pub endpoint: Endpoint,
    pub sent_ms: u64,
    /// The client API: which translator and error shape the response uses.
    pub front: Front,
    /// Translated routes: the request fields and tool types the provider did
    /// not get (the response header `x-tollgate-dropped`), "" for none.
    pub dropped: String,
    /// Translated routes: the values lowered to the model's limits (the
    /// response header `x-tollgate-lowered`), "" for none.
    pub lowered: String,
    /// Served by one of the alias's fallbacks, not its first target.
    pub fallback: bool,
    /// The hash of the request's session, when it has one
    /// ([`crate::session`]).
    pub session: Option<u64>,
    /// The most output tokens the request may produce: its declared limit
    /// (`max_completion_tokens`, `max_tokens`, `max_output_tokens`) at most
    /// the model's `max_output_tokens`, 0 for embeddings; None when it
    /// declares none. Its reservation is topped up to it (`crate::usage`).
    pub output_limit: Option<u64>,
}

impl Route {
    /// The one place a response translator's context is made.
    pub fn response_ctx(&self, stream: bool, created: u64) -> ResponseCtx {
        ResponseCtx {
            endpoint: self.endpoint,
            stream,
            include_usage: stream && self.include_usage,
            created,
            json_mode: self.json_mode,
            prompt_estimate: self.prompt_estimate,
            embed_base64: self.embed_base64,
            model: self.upstream_model.clone(),
        }
    }
}

/// One request header change: `Some` sets the header, `None` removes it.
pub type HeaderChange = (Cow<'static, str>, Option<String>);

/// The request rewritten for the provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub route: Route,
    /// Request header changes in order: `Some` sets, `None` removes.
    pub headers: Vec<HeaderChange>,
    /// Replaces the first [`Plan::body_replaces`] bytes of the client's
    /// body (all of them unless the translator edits in place; 0 with an
    /// empty `body`: the body goes on untouched).
    pub body: Vec<u8>,
    pub body_replaces: usize,
    /// The client's long texts the translated `body` leaves out, and where
    /// they go in it ([`lift`]); only with a whole-body replacement.
    pub inserts: Vec<Insert>,
    /// A fan-out: instead of forwarding the request, make these calls to
    /// the provider's cluster and answer with their merged answers.
    pub calls: Vec<Call>,
    /// Answered by the gateway without a provider call (count_tokens of a
    /// non-Anthropic model): the 200 JSON body.
    pub local: Option<Vec<u8>>,
    /// The client's model names fallback targets (an alias with more than
    /// one target): a failed answer may be served by the next one.
    pub fallbacks: bool,
}

impl Plan {
    /// The body the provider gets, from the client's.
    pub fn upstream_body(&self, client: &[u8]) -> Vec<u8> {
        upstream_body(self.body.clone(), self.body_replaces, &self.inserts, client)
    }
}

/// Applies a plan's header changes ([`Plan::headers`]: `Some` sets, `None`
/// removes) to a list of headers.
pub fn apply_header_changes(all: &mut Vec<(String, String)>, changes: &[HeaderChange]) {
    for (name, value) in changes {
        all.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        if let Some(v) = value {
            all.push((name.to_string(), v.clone()));
        }
    }
}

/// The body the provider gets: `body` with the client texts of `inserts`
/// put in, followed by the client's body after its first `replaces` bytes.
pub fn upstream_body(body: Vec<u8>, replaces: usize, inserts: &[Insert], client: &[u8]) -> Vec<u8> {
    if inserts.is_empty() {
        return spliced(body, replaces, client);
    }
    spliced(lift::joined(&body, inserts, client), replaces, client)
}

/// The writes that replace a whole client body with `body` and the client
/// texts of `inserts` put in: the first one replaces the client's bytes,
/// each next one goes at the end. Each write is one of Envoy's 16 KiB
/// buffer slices ([`WRITE_MAX`]), taken from the client's body as it lies
/// where a lifted text fills it; pieces shorter than that are joined.
///
/// Envoy sends a request body to an HTTP/2 provider in frames, moving whole
/// slices into them and copying those a frame ends inside: a body written
/// in one call is one slice, copied again frame by frame, where a body
/// read from the client is in 16 KiB slices. Measured (`perf` on Envoy,
/// 512 KB translated request): the copies took ~245 µs of Envoy's CPU per
/// request, and copying the texts into the VM's output first ~50 µs more.
pub fn writes<'a>(body: &'a [u8], inserts: &'a [Insert], client: &'a [u8]) -> Vec<Cow<'a, [u8]>> {
    let mut writes = Vec::new();
    let mut joined = Vec::new();
    for mut piece in lift::pieces(body, inserts, client) {
        if !joined.is_empty() {
            let (head, rest) = piece.split_at((WRITE_MAX - joined.len()).min(piece.len()));
            joined.extend_from_slice(head);
            piece = rest;
            if joined.len() < WRITE_MAX {
                continue;
            }
            writes.push(Cow::Owned(std::mem::take(&mut joined)));
        }
        let mut chunks = piece.chunks_exact(WRITE_MAX);
        writes.extend(chunks.by_ref().map(Cow::Borrowed));
        joined.extend_from_slice(chunks.remainder());
    }
    if !joined.is_empty() || writes.is_empty() {
        writes.push(Cow::Owned(joined));
    }
    writes
}

/// The most bytes one write of a replaced body carries ([`writes`]): the
/// size of Envoy's buffer slices.
pub const WRITE_MAX: usize = 16 * 1024;

/// `prefix` followed by the client's body after its first `replaces` bytes.
pub fn spliced(mut prefix: Vec<u8>, replaces: usize, client: &[u8]) -> Vec<u8> {
    prefix.extend_from_slice(client.get(replaces..).unwrap_or_default());
    prefix
}

/// One call of a fan-out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// `:method`, `:path`, `:authority`, content and credential headers.
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

/// Client request headers every provider gets (beside those the filter sets:
/// path, authority, content type and length, the provider's credentials and
/// version); a provider's `forward_headers` adds more. Every other client
/// header is removed, so account headers (`openai-organization`,
/// `openai-project`, `anthropic-beta`…) never travel with the gateway's key.
/// `x-forwarded-proto` is Envoy's own (it sets it from the connection, and
/// routing needs it).
pub const FORWARDED: [&str; 6] = [
    "accept",
    "user-agent",
    "x-request-id",
    "x-forwarded-proto",
    "traceparent",
    "tracestate",
];

/// The response header carrying a provider kind's own request id (passed to
/// the client as `x-tollgate-provider-request-id`).
pub fn provider_request_id_header(kind: Kind) -> Option<&'static str> {
    match kind {
        Kind::Openai | Kind::Azure => Some("x-request-id"),
        Kind::Anthropic => Some("request-id"),
        Kind::Bedrock => Some("x-amzn-requestid"),
        Kind::Gemini => None,
    }
}

/// Removed when the host cannot list the request's headers: the client's
/// credentials, the gateway's own headers, and encodings the filter cannot
/// rewrite through.
const REMOVED: [&str; 10] = [
    "authorization",
    "x-api-key",
    TENANT,
    KEY_ID,
    MODELS,
    MODEL,
    RESERVED,
    SLOT,
    "accept-encoding",
    "transfer-encoding",
];

/// Plans a request. `cooling` gives the milliseconds until a provider key
/// (by id) ends its cooldown (0: usable); it is asked only about keys the
/// weighted choice lands on, and about every key of the model when all cool.
pub fn plan(
    rt: &Runtime,
    facts: &RequestFacts<'_>,
    cooling: &dyn Fn(&str) -> u64,
) -> Result<Plan, ApiError> {
    if facts.body.is_empty() {
        return Err(ApiError::new(
            400,
            INVALID_REQUEST,
            "invalid_json",
            "Request body is required",
        ));
    }
    let parsed = Parsed::read(rt, facts)?;
    let model = match &parsed {
        Parsed::Top(top) => top.model()?,
        Parsed::Document(_, model) => model.clone(),
    };
    let resolved = admit(rt, facts, &model)?;
    let declared = declared_output(&parsed);
    let (resolved, t) = serving_target(rt, resolved, &model, facts, &parsed, cooling)?;
    let output_limit = match facts.endpoint {
        Endpoint::Embeddings => Some(0),
        _ => declared.map(|d| {
            t.model_cfg
                .max_output_tokens
                .map_or(d, |max| d.min(u64::from(max)))
        }),
    };
    let alias_fallbacks = rt.fallbacks(&model);
    let canonical_is_fallback = alias_fallbacks.contains(&resolved);
    let fallbacks = !alias_fallbacks.is_empty();
    let key = t
        .provider
        .keys
        .get(t.key_idx)
        .ok_or_else(|| ApiError::model_not_found(&model))?;
    let headers = header_changes(rt, facts, &t, key)?;
    let calls = fan_out_calls(t.tr, t.provider, key, &t.up, facts.now_ms)?;
    let up = t.up;
    Ok(Plan {
        route: Route {
            provider: resolved.provider,
            canonical: resolved.canonical,
            key: t.key_idx,
            stream: up.stream,
            include_usage: up.include_usage,
            json_mode: up.json_mode,
            prompt_estimate: up.prompt_estimate,
            embed_base64: up.embed_base64,
            upstream_model: resolved.model,
            endpoint: facts.endpoint,
            sent_ms: facts.now_ms,
            front: facts.front,
            dropped: t.dropped.join(","),
            lowered: up.lowered.join(","),
            fallback: canonical_is_fallback,
            session: t.session.map(|s| s.hash),
            output_limit,
        },
        headers,
        body: up.body,
        body_replaces: t.body_replaces,
        inserts: t.inserts,
        calls,
        local: t.local,
        fallbacks,
    })
}

/// The client's model resolved and admitted: a model or alias of the
/// config, allowed by the key's allow-list, and the one the client
/// declared for admission (`x-tollgate-model`) when it did.
fn admit(rt: &Runtime, facts: &RequestFacts<'_>, model: &str) -> Result<Resolved, ApiError> {
    let resolved =
        resolve(rt, facts.front, model).ok_or_else(|| ApiError::model_not_found(model))?;
    if !models_allowed(facts.allowed, &[model, &resolved.canonical]) {
        return Err(ApiError::model_not_allowed(model));
    }
    if let Some(declared) = facts.declared_model {
        let declared = declared.trim();
        if declared != model && declared != resolved.canonical {
            return Err(ApiError {
                param: Some("model".into()),
                ..ApiError::new(
                    400,
                    INVALID_REQUEST,
                    "model_mismatch",
                    format!(
                        "The x-tollgate-model header ('{}') does not name the request's model ('{}')",
                        echo(declared),
                        echo(model)
                    ),
                )
            });
        }
    }
    Ok(resolved)
}

/// The target that serves the request, and what it resolved to: the first
/// with a key not cooling. An alias may name fallbacks, tried in order
/// only when every key of the ones before it cools (so the success path
/// never looks at them).
fn serving_target<'r>(
    rt: &'r Runtime,
    resolved: Resolved,
    model: &str,
    facts: &RequestFacts<'_>,
    parsed: &Parsed<'_>,
    cooling: &dyn Fn(&str) -> u64,
) -> Result<(Resolved, Target<'r>), ApiError> {
    match target(rt, &resolved, model, facts, parsed, cooling) {
        Ok(t) => Ok((resolved, t)),
        Err(e) if fallback_on(&e) => rt
            .fallbacks(model)
            .iter()
            .find_map(|r| {
                Some((
                    r.clone(),
                    target(rt, r, model, facts, parsed, cooling).ok()?,
                ))
            })
            .ok_or(e),
        Err(e) => Err(e),
    }
}

/// A first target's error that lets an alias's fallbacks serve: every key
/// cooling, or a provider left out of the config (no key).
fn fallback_on(e: &ApiError) -> bool {
    matches!(e.code.as_deref(), Some(NO_KEY_AVAILABLE | NOT_CONFIGURED))
}

const NO_KEY_AVAILABLE: &str = "no_provider_key_available";
const NOT_CONFIGURED: &str = "provider_not_configured";

/// The request header changes for target `t` and its `key`, in order: the
/// client's headers that do not travel removed, then the route, the
/// credentials, the body's type and length, and the retry limit set.
fn header_changes(
    rt: &Runtime,
    facts: &RequestFacts<'_>,
    t: &Target<'_>,
    key: &Key,
) -> Result<Vec<HeaderChange>, ApiError> {
    let Target {
        provider,
        model_cfg,
        tr,
        up,
        body_replaces,
        inserts,
        ..
    } = t;
    let inserted: usize = inserts.iter().map(|i| i.text.len()).sum();
    let body_len =
        facts.body.len() - (*body_replaces).min(facts.body.len()) + up.body.len() + inserted;
    let mut headers: Vec<HeaderChange> = Vec::with_capacity(16);
    match facts.header_names {
        Some(names) => headers.extend(
            names
                .iter()
                .filter(|n| {
                    !forwarded(provider, n) && !anthropic_forwarded(provider, facts.front, n)
                })
                .map(|n| (Cow::Owned(n.to_ascii_lowercase()), None)),
        ),
        None => headers.extend(REMOVED.iter().map(|&name| (Cow::Borrowed(name), None))),
    }
    let mut set =
        |name: &'static str, value: String| headers.push((Cow::Borrowed(name), Some(value)));
    set(CLUSTER, provider.cluster.clone());
    set(":path", up.path.clone());
    if let Some(host) = &provider.host {
        set(":authority", host.clone());
    }
    let client_version = facts.front.anthropic()
        && facts.header_names.is_some_and(|n| {
            n.iter()
                .any(|h| h.eq_ignore_ascii_case("anthropic-version"))
        });
    for (name, value) in tr.auth_headers(provider, key, up, facts.now_ms)? {
        if client_version && name == "anthropic-version" && provider.kind() == Kind::Anthropic {
            // The passthrough keeps the client's API version.
            continue;
        }
        set(name, value);
    }
    set("content-type", "application/json".into());
    set("content-length", body_len.to_string());
    // Envoy's router retries a failed attempt (each on another key, see
    // crate::attempt) at most this many times.
    set(
        MAX_RETRIES,
        retries(rt.max_attempts, model_cfg.pool.len()).to_string(),
    );
    Ok(headers)
}

/// The client's body, read once: as a document for translators, or only
/// its top level for the passthrough, which edits it in place.
enum Parsed<'a> {
    Top(TopLevel<'a>),
    /// The body and its `model`.
    Document(Value, String),
}

impl<'a> Parsed<'a> {
    /// A body that names its model first (a plain string) is read as its
    /// provider's translator needs it: built when it is translated, scanned
    /// when it passes through. Any other body is scanned first (the model
    /// may come last), and built afterwards only if it is translated.
    fn read(rt: &Runtime, facts: &RequestFacts<'a>) -> Result<Parsed<'a>, ApiError> {
        let body = facts.body;
        // A large body whose translator keeps texts whole is scanned too:
        // its long texts are lifted out before it is built (`lift`).
        let translated = leading_model(body)
            .and_then(|m| resolve(rt, facts.front, m))
            .and_then(|r| rt.provider(r.provider))
            .map(|p| for_route(p, facts.endpoint, facts.front))
            .is_some_and(|tr| !tr.passthrough() && !lifts(tr, facts));
        if translated {
            let (value, model) = parse_client_body(body)?;
            return Ok(Parsed::Document(value, model));
        }
        TopLevel::parse(body).map(Parsed::Top)
    }
}

/// The output limit a client body declares: `max_completion_tokens`, else
/// `max_tokens` (chat, Messages), else `max_output_tokens` (Responses).
fn declared_output(parsed: &Parsed<'_>) -> Option<u64> {
    ["max_completion_tokens", "max_tokens", "max_output_tokens"]
        .iter()
        .find_map(|name| match parsed {
            Parsed::Top(top) => top.get(name).and_then(|v| v.trim().parse().ok()),
            Parsed::Document(v, _) => v.get(*name).and_then(Value::as_u64),
        })
}

/// Are the body's long texts lifted out before it is built for `tr`?
fn lifts(tr: &dyn Translator, facts: &RequestFacts<'_>) -> bool {
    facts.front == Front::OpenAi && facts.body.len() >= lift::MIN_BODY && tr.keeps_texts_whole()
}

/// A model name as the client gave it: `provider/model` or an alias, and on
/// the Messages front door a bare name too (Claude Code and the Anthropic
/// SDK name bare models).
fn resolve(rt: &Runtime, front: Front, model: &str) -> Option<crate::config::Resolved> {
    rt.resolve(model).or_else(|| match front {
        Front::OpenAi => None,
        Front::Messages | Front::CountTokens => rt.resolve_bare(model),
    })
}

/// Envoy's per-request retry limit, read by the router.
pub const MAX_RETRIES: &str = "x-envoy-max-retries";

/// Retries of one request: one per other key of the pool, within
/// `max_attempts`; a single-key pool still gets one (a reset or a 5xx may
/// pass on the same key).
pub fn retries(max_attempts: u32, pool_keys: usize) -> u32 {
    let keys = u32::try_from(pool_keys).unwrap_or(u32::MAX).max(2);
    keys.min(max_attempts).saturating_sub(1)
}

/// One target of a request: its provider, model config and translator, the
/// request made for it (the upstream body replaces the first
/// `body_replaces` bytes of the client's), and the key chosen.
struct Target<'r> {
    provider: &'r Provider,
    model_cfg: &'r ModelCfg,
    tr: &'static dyn Translator,
    up: UpstreamRequest,
    body_replaces: usize,
    inserts: Vec<Insert>,
    /// Messages routes: the Anthropic request fields the provider does not get.
    dropped: Vec<&'static str>,
    /// Answered by the gateway without a provider call (count_tokens of a
    /// non-Anthropic model): the 200 JSON body.
    local: Option<Vec<u8>>,
    key_idx: usize,
    session: Option<Session>,
}

fn target<'r>(
    rt: &'r Runtime,
    resolved: &Resolved,
    model: &str,
    facts: &RequestFacts<'_>,
    parsed: &Parsed<'_>,
    cooling: &dyn Fn(&str) -> u64,
) -> Result<Target<'r>, ApiError> {
    let provider = rt
        .provider(resolved.provider)
        .ok_or_else(|| ApiError::model_not_found(model))?;
    if let Some(why) = &provider.disabled {
        return Err(ApiError::new(
            502,
            SERVER,
            NOT_CONFIGURED,
            format!(
                "Provider '{}' is not configured on this gateway: {why}",
                provider.name
            ),
        ));
    }
    let model_cfg = provider
        .models
        .get(&resolved.model)
        .ok_or_else(|| ApiError::model_not_found(model))?;
    let tr = for_route(provider, facts.endpoint, facts.front);
    let ctx = RequestCtx {
        provider,
        model: &resolved.model,
        model_cfg,
        endpoint: facts.endpoint,
        cache_breakpoints: facts.cache_breakpoints,
    };
    let mut dropped = Vec::new();
    let mut local = None;
    let mut inserts = Vec::new();
    let in_place = match parsed {
        Parsed::Top(top) => tr.request_in_place(&ctx, top),
        Parsed::Document(..) => None,
    };
    let (up, mut body_replaces) = match (in_place, facts.front, &parsed) {
        (Some(r), _, _) => r?,
        (None, Front::OpenAi, Parsed::Top(top)) => {
            let lifted = lifts(tr, facts)
                .then(|| lift::request(tr, &ctx, top))
                .flatten();
            let up = match lifted {
                Some((up, lifted)) => {
                    inserts = lifted;
                    up
                }
                None => tr.request(&ctx, &top.value()?)?,
            };
            (up, facts.body.len())
        }
        (None, Front::OpenAi, Parsed::Document(value, _)) => {
            (tr.request(&ctx, value)?, facts.body.len())
        }
        (None, front, parsed) => {
            let built;
            let value = match parsed {
                Parsed::Top(top) => {
                    built = top.value()?;
                    &built
                }
                Parsed::Document(value, _) => value,
            };
            let up = match front {
                Front::Messages => {
                    let (up, d) = messages::request(provider.kind(), &ctx, value)?;
                    dropped = d;
                    up
                }
                Front::CountTokens if provider.kind() != Kind::Anthropic => {
                    let (_, body) = messages::estimate_input_tokens(value, &provider.name)?;
                    local = Some(body);
                    UpstreamRequest::default()
                }
                _ => tr.request(&ctx, value)?,
            };
            (up, facts.body.len())
        }
    };
    if up.body.is_empty() && local.is_none() {
        // A passthrough that keeps the client's bytes: the body is not
        // rewritten at all.
        body_replaces = 0;
    }
    for d in &up.dropped {
        if !dropped.contains(d) {
            dropped.push(d);
        }
    }
    let session = (provider.key_affinity || provider.cache_hint)
        .then(|| match parsed {
            Parsed::Top(top) => session::of_scanned(facts.tenant, facts.session_header, top),
            Parsed::Document(value, _) => {
                session::of_document(facts.tenant, facts.session_header, value)
            }
        })
        .flatten();
    let affinity = session.filter(|_| provider.key_affinity).map(|s| s.hash);
    let key_idx = choose_key(provider, model_cfg, affinity, facts.random, cooling)?;
    let mut up = up;
    let client_hint = match parsed {
        Parsed::Top(top) => top.get("prompt_cache_key").is_some(),
        Parsed::Document(value, _) => value.get("prompt_cache_key").is_some(),
    };
    let hints = provider.cache_hint
        && matches!(facts.endpoint, Endpoint::Chat | Endpoint::Responses)
        && !client_hint
        && local.is_none();
    if let Some(s) = session.filter(|_| hints) {
        add_cache_hint(&mut up, &mut body_replaces, &mut inserts, facts.body, &s);
    }
    Ok(Target {
        provider,
        model_cfg,
        tr,
        up,
        body_replaces,
        inserts,
        dropped,
        local,
        key_idx,
        session,
    })
}

/// Does a client header travel to this provider? Pseudo-headers (`:path`…)
/// are Envoy's and stay; content type and length are set again by the plan.
fn forwarded(provider: &Provider, name: &str) -> bool {
    name.starts_with(':')
        || name.eq_ignore_ascii_case("content-type")
        || name.eq_ignore_ascii_case("content-length")
        || FORWARDED.iter().any(|f| name.eq_ignore_ascii_case(f))
        || provider
            .forward_headers
            .iter()
            .any(|f| name.eq_ignore_ascii_case(f))
}

/// The Messages routes' passthrough forwards the client's
/// `anthropic-version` and `anthropic-beta` to Anthropic providers.
fn anthropic_forwarded(provider: &Provider, front: Front, name: &str) -> bool {
    front.anthropic()
        && provider.kind() == Kind::Anthropic
        && (name.eq_ignore_ascii_case("anthropic-version")
            || name.eq_ignore_ascii_case("anthropic-beta"))
}

/// The calls of a fan-out (none unless the translator asked for one): the
/// request's own body first, each call signed for its own body.
fn fan_out_calls(
    tr: &dyn Translator,
    provider: &Provider,
    key: &Key,
    up: &UpstreamRequest,
    now_ms: u64,
) -> Result<Vec<Call>, ApiError> {
    if up.fan_out.is_empty() {
        return Ok(Vec::new());
    }
    let authority = provider.host.as_deref().unwrap_or(&provider.cluster);
    let mut calls = Vec::with_capacity(up.fan_out.len() + 1);
    for body in std::iter::once(&up.body).chain(&up.fan_out) {
        let one = UpstreamRequest {
            body: body.clone(),
            fan_out: Vec::new(),
            ..up.clone_head()
        };
        let mut headers = vec![
            (":method", "POST".to_string()),
            (":path", one.path.clone()),
            (":authority", authority.to_string()),
            ("content-type", "application/json".to_string()),
        ];
        headers.extend(tr.auth_headers(provider, key, &one, now_ms)?);
        calls.push(Call {
            headers,
            body: one.body,
        });
    }
    Ok(calls)
}

/// Gives an OpenAI or Azure request the session as `prompt_cache_key` when
/// the client sent none (`client`: the client's body): the provider routes
/// requests with the same key to the same cache. The field goes first in
/// the body; `up` either rewrites the client's body (then `up.body` holds
/// it whole, or its edited prefix) or passes it through untouched (then the
/// client's bytes up to its opening brace become the prefix).
fn add_cache_hint(
    up: &mut UpstreamRequest,
    body_replaces: &mut usize,
    inserts: &mut [Insert],
    client: &[u8],
    session: &Session,
) {
    let field = format!(
        "\"prompt_cache_key\":{},",
        serde_json::Value::from(session.hint())
    );
    if up.body.is_empty() {
        let Some(open) = client.iter().position(|&c| c == b'{') else {
            return;
        };
        if next_is_close(client, open) {
            return;
        }
        let mut prefix = client[..=open].to_vec();
        prefix.extend_from_slice(field.as_bytes());
        up.body = prefix;
        *body_replaces = open + 1;
        shift(inserts, field.len());
        return;
    }
    let Some(open) = up.body.iter().position(|&c| c == b'{') else {
        return;
    };
    if next_is_close(&up.body, open) {
        return;
    }
    up.body.splice(open + 1..open + 1, field.bytes());
    shift(inserts, field.len());
}

/// Is the next byte after `open` (past white space) a closing brace?
fn next_is_close(b: &[u8], open: usize) -> bool {
    b.get(open + 1..)
        .and_then(|rest| rest.iter().find(|c| !c.is_ascii_whitespace()))
        == Some(&b'}')
}

fn shift(inserts: &mut [Insert], by: usize) {
    for i in inserts {
        i.at += by;
    }
}

/// The weighted choice among the model's keys, skipping keys cooling down;
/// with a session, the session's key by weighted rendezvous hashing.
pub fn choose_key(
    provider: &Provider,
    model_cfg: &ModelCfg,
    session: Option<u64>,
    random: u32,
    cooling: &dyn Fn(&str) -> u64,
) -> Result<usize, ApiError> {
    let available = |k: usize| {
        provider
            .keys
            .get(k)
            .is_some_and(|key| cooling(&key.id) == 0)
    };
    let picked = match session {
        Some(s) => model_cfg.pool.pick_affine(
            s,
            |k| {
                provider
                    .keys
                    .get(k)
                    .map_or(0, |key| hash_bytes(0, key.id.as_bytes()))
            },
            available,
        ),
        None => model_cfg.pool.pick(random, available),
    };
    picked.ok_or_else(|| {
        // Retry when the first key's cooldown ends (at least 1 s).
        let first_ms = model_cfg
            .pool
            .keys()
            .filter_map(|k| provider.keys.get(k))
            .map(|key| cooling(&key.id))
            .min()
            .unwrap_or(0);
        ApiError {
            retry_after: Some(first_ms.div_ceil(1000).max(1)),
            ..ApiError::new(
                503,
                SERVER,
                NO_KEY_AVAILABLE,
                format!(
                    "Every key of provider '{}' is cooling down after provider errors; retry later",
                    provider.name
                ),
            )
        }
    })
}

/// Metric-safe fragment: model names may contain '.', '/', ':'.
pub fn metric_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Whatever the pieces' sizes, the writes carry the upstream body in
    /// order, each a full slice but the last.
    #[test]
    fn writes_are_the_body_in_full_slices() {
        let mut rng = crate::keys::XorShift::new(7);
        for _ in 0..300 {
            let client: Vec<u8> = (0..rng.next_u32() % 100_000).map(|i| i as u8).collect();
            let body: Vec<u8> = (0..rng.next_u32() % 40_000)
                .map(|i| (i % 7) as u8)
                .collect();
            let mut inserts = Vec::new();
            let mut at = 0;
            for _ in 0..rng.next_u32() % 6 {
                at += (rng.next_u32() as usize % 5_000).min(body.len() - at);
                let start = rng.next_u32() as usize % (client.len() + 1);
                let end = start + (rng.next_u32() as usize % 40_000).min(client.len() - start);
                inserts.push(Insert {
                    at,
                    text: start..end,
                });
            }
            let w = writes(&body, &inserts, &client);
            assert_eq!(w.concat(), lift::joined(&body, &inserts, &client));
            let (last, full) = w.split_last().unwrap();
            assert!(full.iter().all(|w| w.len() == WRITE_MAX));
            assert!(last.len() <= WRITE_MAX && (full.is_empty() || !last.is_empty()));
        }
    }

    fn rt() -> Runtime {
        Runtime::from_json(
            br#"{"providers":{
              "openai":{"kind":"openai","cluster":"openai_cluster","models":["gpt-4o"],
                "key_affinity":false,"prompt_cache_key":false,
                "keys":[{"id":"o1","value":"sk-1"},{"id":"o2","value":"sk-2"}]},
              "anthropic":{"kind":"anthropic","cluster":"anthropic","host":"api.anthropic.com",
                "forward_headers":["Anthropic-Beta"],
                "models":["claude"],"keys":[{"id":"a1","value":"sk-ant"}]}},
              "aliases":{"smart":"anthropic/claude"}}"#,
            &|_| None,
        )
        .unwrap()
    }

    fn facts<'a>(body: &'a [u8], allowed: &'a str) -> RequestFacts<'a> {
        RequestFacts {
            endpoint: Endpoint::Chat,
            front: Front::OpenAi,
            body,
            header_names: None,
            allowed,
            declared_model: None,
            now_ms: 1_700_000_000_000,
            random: 0,
            tenant: "",
            session_header: None,
            cache_breakpoints: false,
        }
    }

    const CHAT: &[u8] = br#"{"model":"openai/gpt-4o","messages":[{"role":"user","content":"hi"}]}"#;

    fn header<'p>(p: &'p Plan, name: &str) -> Option<Option<&'p str>> {
        p.headers
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_deref())
    }

    #[test]
    fn plans_headers_body_and_route_without_a_host() {
        let rt = rt();
        let p = plan(&rt, &facts(CHAT, "*"), &|_| 0).unwrap();
        assert_eq!(header(&p, CLUSTER), Some(Some("openai_cluster")));
        assert_eq!(header(&p, ":path"), Some(Some("/v1/chat/completions")));
        assert_eq!(header(&p, "authorization"), Some(Some("Bearer sk-1")));
        for removed in [
            TENANT,
            KEY_ID,
            MODELS,
            MODEL,
            RESERVED,
            "x-api-key",
            "accept-encoding",
        ] {
            assert_eq!(header(&p, removed), Some(None), "{removed}");
        }
        let sent = p.upstream_body(CHAT);
        assert_eq!(
            header(&p, "content-length"),
            Some(Some(sent.len().to_string().as_str()))
        );
        let body: serde_json::Value = serde_json::from_slice(&sent).unwrap();
        assert_eq!(body["model"], "gpt-4o");
        // Edited in place: only the prefix up to the model is replaced.
        assert_eq!(p.body, br#"{"model":"gpt-4o""#);
        assert_eq!(p.body_replaces, br#"{"model":"openai/gpt-4o""#.len());
        assert_eq!(
            (p.route.canonical.as_str(), p.route.key, p.route.stream),
            ("openai/gpt-4o", 0, false)
        );
        assert_eq!(p.route.sent_ms, 1_700_000_000_000);
        assert_eq!(p.route.upstream_model, "gpt-4o");
    }

    #[test]
    fn only_allowed_client_headers_travel() {
        let rt = rt();
        let names: Vec<String> = [
            ":method",
            ":path",
            "content-type",
            "accept",
            "user-agent",
            "x-request-id",
            "authorization",
            "OpenAI-Organization",
            "openai-project",
            "anthropic-beta",
            "x-tollgate-tenant",
            "cookie",
        ]
        .map(String::from)
        .to_vec();
        let with_names = |body: &'static [u8]| RequestFacts {
            header_names: Some(&names),
            ..facts(body, "*")
        };
        let removed = |p: &Plan| -> Vec<String> {
            p.headers
                .iter()
                .filter(|(_, v)| v.is_none())
                .map(|(n, _)| n.to_string())
                .collect()
        };
        let p = plan(&rt, &with_names(CHAT), &|_| 0).unwrap();
        assert_eq!(
            removed(&p),
            [
                "authorization",
                "openai-organization",
                "openai-project",
                "anthropic-beta",
                "x-tollgate-tenant",
                "cookie"
            ]
        );
        // The provider's own auth header is set after the removal.
        assert_eq!(header(&p, "authorization"), Some(Some("Bearer sk-1")));
        // anthropic forwards anthropic-beta on purpose (config, any case).
        let smart = br#"{"model":"smart","messages":[{"role":"user","content":"hi"}]}"#;
        let p = plan(&rt, &with_names(smart), &|_| 0).unwrap();
        assert!(!removed(&p).contains(&"anthropic-beta".to_string()));
        assert!(removed(&p).contains(&"openai-organization".to_string()));
    }

    #[test]
    fn alias_routes_to_its_provider_with_its_host_and_key_header() {
        let rt = rt();
        let body =
            br#"{"model":"smart","messages":[{"role":"user","content":"hi"}],"stream":true}"#;
        let p = plan(&rt, &facts(body, "anthropic/*"), &|_| 0).unwrap();
        assert_eq!(p.route.canonical, "anthropic/claude");
        assert_eq!(header(&p, ":authority"), Some(Some("api.anthropic.com")));
        assert_eq!(header(&p, "x-api-key"), Some(Some("sk-ant")));
        assert!(p.route.stream);
        let streamed = p.route.response_ctx(true, 7);
        let buffered = p.route.response_ctx(false, 7);
        assert_eq!((streamed.stream, streamed.created), (true, 7));
        assert!(!buffered.stream && !buffered.include_usage);
        assert_eq!(buffered.model, "claude");
    }

    #[test]
    fn refusals() {
        let rt = rt();
        let code = |r: Result<Plan, ApiError>| {
            let e = r.unwrap_err();
            (e.status, e.code.unwrap_or_default())
        };
        assert_eq!(
            code(plan(&rt, &facts(b"", "*"), &|_| 0)),
            (400, "invalid_json".into())
        );
        assert_eq!(
            code(plan(&rt, &facts(CHAT, "anthropic/*"), &|_| 0)),
            (403, "model_not_allowed".into())
        );
        let nope = br#"{"model":"openai/nope","messages":[{"role":"user","content":"hi"}]}"#;
        assert_eq!(
            code(plan(&rt, &facts(nope, "*"), &|_| 0)),
            (404, "model_not_found".into())
        );
        let declared = RequestFacts {
            declared_model: Some("smart"),
            ..facts(CHAT, "*")
        };
        assert_eq!(
            code(plan(&rt, &declared, &|_| 0)),
            (400, "model_mismatch".into())
        );
        let declared = RequestFacts {
            declared_model: Some(" openai/gpt-4o "),
            ..facts(CHAT, "*")
        };
        assert!(plan(&rt, &declared, &|_| 0).is_ok());
    }

    #[test]
    fn an_alias_falls_back_when_every_key_of_its_target_cools() {
        let rt = Runtime::from_json(
            br#"{"providers":{
              "openai":{"kind":"openai","cluster":"openai","models":["gpt-4o"],
                "keys":[{"id":"o1","value":"sk-1"}]},
              "anthropic":{"kind":"anthropic","cluster":"anthropic","models":["claude"],
                "keys":[{"id":"a1","value":"sk-ant"}]},
              "mistral":{"kind":"openai","cluster":"mistral","models":["small"],
                "keys":[{"id":"m1","value":"sk-m"}]}},
              "aliases":{"smart":["anthropic/claude","openai/gpt-4o","mistral/small"]}}"#,
            &|_| None,
        )
        .unwrap();
        let smart = br#"{"model":"smart","messages":[{"role":"user","content":"hi"}]}"#;
        let served = |cooling: &dyn Fn(&str) -> u64| {
            plan(&rt, &facts(smart, "smart"), cooling).map(|p| p.route.canonical)
        };
        assert_eq!(served(&|_| 0).unwrap(), "anthropic/claude");
        assert_eq!(
            served(&|id| u64::from(id == "a1") * 1_000).unwrap(),
            "openai/gpt-4o"
        );
        assert_eq!(
            served(&|id| u64::from(id != "m1") * 1_000).unwrap(),
            "mistral/small"
        );
        let p = plan(&rt, &facts(smart, "smart"), &|id| {
            u64::from(id == "a1") * 1_000
        })
        .unwrap();
        assert_eq!(header(&p, CLUSTER), Some(Some("openai")));
        assert_eq!(p.route.upstream_model, "gpt-4o");
        assert!(p.route.fallback);
        assert!(
            !plan(&rt, &facts(smart, "smart"), &|_| 0)
                .unwrap()
                .route
                .fallback
        );
        // Every target cooling: the first target's error.
        let e = served(&|_| 2_000).unwrap_err();
        assert_eq!(e.code.as_deref(), Some("no_provider_key_available"));
        assert!(e.message.contains("'anthropic'"), "{}", e.message);
        // Only aliases fall back.
        let direct = br#"{"model":"anthropic/claude","messages":[{"role":"user","content":"hi"}]}"#;
        assert!(plan(&rt, &facts(direct, "*"), &|id| u64::from(id == "a1")).is_err());
    }

    #[test]
    fn a_disabled_provider_names_why_and_its_alias_falls_back() {
        let rt = Runtime::from_json(
            br#"{"providers":{
              "anthropic":{"kind":"anthropic","cluster":"anthropic","models":["claude"],
                "disabled":"ANTHROPIC_API_KEY is not set"},
              "openai":{"kind":"openai","cluster":"openai","models":["gpt-4o"],
                "keys":[{"id":"o1","value":"sk-1"}]}},
              "aliases":{"smart":["anthropic/claude","openai/gpt-4o"]}}"#,
            &|_| None,
        )
        .unwrap();
        let body = br#"{"model":"anthropic/claude","messages":[{"role":"user","content":"hi"}]}"#;
        for front in [Front::OpenAi, Front::Messages] {
            let e = plan(
                &rt,
                &RequestFacts {
                    front,
                    ..facts(body, "*")
                },
                &|_| 0,
            )
            .unwrap_err();
            assert_eq!((e.status, e.code.as_deref()), (502, Some(NOT_CONFIGURED)));
            assert_eq!(
                e.message,
                "Provider 'anthropic' is not configured on this gateway: ANTHROPIC_API_KEY is not set"
            );
        }
        let smart = br#"{"model":"smart","messages":[{"role":"user","content":"hi"}]}"#;
        let p = plan(&rt, &facts(smart, "*"), &|_| 0).unwrap();
        assert_eq!(p.route.canonical, "openai/gpt-4o");
        let ids: Vec<String> = rt.model_ids().into_iter().map(|(id, _)| id).collect();
        assert_eq!(ids, ["openai/gpt-4o", "smart"]);
    }

    #[test]
    fn retries_follow_the_keys_within_max_attempts() {
        assert_eq!(retries(3, 2), 1);
        assert_eq!(retries(3, 5), 2);
        assert_eq!(retries(3, 1), 1);
        assert_eq!(retries(1, 4), 0);
        let p = plan(&rt(), &facts(CHAT, "*"), &|_| 0).unwrap();
        assert_eq!(header(&p, MAX_RETRIES), Some(Some("1")));
    }

    #[test]
    fn cooling_keys_are_skipped_and_all_cooling_is_503() {
        let rt = rt();
        let p = plan(&rt, &facts(CHAT, "*"), &|id| if id == "o1" { 1 } else { 0 }).unwrap();
        assert_eq!(header(&p, "authorization"), Some(Some("Bearer sk-2")));
        let e = plan(&rt, &facts(CHAT, "*"), &|_| 5_500).unwrap_err();
        assert_eq!(
            (e.status, e.code.as_deref(), e.retry_after),
            (503, Some("no_provider_key_available"), Some(6))
        );
        // The first key back decides; never less than 1 s.
        let e = plan(&rt, &facts(CHAT, "*"), &|id| {
            if id == "o1" {
                9_000
            } else {
                20
            }
        })
        .unwrap_err();
        assert_eq!(e.retry_after, Some(1));
    }

    #[test]
    fn messages_to_anthropic_go_on_as_sent_or_edited_at_the_model() {
        let rt = rt();
        let text = "a \\\"quoted\\\" line\\n".repeat(4000);
        let body = |model: &str, stream: &str| {
            format!(
                r#"{{"messages":[{{"role":"user","content":"{text}"}}],"stream":{stream},"model":"{model}","max_tokens":9}}"#
            )
            .into_bytes()
        };
        let messages = |body: &[u8], front: Front| {
            plan(
                &rt,
                &RequestFacts {
                    endpoint: Endpoint::Chat,
                    front,
                    ..facts(body, "*")
                },
                &|_| 0,
            )
        };
        // A bare model: the client's bytes, untouched.
        let sent = body("claude", "true");
        let p = messages(&sent, Front::Messages).unwrap();
        assert_eq!((p.body.len(), p.body_replaces), (0, 0));
        assert!(p.route.stream);
        assert_eq!(header(&p, ":path"), Some(Some("/v1/messages")));
        // Named another way: only the model is rewritten, at the body's start.
        for model in ["anthropic/claude", "smart"] {
            let sent = body(model, "false");
            let p = messages(&sent, Front::Messages).unwrap();
            assert!(
                p.body_replaces < sent.len() && p.body_replaces > 0,
                "{model}"
            );
            assert!(!p.route.stream);
            let mut want: Value = serde_json::from_slice(&sent).unwrap();
            want["model"] = json!("claude");
            let got: Value = serde_json::from_slice(&p.upstream_body(&sent)).unwrap();
            assert_eq!(got, want, "{model}");
        }
        // count_tokens ignores `stream`; a `stream` that is no boolean is refused.
        let p = messages(&body("claude", "true"), Front::CountTokens).unwrap();
        assert_eq!(header(&p, ":path"), Some(Some("/v1/messages/count_tokens")));
        assert!(!p.route.stream);
        let e = messages(&body("claude", "1"), Front::Messages).unwrap_err();
        assert_eq!((e.status, e.param.as_deref()), (400, Some("stream")));
    }
}
