//! AWS Signature Version 4 verification of a request, as AWS services do it:
//! rebuild the canonical request from what was received (the raw path
//! URI-encoded once more, as for every service but S3; sorted, re-encoded
//! query; the signed headers; the SHA-256 of the body actually received),
//! derive the signing key from the configured secret and compare.

use sha2::{Digest, Sha256};

/// HMAC-SHA256 (RFC 2104).
pub fn hmac(key: &[u8], msg: &[u8]) -> [u8; 32] {
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut ipad = [0x36u8; 64];
    let mut opad = [0x5cu8; 64];
    for i in 0..64 {
        ipad[i] ^= k[i];
        opad[i] ^= k[i];
    }
    let inner = Sha256::new()
        .chain_update(ipad)
        .chain_update(msg)
        .finalize();
    let out = Sha256::new()
        .chain_update(opad)
        .chain_update(inner)
        .finalize();
    out.into()
}

/// URI-encode every byte except unreserved characters (and `/` if asked).
pub fn uri_encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for b in s.bytes() {
        let c = b as char;
        if c.is_ascii_alphanumeric() || "-_.~".contains(c) || (keep_slash && c == '/') {
            out.push(c);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The parsed `Authorization` header.
#[derive(Debug, PartialEq, Eq)]
pub struct AuthHeader {
    pub access_key_id: String,
    pub date: String,
    pub region: String,
    pub service: String,
    pub signed_headers: Vec<String>,
    pub signature: String,
}

pub fn parse_authorization(h: &str) -> Option<AuthHeader> {
    let rest = h.strip_prefix("AWS4-HMAC-SHA256 ")?;
    let (mut cred, mut signed, mut sig) = (None, None, None);
    for part in rest.split(',') {
        let (k, v) = part.trim().split_once('=')?;
        match k {
            "Credential" => cred = Some(v),
            "SignedHeaders" => signed = Some(v),
            "Signature" => sig = Some(v),
            _ => return None,
        }
    }
    let c: Vec<&str> = cred?.split('/').collect();
    if c.len() != 5 || c[4] != "aws4_request" {
        return None;
    }
    Some(AuthHeader {
        access_key_id: c[0].to_string(),
        date: c[1].to_string(),
        region: c[2].to_string(),
        service: c[3].to_string(),
        signed_headers: signed?.split(';').map(str::to_string).collect(),
        signature: sig?.to_string(),
    })
}

/// Why a signature was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum SigError {
    Malformed(String),
    Expired(String),
    Scope(String),
    Mismatch,
}

/// Seconds since the epoch of `YYYYMMDDTHHMMSSZ`.
pub fn parse_amz_date(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let n = |a: usize, z: usize| s.get(a..z)?.parse::<i64>().ok();
    let (y, mo, d, h, mi, se) = (
        n(0, 4)?,
        n(4, 6)?,
        n(6, 8)?,
        n(9, 11)?,
        n(11, 13)?,
        n(13, 15)?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm).
    let y2 = if mo <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + mi * 60 + se)
}

/// The request as received.
pub struct SignedRequest<'a> {
    pub method: &'a str,
    /// Raw path exactly as sent (percent-encoding kept).
    pub raw_path: &'a str,
    pub query: Option<&'a str>,
    /// Header lookup by lowercase name; all values of that header.
    pub header: &'a dyn Fn(&str) -> Vec<String>,
    pub body: &'a [u8],
}

fn canonical_query(q: Option<&str>) -> String {
    let Some(q) = q.filter(|q| !q.is_empty()) else {
        return String::new();
    };
    let mut pairs: Vec<(String, String)> = q
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            let dk = crate::app::percent_decode(k).unwrap_or_else(|| k.to_string());
            let dv = crate::app::percent_decode(v).unwrap_or_else(|| v.to_string());
            (uri_encode(&dk, false), uri_encode(&dv, false))
        })
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// The canonical request string.
pub fn canonical_request(r: &SignedRequest<'_>, signed_headers: &[String]) -> String {
    let mut s = String::with_capacity(512);
    s.push_str(r.method);
    s.push('\n');
    s.push_str(&uri_encode(r.raw_path, true));
    s.push('\n');
    s.push_str(&canonical_query(r.query));
    s.push('\n');
    for h in signed_headers {
        let vals = (r.header)(h);
        let joined: Vec<String> = vals
            .iter()
            .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect();
        s.push_str(h);
        s.push(':');
        s.push_str(&joined.join(","));
        s.push('\n');
    }
    s.push('\n');
    s.push_str(&signed_headers.join(";"));
    s.push('\n');
    s.push_str(&hex::encode(Sha256::digest(r.body)));
    s
}

