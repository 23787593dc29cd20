//! Config validation: each invalid case with its exact message.

use crate::common;

use tollgate_core::config::{model_allowed, Runtime};

fn err(json: &str) -> String {
    match Runtime::from_json(json.as_bytes(), &common::env) {
        Ok(_) => panic!("accepted: {json}"),
        Err(e) => e.to_string(),
    }
}

const P: &str = "invalid tollgate plugin configuration: ";

fn one(provider: &str) -> String {
    format!(r#"{{"providers": {{"p": {provider}}}}}"#)
}

#[test]
fn valid_config_compiles() {
    let rt = common::runtime();
    assert_eq!(rt.providers.len(), 3);
    assert_eq!(rt.max_body_bytes, 4096);
    assert_eq!(rt.cooldown_ms, 30_000);
    let r = rt.resolve("smart").unwrap();
    assert_eq!(r.canonical, "anthropic/claude-sonnet-4-5");
    let p = rt.provider(r.provider).unwrap();
    assert_eq!(p.models["claude-sonnet-4-5"].max_tokens, 8192);
    assert_eq!(p.models["claude-haiku-4-5"].max_tokens, 2048);
    assert_eq!(p.keys[1].value, "ak-two");
    assert!(
        !format!("{:?}", p.keys).contains("ak-"),
        "Debug must redact key values"
    );
    assert!(rt.resolve("openai/gpt-5").is_none());
    assert!(rt.resolve("nope").is_none());
    assert_eq!(
        rt.resolve("mistral/mistral-small-latest").unwrap().model,
        "mistral-small-latest"
    );
    // Defaults.
    let rt = Runtime::from_json(
        one(r#"{"kind":"openai","cluster":"c","models":["m"],"keys":[{"id":"k","value":"v"}]}"#)
            .as_bytes(),
        &|_| None,
    )
    .unwrap();
    assert_eq!(rt.max_body_bytes, 8 * 1024 * 1024);
    assert_eq!(rt.cooldown_ms, 30_000);
    assert_eq!(rt.usage.as_ref().unwrap().cluster, "tollgate_authz_http");
    assert_eq!(rt.providers[0].base_path, "/v1");
}

#[test]
fn invalid_configs_exact_messages() {
    let key = r#"[{"id":"k","value":"v"}]"#;
    let cases: Vec<(String, String)> = vec![
        ("{".into(), "EOF while parsing an object at line 1 column 1".into()),
        (r#"{"providers": {}}"#.into(), "providers: at least one provider is required".into()),
        (r#"{"provider": {}}"#.into(), "provider: unknown field `provider`, expected one of `providers`, `aliases`, `key_cooldown_seconds`, `max_body_bytes`, `usage_cluster`, `usage_path`, `usage_timeout_ms`, `usage_flush_ms`, `bare_model_provider`, `max_attempts`, `failure_cooldown_seconds`, `failure_threshold` at line 1 column 11".into()),
        (r#"{"providers": {"p": {"kind": "openai", "cluster": "c", "models": ["m"], "keys": [{"id": "k", "value": "v"}]}}, "bare_model_provider": "nope"}"#.into(), "bare_model_provider: 'nope' is not a configured provider".into()),
        (one(&format!(r#"{{"kind":"vertex","cluster":"c","models":["m"],"keys":{key}}}"#)),
            "providers.p.kind: unknown variant `vertex`, expected one of `openai`, `anthropic`, `azure`, `gemini`, `bedrock` at line 1 column 36".into()),
        (one(&format!(r#"{{"kind":"bedrock","cluster":"c","models":["m"],"keys":{key}}}"#)), "providers.p.region: required for kind bedrock".into()),
        (one(&format!(r#"{{"kind":"bedrock","cluster":"c","region":"US East","models":["m"],"keys":{key}}}"#)), "providers.p.region: must be an AWS region such as us-east-1".into()),
        (one(&format!(r#"{{"kind":"gemini","cluster":"c","region":"us-east-1","models":["m"],"keys":{key}}}"#)), "providers.p.region: only valid for kind bedrock".into()),
        (one(&format!(r#"{{"kind":"bedrock","cluster":"c","region":"us-east-1","models":["m"],"keys":{key}}}"#)),
            "providers.p.keys[0].access_key_id: required for kind bedrock (value is the secret access key)".into()),
        (one(r#"{"kind":"openai","cluster":"c","forward_headers":["OpenAI-Organization","Authorization"],"models":["m"],"keys":[{"id":"k","value":"v"}]}"#),
         "providers.p.forward_headers[1]: 'authorization' carries credentials or gateway state and is never forwarded".into()),
        (one(r#"{"kind":"openai","cluster":"c","forward_headers":["x-tollgate-tenant"],"models":["m"],"keys":[{"id":"k","value":"v"}]}"#),
         "providers.p.forward_headers[0]: 'x-tollgate-tenant' carries credentials or gateway state and is never forwarded".into()),
        (one(r#"{"kind":"openai","cluster":"c","forward_headers":["a b"],"models":["m"],"keys":[{"id":"k","value":"v"}]}"#),
         "providers.p.forward_headers[0]: a header name has only letters, digits, '-' and '_'".into()),
        (one(r#"{"kind":"bedrock","cluster":"c","region":"us-east-1","models":["m"],"keys":[{"id":"k","value":"v","access_key_id":"AK-1"}]}"#),
            "providers.p.keys[0].access_key_id: must be letters and digits".into()),
        (one(r#"{"kind":"azure","cluster":"c","models":["m"],"keys":[{"id":"k","value":"v","access_key_id":"AK"}]}"#),
            "providers.p.keys[0].access_key_id: only valid for kind bedrock".into()),
        (one(r#"{"kind":"gemini","cluster":"c","models":["m"],"keys":[{"id":"k","value":"v","session_token":"t"}]}"#),
            "providers.p.keys[0].session_token: only valid for kind bedrock".into()),
        (one(r#"{"kind":"bedrock","cluster":"c","region":"us-east-1","models":["m"],"keys":[{"id":"k","value":"v","access_key_id":"AK","session_token":"t","session_token_env":"TG_TEST_ANTHROPIC_KEY"}]}"#),
            "providers.p.keys[0]: at most one of session_token and session_token_env".into()),
        (one(r#"{"kind":"bedrock","cluster":"c","region":"us-east-1","models":["m"],"keys":[{"id":"k","value":"v","access_key_id":"AK","session_token_env":"NOPE"}]}"#),
            "providers.p.keys[0].session_token_env: environment variable NOPE is not set (list it in vm_config.environment_variables.host_env_keys)".into()),
        (one(&format!(r#"{{"kind":"openai","cluster":"c","api_version":"2024-10-21","models":["m"],"keys":{key}}}"#)), "providers.p.api_version: only valid for kind azure".into()),
        (one(&format!(r#"{{"kind":"azure","cluster":"c","api_version":"a b","models":["m"],"keys":{key}}}"#)), "providers.p.api_version: must be a version such as 2024-10-21".into()),
        (one(&format!(r#"{{"kind":"gemini","cluster":"c","deployments":{{"m":"d"}},"models":["m"],"keys":{key}}}"#)), "providers.p.deployments: only valid for kind azure".into()),
        (one(&format!(r#"{{"kind":"azure","cluster":"c","deployments":{{"x":"d"}},"models":["m"],"keys":{key}}}"#)), "providers.p.deployments.x: not one of providers.p.models".into()),
        (one(&format!(r#"{{"kind":"azure","cluster":"c","deployments":{{"m":"d/e"}},"models":["m"],"keys":{key}}}"#)),
            "providers.p.deployments.m: deployment names may contain only letters, digits, '-', '_' and '.'".into()),
        (one(r#"{"kind":"openai","cluster":"c","models":["m"],"keys":[{"id":"k","value":"v","weigth":2}]}"#),
            "providers.p.keys[0].weigth: unknown field `weigth`, expected one of `id`, `value`, `value_env`, `weight`, `models`, `access_key_id`, `session_token`, `session_token_env` at line 1 column 104".into()),
        (one(&format!(r#"{{"kind":"openai","cluster":"","models":["m"],"keys":{key}}}"#)), "providers.p.cluster: must not be empty".into()),
        (one(&format!(r#"{{"kind":"openai","cluster":"c","base_path":"v1","models":["m"],"keys":{key}}}"#)), "providers.p.base_path: must start with '/'".into()),
        (one(&format!(r#"{{"kind":"openai","cluster":"c","models":[],"keys":{key}}}"#)), "providers.p.models: at least one model is required".into()),
        (one(&format!(r#"{{"kind":"openai","cluster":"c","models":["m","m"],"keys":{key}}}"#)), "providers.p.models[1]: duplicate model m".into()),
        (one(r#"{"kind":"openai","cluster":"c","models":["m"],"keys":[]}"#), "providers.p.keys: at least one key is required".into()),
        (one(r#"{"kind":"openai","cluster":"c","models":["m"],"keys":[{"id":"k"}]}"#), "providers.p.keys[0]: exactly one of value and value_env is required".into()),
        (one(r#"{"kind":"openai","cluster":"c","models":["m"],"keys":[{"id":"k","value":"v","value_env":"X"}]}"#), "providers.p.keys[0]: exactly one of value and value_env is required".into()),
        (one(r#"{"kind":"openai","cluster":"c","models":["m"],"keys":[{"id":"k","value_env":"NOPE"}]}"#),
            "providers.p.keys[0].value_env: environment variable NOPE is not set (list it in vm_config.environment_variables.host_env_keys)".into()),
        (one(r#"{"kind":"openai","cluster":"c","models":["m"],"keys":[{"id":"k","value":"v","weight":0}]}"#), "providers.p.keys[0].weight: must be between 1 and 1000".into()),
        (one(r#"{"kind":"openai","cluster":"c","models":["m"],"keys":[{"id":"k","value":"v"},{"id":"k","value":"w"}]}"#),
            "providers.p.keys[1].id: duplicate key id k (also providers.p.keys[0])".into()),
        (one(r#"{"kind":"openai","cluster":"c","models":["m"],"keys":[{"id":"k","value":"v","models":["x"]}]}"#), "providers.p.keys[0].models[0]: x is not one of providers.p.models".into()),
        (one(r#"{"kind":"openai","cluster":"c","models":["m","n"],"keys":[{"id":"k","value":"v","models":["m"]}]}"#), "providers.p.models: no key may serve model n".into()),
        (one(r#"{"kind":"openai","cluster":"c","version":"1","models":["m"],"keys":[{"id":"k","value":"v"}]}"#), "providers.p.version: only valid for kind anthropic".into()),
        (one(r#"{"kind":"anthropic","cluster":"c","stream_usage":false,"models":["m"],"keys":[{"id":"k","value":"v"}]}"#), "providers.p.stream_usage: only valid for kinds openai and azure".into()),
        (one(r#"{"kind":"azure","cluster":"c","responses_api":false,"models":["m"],"keys":[{"id":"k","value":"v"}]}"#), "providers.p.responses_api: only valid for kind openai".into()),
        (one(r#"{"kind":"openai","cluster":"c","models":{"m":{"max_tokens":5}},"keys":[{"id":"k","value":"v"}]}"#), "providers.p.models.m.max_tokens: only valid for kind anthropic".into()),
        (one(r#"{"kind":"anthropic","cluster":"c","models":{"m":{"max_tokens":0}},"keys":[{"id":"k","value":"v"}]}"#), "providers.p.models.m.max_tokens: must be greater than 0".into()),
        (one(r#"{"kind":"openai","cluster":"c","models":["m"],"keys":[{"id":"k","value":"a\nb"}]}"#), "providers.p.keys[0]: the key value contains control characters".into()),
        (r#"{"providers": {"a b": {"kind":"openai","cluster":"c","models":["m"],"keys":[{"id":"k","value":"v"}]}}}"#.into(),
            "providers.a b: provider names may contain only letters, digits, '-', '_' and '.'".into()),
        (r#"{"providers": {"p": {"kind":"openai","cluster":"c","models":["m"],"keys":[{"id":"k","value":"v"}]}}, "aliases": {"x": "p/nope"}}"#.into(),
            "aliases.x: p/nope is not a configured provider/model".into()),
        (r#"{"providers": {"p": {"kind":"openai","cluster":"c","models":["m"],"keys":[{"id":"k","value":"v"}]}}, "aliases": {"a/b": "p/m"}}"#.into(),
            "aliases.a/b: alias names must be non-empty and contain no '/'".into()),
        (r#"{"providers": {"p": {"kind":"openai","cluster":"c","models":["m"],"keys":[{"id":"k","value":"v"}]}}, "max_body_bytes": 0}"#.into(),
            "max_body_bytes: must be greater than 0".into()),
        (r#"{"providers": {"p": {"kind":"openai","cluster":"c","models":["m"],"keys":[{"id":"k","value":"v"}]}}, "usage_flush_ms": 60001}"#.into(),
            "usage_flush_ms: at most 60000 (a minute of unreported usage)".into()),
        (r#"{"providers": {"p": {"kind":"openai","cluster":"c","models":["m"],"keys":[{"id":"k","value":"v"}]}}, "max_attempts": 0}"#.into(),
            "max_attempts: must be between 1 and 10".into()),
        (r#"{"providers": {"p": {"kind":"openai","cluster":"c","models":["m"],"keys":[{"id":"k","value":"v"}]}}, "key_cooldown_seconds": -1}"#.into(),
            "key_cooldown_seconds: invalid value: integer `-1`, expected u64 at line 1 column 127".into()),
    ];
    let mut bad = Vec::new();
    for (json, msg) in cases {
        let got = err(&json);
        if got != format!("{P}{msg}") {
            bad.push(format!("{json}\n  got:  {got}\n  want: {P}{msg}"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn key_values_never_in_errors() {
    let e = err(
        r#"{"providers": {"p": {"kind":"openai","cluster":"c","models":["m"],"keys":[{"id":"k","value":"sk-secret","weight":0}]}}}"#,
    );
    assert!(!e.contains("sk-secret"), "{e}");
}

#[test]
fn allow_list_patterns() {
    assert!(model_allowed("*", &["openai/gpt-4o"]));
    assert!(model_allowed("openai/*", &["openai/gpt-4o"]));
    assert!(model_allowed(
        "anthropic/*, openai/gpt-4o",
        &["openai/gpt-4o"]
    ));
    assert!(model_allowed("fast", &["fast", "openai/gpt-4o-mini"]));
    assert!(!model_allowed("openai/gpt-4o", &["openai/gpt-4o-mini"]));
    assert!(!model_allowed("", &["openai/gpt-4o"]));
    assert!(!model_allowed(" , ", &["openai/gpt-4o"]));
}

#[test]
fn a_session_token_is_read_from_the_environment() {
    let json = one(
        r#"{"kind":"bedrock","cluster":"c","region":"us-east-1","models":["m"],"keys":[{"id":"k","value":"v","access_key_id":"AK","session_token_env":"TG_TEST_ANTHROPIC_KEY"}]}"#,
    );
    let rt = Runtime::from_json(json.as_bytes(), &common::env).unwrap();
    let key = &rt.provider(0).unwrap().keys[0];
    assert_eq!(key.session_token.as_deref(), Some("ak-two"));
}
