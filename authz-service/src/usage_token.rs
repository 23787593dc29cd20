//! The gateway's credential on `POST /v1/usage`: a shared secret read from a
//! file. Envoy's `tollgate_authz_http` cluster injects it into every usage
//! report as [`tollgate_wire::header::USAGE_TOKEN`] (an upstream
//! `credential_injector` filter reading the same file), so no other process
//! that can reach the HTTP port can charge a tenant.
//!
//! Why a secret file and not a Unix socket or mTLS: a socket does not cross
//! pods in Kubernetes, and mTLS needs a CA and certificate rotation for one
//! internal call; one file (a Kubernetes Secret mounted in both pods, a
//! compose secret, a 0600 file natively) works in every deployment.
//!
//! The admin API's token (`--admin-token-file`) is the same kind of secret,
//! read and compared the same way ([`UsageToken::from_file_named`]).

use std::path::Path;

use sha2::{Digest, Sha256};

/// Fewest bytes a usage token may have.
pub const MIN_LEN: usize = 16;

/// The expected token, kept as its SHA-256 only.
#[derive(Clone)]
pub struct UsageToken {
    digest: [u8; 32],
}

impl std::fmt::Debug for UsageToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UsageToken(..)")
    }
}

impl UsageToken {
    /// A token from its text: at least [`MIN_LEN`] bytes of visible ASCII,
    /// nothing else (Envoy sends the file's bytes verbatim, so a trailing
    /// newline would make every report fail: refuse it here, loudly).
    pub fn new(token: &str) -> Result<UsageToken, String> {
        UsageToken::named(token, "usage token")
    }

    /// A token of another role (`what`: "admin token"), same rules.
    pub fn named(token: &str, what: &str) -> Result<UsageToken, String> {
        if token.len() < MIN_LEN || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!(
                "the {what} must be at least {MIN_LEN} visible ASCII characters, \
                 without spaces or a trailing newline (write it with printf, not echo)"
            ));
        }
        Ok(UsageToken {
            digest: Sha256::digest(token.as_bytes()).into(),
        })
    }

    /// Read the token from `path` (see [`UsageToken::new`]).
    pub fn from_file(path: &Path) -> Result<UsageToken, String> {
        UsageToken::from_file_named(path, "usage token")
    }

    /// Read a token of another role (`what`) from `path`.
    pub fn from_file_named(path: &Path, what: &str) -> Result<UsageToken, String> {
        let bytes = std::fs::read(path)
            .map_err(|e| format!("cannot read {what} file {}: {e}", path.display()))?;
        let text = String::from_utf8(bytes)
            .map_err(|_| format!("{what} file {}: not UTF-8", path.display()))?;
        UsageToken::named(&text, what).map_err(|e| format!("{what} file {}: {e}", path.display()))
    }

    /// Does `presented` match? Compares digests without an early exit, so
    /// the time taken says nothing about how much of a guess was right.
    pub fn matches(&self, presented: &[u8]) -> bool {
        let d: [u8; 32] = Sha256::digest(presented).into();
        d.iter()
            .zip(self.digest.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_only_the_token() {
        let t = UsageToken::new("0123456789abcdef-gateway").unwrap();
        assert!(t.matches(b"0123456789abcdef-gateway"));
        assert!(!t.matches(b"0123456789abcdef-gatewaz"));
        assert!(!t.matches(b"0123456789abcdef-gateway\n"));
        assert!(!t.matches(b""));
        assert_eq!(format!("{t:?}"), "UsageToken(..)");
    }

    #[test]
    fn refuses_weak_or_malformed_tokens() {
        for bad in [
            "",
            "short",
            "0123456789abcdef\n",
            "0123456789 abcdef",
            "0123456789abcdeé",
        ] {
            let e = UsageToken::new(bad).unwrap_err();
            assert!(e.contains("at least 16 visible ASCII"), "{bad:?}: {e}");
        }
    }
}
