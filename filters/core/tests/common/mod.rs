// Shared test helpers (included with `mod common;`).
#![allow(dead_code)]

use tollgate_core::config::Runtime;
use tollgate_core::flow::Flow;
use tollgate_core::host::fake::FakeHost;
use tollgate_core::host::Action;

pub const CONFIG: &str = r#"{
  "providers": {
    "openai": {"kind": "openai", "cluster": "openai", "base_path": "/v1",
      "key_affinity": false, "prompt_cache_key": false,
      "models": ["gpt-4o-mini", "gpt-4o", "text-embedding-3-small"],
      "keys": [{"id": "openai-1", "value": "sk-one", "weight": 3},
               {"id": "openai-2", "value": "sk-two", "weight": 1}]},
    "anthropic": {"kind": "anthropic", "cluster": "anthropic", "base_path": "/v1", "version": "2023-06-01",
      "key_affinity": false,
      "models": {"claude-sonnet-4-5": {"max_tokens": 8192}, "claude-haiku-4-5": {}},
      "max_tokens": 2048,
      "keys": [{"id": "anthropic-1", "value": "ak-one"}, {"id": "anthropic-2", "value_env": "TG_TEST_ANTHROPIC_KEY"}]},
    "mistral": {"kind": "openai", "cluster": "mistral", "base_path": "/mistral/v1", "stream_usage": false,
      "models": ["mistral-small-latest"], "keys": [{"id": "mistral-1", "value": "mk-one"}]}
  },
  "aliases": {"fast": "openai/gpt-4o-mini", "smart": "anthropic/claude-sonnet-4-5"},
  "key_cooldown_seconds": 30, "max_body_bytes": 4096
}"#;

pub fn env(name: &str) -> Option<String> {
    (name == "TG_TEST_ANTHROPIC_KEY").then(|| "ak-two".to_string())
}

pub fn runtime() -> Runtime {
    Runtime::from_json(CONFIG.as_bytes(), &env).unwrap()
}

/// Runs `f` with the chat request context of `model` (`provider/model` or
/// an alias) in `rt`, and the provider's kind.
pub fn with_chat_ctx<R>(
    rt: &Runtime,
    model: &str,
    f: impl FnOnce(tollgate_core::config::Kind, &tollgate_core::translate::RequestCtx<'_>) -> R,
) -> R {
    with_ctx(
        rt,
        model,
        tollgate_core::translate::Endpoint::Chat,
        |p, ctx| f(p.kind(), ctx),
    )
}

/// Runs `f` with the request context of `model` at `endpoint` in `rt`, and
/// the model's provider.
pub fn with_ctx<R>(
    rt: &Runtime,
    model: &str,
    endpoint: tollgate_core::translate::Endpoint,
    f: impl FnOnce(&tollgate_core::config::Provider, &tollgate_core::translate::RequestCtx<'_>) -> R,
) -> R {
    let r = rt.resolve(model).unwrap();
    let p = rt.provider(r.provider).unwrap();
    let ctx = tollgate_core::translate::RequestCtx {
        provider: p,
        model: &r.model,
        model_cfg: &p.models[&r.model],
        endpoint,
        cache_breakpoints: false,
    };
    f(p, &ctx)
}

/// The request's headers, then its whole body (`h.req_body`), through `f`:
/// the filter waits for the body, then sends it upstream (no local reply).
pub fn send_request(f: &mut Flow, h: &mut FakeHost) {
    assert_eq!(f.on_request_headers(h, false), Action::Pause);
    let n = h.req_body.len();
    assert_eq!(
        f.on_request_body(h, n, true),
        Action::Continue,
        "{:?}",
        h.local_reply
    );
}
