//! The SigV4 signer against signatures botocore made for the same requests
//! (`tests/data/sigv4_vectors.json`; regenerate with
//! `.venv/bin/python filters/core/tests/gen_sigv4_vectors.py`).

use serde_json::Value;
use tollgate_core::credentials::sigv4::{sign, SignInput};

#[test]
fn matches_botocore() {
    let doc: Value = serde_json::from_str(include_str!("data/sigv4_vectors.json")).unwrap();
    let vectors = doc["vectors"].as_array().unwrap();
    assert!(vectors.len() >= 5);
    for v in vectors {
        let s = |k: &str| v[k].as_str().unwrap();
        let headers = sign(&SignInput {
            method: s("method"),
            path: s("path"),
            host: s("host"),
            content_type: s("content_type"),
            body: s("body").as_bytes(),
            access_key_id: s("access_key_id"),
            secret: s("secret"),
            session_token: v["session_token"].as_str(),
            region: s("region"),
            service: s("service"),
            now_ms: v["now_ms"].as_u64().unwrap(),
        });
        let expected = v["expected"].as_object().unwrap();
        assert_eq!(headers.len(), expected.len(), "{}", s("name"));
        for (name, value) in headers {
            assert_eq!(
                Some(value.as_str()),
                expected[name].as_str(),
                "{}: header {name}",
                s("name")
            );
        }
    }
}
