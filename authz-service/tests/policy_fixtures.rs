//! Invalid policy fixtures: one small file per case, each with its exact
//! error message. Plus the shipped policy, and `--validate` / `keygen` as a
//! user runs them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

use tollgate_authz::policy::Policy;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/invalid")
        .join(name)
}

const CASES: &[(&str, &str)] = &[
    ("empty_file.yaml", "policy file is empty"),
    ("not_yaml.yaml", "did not find expected ',' or '}' at line 4 column 1, while parsing a flow mapping at line 3 column 9"),
    ("missing_version.yaml", "missing field `version`"),
    ("bad_version.yaml", "unsupported policy version 2 (expected 1)"),
    (
        "unknown_field.yaml",
        "tenants.demo.limits: unknown field `requests_per_minut`, expected one of `requests_per_minute`, `tokens_per_minute`, `requests_per_day`, `tokens_per_day`, `max_concurrent_requests` at line 5 column 7",
    ),
    (
        "plaintext_key_field.yaml",
        "keys[0]: unknown field `key`, expected one of `id`, `tenant`, `sha256`, `models`, `limits`, `model_limits`, `budgets`, `cache_breakpoints`, `mcp` at line 7 column 5",
    ),
    ("missing_sha256.yaml", "keys[0]: missing field `sha256` at line 5 column 5"),
    (
        "bad_redis_failure.yaml",
        "defaults.redis_failure: unknown variant `maybe`, expected one of `open`, `closed`, `envoy` at line 3 column 18",
    ),
    (
        "negative_limit.yaml",
        "tenants.demo.limits.requests_per_minute: invalid type: integer `-5`, expected u64 at line 5 column 28",
    ),
    ("zero_limit.yaml", "tenant \"demo\": limits.tokens_per_minute must be greater than 0"),
    ("zero_key_limit.yaml", "key \"k1\": limits.requests_per_day must be greater than 0"),
    ("zero_concurrency.yaml", "tenant \"demo\": limits.max_concurrent_requests must be greater than 0"),
    ("huge_concurrency.yaml", "key \"k1\": limits.max_concurrent_requests must be at most 1000000"),
    (
        "model_concurrency.yaml",
        "tenant \"demo\": model_limits.\"openai/gpt-4o\".max_concurrent_requests: concurrency caps are per key and per tenant, not per model",
    ),
    ("bad_tenant_name.yaml", "tenant \"demo{x}\": name must match [A-Za-z0-9._-]{1,64}"),
    ("bad_key_id.yaml", "key \"key with spaces\": id must match [A-Za-z0-9._-]{1,64}"),
    ("unknown_tenant.yaml", "key \"k1\": unknown tenant \"nobody\""),
    ("duplicate_key_id.yaml", "key \"k1\": duplicate id"),
    ("duplicate_hash.yaml", "key \"k2\": sha256 duplicates key \"k1\""),
    ("bad_sha256.yaml", "key \"k1\": sha256 must be 64 lowercase hex characters"),
    ("uppercase_sha256.yaml", "key \"k1\": sha256 must be 64 lowercase hex characters"),
    ("empty_models.yaml", "key \"k1\": models must not be empty"),
    ("wildcard_model_limit.yaml", "tenant \"demo\": model_limits key \"openai/*\" must be an exact model name"),
    ("unknown_time_zone.yaml", "tenant \"demo\": unknown time zone \"Europe/Atlantis\""),
    (
        "zero_budget.yaml",
        "key \"k1\": budgets.usd_per_month must be a decimal greater than 0 and at most 9000000 with at most 9 places",
    ),
    ("bad_soft_percent.yaml", "tenant \"demo\": budgets.soft_percent must be between 1 and 100"),
    (
        "empty_model_budget.yaml",
        "tenant \"demo\" model \"openai/gpt-4o\": a model budget needs usd_per_day, usd_per_month or rolling",
    ),
    (
        "bad_rolling_window.yaml",
        "tenant \"demo\" model \"openai/gpt-4o\": budgets.rolling[0].window: rolling window \"36h\" must be \"<hours>h\" (1 to 24) or \"<days>d\" (1 to 90)",
    ),
    (
        "nested_model_budget.yaml",
        "key \"k1\" model \"openai/gpt-4o\": budgets.models cannot be nested",
    ),
    (
        "bad_model_budget_name.yaml",
        "tenant \"demo\": budgets.models key \"open ai\" must be a model name or a pattern ending in *",
    ),
    (
        "bad_price.yaml",
        "prices: price of \"openai/gpt-4o-mini\": input must be a non-negative decimal with at most 6 places",
    ),
];

