//! AWS Signature Version 4 verification of a request, as AWS services do it:
//! parse the `Authorization` header, check the scope and clock skew, then
//! re-sign what was received with AWS's own signer (`aws-sigv4`) and the
//! configured secret, and compare in constant time. The mock never computes
//! a canonical request or an HMAC itself, so it checks the gateway's signer
//! against AWS's instead of mirroring it.

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use std::time::{Duration, UNIX_EPOCH};

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

/// The signature AWS's own signer (`aws-sigv4`) computes for the received
/// request: the signed headers exactly as received (`x-amz-date` comes from
/// `t`), the raw path (the signer URI-encodes it once more, as every
/// service but S3 does), the body actually received.
fn expected_signature(
    r: &SignedRequest<'_>,
    a: &AuthHeader,
    secret: &str,
    t: i64,
) -> Result<String, SigError> {
    let malformed = |_| SigError::Malformed("Invalid request for signing".into());
    let host = (r.header)("host").into_iter().next().unwrap_or_default();
    let uri = match r.query {
        Some(q) => format!("http://{host}{}?{q}", r.raw_path),
        None => format!("http://{host}{}", r.raw_path),
    };
    // Every signed header (the signer adds host and x-amz-date itself).
    let mut headers: Vec<(&str, String)> = Vec::with_capacity(a.signed_headers.len());
    for name in &a.signed_headers {
        if name != "x-amz-date" {
            for v in (r.header)(name) {
                headers.push((name.as_str(), v));
            }
        }
    }
    let request = SignableRequest::new(
        r.method,
        uri,
        headers.iter().map(|(k, v)| (*k, v.as_str())),
        SignableBody::Bytes(r.body),
    )
    .map_err(malformed)?;
    // Sign what the client signed: no header is excluded by default here.
    let mut settings = SigningSettings::default();
    settings.excluded_headers = None;
    let identity: Identity =
        Credentials::new(a.access_key_id.as_str(), secret, None, None, "mock-llm").into();
    let time = UNIX_EPOCH + Duration::from_secs(u64::try_from(t).unwrap_or(0));
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(&a.region)
        .name(&a.service)
        .time(time)
        .settings(settings)
        .build()
        .map_err(|_| SigError::Malformed("Invalid credential scope".into()))?
        .into();
    let (_, signature) = sign(request, &params).map_err(malformed)?.into_parts();
    Ok(signature)
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
    let expected = expected_signature(r, a, secret, t)?;
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
    fn dates() {
        assert_eq!(parse_amz_date("19700101T000000Z"), Some(0));
        assert_eq!(parse_amz_date("20150830T123600Z"), Some(1_440_938_160));
        assert_eq!(parse_amz_date("2015-08-30"), None);
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