/// The signature of a request for a secret, scope and time.
pub fn signature(secret: &str, a: &AuthHeader, amz_date: &str, creq: &str) -> String {
    let scope = format!("{}/{}/{}/aws4_request", a.date, a.region, a.service);
    let sts = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex::encode(Sha256::digest(creq.as_bytes()))
    );
    let k_date = hmac(format!("AWS4{secret}").as_bytes(), a.date.as_bytes());
    let k_region = hmac(&k_date, a.region.as_bytes());
    let k_service = hmac(&k_region, a.service.as_bytes());
    let k_signing = hmac(&k_service, b"aws4_request");
    hex::encode(hmac(&k_signing, sts.as_bytes()))
}

fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Verify `r` signed as `a` with `secret`, for `region`/`service`, at `now`.
pub fn verify(
    r: &SignedRequest<'_>,
    a: &AuthHeader,
    secret: &str,
    region: &str,
    service: &str,
    now: i64,
) -> Result<(), SigError> {
    let amz_date = (r.header)("x-amz-date").into_iter().next().ok_or_else(|| {
        SigError::Malformed(
            "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header."
                .into(),
        )
    })?;
    let t = parse_amz_date(&amz_date)
        .ok_or_else(|| SigError::Malformed("Invalid X-Amz-Date".into()))?;
    if !amz_date.starts_with(&a.date) {
        return Err(SigError::Scope("Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP".into()));
    }
    if a.region != region {
        return Err(SigError::Scope(format!(
            "Credential should be scoped to a valid region. (got '{}', expected '{region}')",
            a.region
        )));
    }
    if a.service != service {
        return Err(SigError::Scope(format!(
            "Credential should be scoped to correct service: '{service}'."
        )));
    }
    if !a.signed_headers.iter().any(|h| h == "host") {
        return Err(SigError::Malformed(
            "'Host' must be a 'SignedHeader' in the AWS Authorization.".into(),
        ));
    }
    if (now - t).abs() > 300 {
        return Err(SigError::Expired(format!("Signature expired: {amz_date} is now earlier or later than the allowed 5 minutes of the server time.")));
    }
    let creq = canonical_request(r, &a.signed_headers);
    let expected = signature(secret, a, &amz_date, &creq);
    if ct_eq(expected.as_bytes(), a.signature.as_bytes()) {
        Ok(())
    } else {
        Err(SigError::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn hmac_rfc4231_case_2() {
        let out = hmac(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(out),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn dates() {
        assert_eq!(parse_amz_date("19700101T000000Z"), Some(0));
        assert_eq!(parse_amz_date("20150830T123600Z"), Some(1_440_938_160));
        assert_eq!(parse_amz_date("2015-08-30"), None);
    }

    #[test]
    fn path_is_encoded_again() {
        assert_eq!(
            uri_encode("/model/a.b-v1%3A0/converse", true),
            "/model/a.b-v1%253A0/converse"
        );
    }

    // The AWS SigV4 test suite's "get-vanilla-query-order-key-case" vector
    // (query parameters out of order; service "service", us-east-1).
    #[test]
    fn aws_test_suite_vector() {
        let headers = |n: &str| -> Vec<String> {
            match n {
                "host" => vec!["example.amazonaws.com".into()],
                "x-amz-date" => vec!["20150830T123600Z".into()],
                _ => vec![],
            }
        };
        let r = SignedRequest {
            method: "GET",
            raw_path: "/",
            query: Some("Param2=value2&Param1=value1"),
            header: &headers,
            body: b"",
        };
        let a = parse_authorization("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500").unwrap();
        let now = parse_amz_date("20150830T123600Z").unwrap();
        let secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
        assert_eq!(verify(&r, &a, secret, "us-east-1", "service", now), Ok(()));
        assert_eq!(
            verify(&r, &a, "wrong", "us-east-1", "service", now),
            Err(SigError::Mismatch)
        );
        assert!(matches!(
            verify(&r, &a, secret, "us-east-1", "service", now + 3600),
            Err(SigError::Expired(_))
        ));
        assert!(matches!(
            verify(&r, &a, secret, "eu-west-1", "service", now),
            Err(SigError::Scope(_))
        ));
        let r2 = SignedRequest {
            query: Some("Param2=value2&Param1=value9"),
            ..r
        };
        assert_eq!(
            verify(&r2, &a, secret, "us-east-1", "service", now),
            Err(SigError::Mismatch)
        );
    }
}
