//! `tollgate-authz keygen`: a new random virtual key and the policy lines
//! that hold its SHA-256 (the key itself is shown once, stored nowhere).

use rand::distr::{Alphanumeric, SampleString};

use crate::policy::hash_key;

/// A new virtual key: `tg-` and 40 random alphanumerics (~238 bits).
pub fn new_key() -> String {
    format!("tg-{}", Alphanumeric.sample_string(&mut rand::rng(), 40))
}

/// The YAML entry to paste under `keys:` for a key.
pub fn policy_entry(tenant: &str, id: &str, key: &str) -> String {
    format!(
        "  - id: {id}\n    tenant: {tenant}\n    sha256: {}\n    models: [\"*\"]\n",
        hash_key(key)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;

    #[test]
    fn generated_entry_authenticates_the_key() {
        let key = new_key();
        assert!(key.starts_with("tg-") && key.len() == 43);
        let yaml = format!(
            "version: 1\ntenants:\n  t1: {{}}\nkeys:\n{}",
            policy_entry("t1", "k1", &key)
        );
        let p = Policy::from_yaml(&yaml).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.authenticate(&key).map(|k| k.id.as_str()), Some("k1"));
        assert!(!yaml.contains(&key));
    }
}