#[test]
fn every_invalid_fixture_fails_with_its_exact_message() {
    for (file, want) in CASES {
        match Policy::from_file(&fixture(file)) {
            Ok(_) => panic!("{file}: accepted"),
            Err(e) => assert_eq!(e.to_string(), *want, "{file}"),
        }
    }
}

#[test]
fn every_fixture_file_has_a_case() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/invalid");
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(
            CASES.iter().any(|(f, _)| *f == name),
            "{name} has no expected message"
        );
    }
}

#[test]
fn shipped_policy_is_valid_and_has_the_demo_key() {
    let p = Policy::from_file(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/policy.yaml"))
        .unwrap();
    let k = p.authenticate("tg-demo-key").unwrap();
    assert_eq!(
        (k.id.as_str(), k.tenant.as_str(), k.models_header.as_str()),
        ("demo-key", "demo", "*")
    );
    for (key, id) in [
        ("tg-test-rpm5", "rpm5-key"),
        ("tg-test-tpm", "tpm-key"),
        ("tg-test-closed", "closed-key"),
    ] {
        assert_eq!(p.authenticate(key).map(|k| k.id.as_str()), Some(id));
    }
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/policy.yaml"),
    )
    .unwrap();
    assert!(
        !text
            .lines()
            .any(|l| l.trim_start().starts_with("sha256: tg-")),
        "keys are stored hashed"
    );
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tollgate-authz"))
}

#[test]
fn validate_flag_exits_0_or_1_with_a_clear_message() {
    let ok = bin()
        .arg("--validate")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/policy.yaml"))
        .output()
        .unwrap();
    assert_eq!(ok.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&ok.stdout).contains(": OK (10 tenants, 10 keys)"));

    let bad = bin()
        .arg("--validate")
        .arg(fixture("unknown_tenant.yaml"))
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.ends_with(
            "unknown_tenant.yaml: invalid policy: key \"k1\": unknown tenant \"nobody\"\n"
        ),
        "{err}"
    );

    let sub = bin()
        .arg("validate")
        .arg(fixture("zero_limit.yaml"))
        .output()
        .unwrap();
    assert_eq!(sub.status.code(), Some(1));

    let missing = bin()
        .arg("--validate")
        .arg("/nonexistent/policy.yaml")
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr)
        .contains("cannot read policy file /nonexistent/policy.yaml"));
}

#[test]
fn keygen_prints_the_key_once_and_a_hash_entry_that_validates() {
    let out = bin()
        .args(["keygen", "--tenant", "demo", "--id", "new-key"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut lines = stdout.lines();
    let key = lines.next().unwrap();
    assert!(key.starts_with("tg-") && key.len() == 43, "{key}");
    let entry: String = lines.map(|l| format!("{l}\n")).collect();
    assert!(!entry.contains(key), "the key itself is never in the YAML");
    let yaml = format!("version: 1\ntenants:\n  demo: {{}}\nkeys:\n{entry}");
    let p = Policy::from_yaml(&yaml).unwrap();
    assert_eq!(p.authenticate(key).map(|k| k.id.as_str()), Some("new-key"));

    let bad = bin().args(["keygen", "--tenant", "demo"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--id <ID>"));
}
