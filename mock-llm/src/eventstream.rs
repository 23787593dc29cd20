//! AWS event-stream binary framing (`application/vnd.amazon.eventstream`).
//!
//! A message is: total length (u32 BE), headers length (u32 BE), CRC32 of
//! those 8 bytes, headers, payload, CRC32 of everything before it. A header
//! is: name length (u8), name, value type (u8; 7 = string), value length
//! (u16 BE), value. CRC32 is the IEEE polynomial (as zlib's crc32).

use bytes::Bytes;

const fn crc_table() -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

static TABLE: [u32; 256] = crc_table();

/// CRC32 (IEEE) of `data`.
pub fn crc32(data: &[u8]) -> u32 {
    let mut c = 0xFFFF_FFFFu32;
    for b in data {
        c = TABLE[((c ^ *b as u32) & 0xFF) as usize] ^ (c >> 8);
    }
    c ^ 0xFFFF_FFFF
}

/// Encode one message with string headers.
pub fn encode(headers: &[(&str, &str)], payload: &[u8]) -> Bytes {
    let mut h = Vec::with_capacity(96);
    for (name, value) in headers {
        h.push(name.len() as u8);
        h.extend_from_slice(name.as_bytes());
        h.push(7);
        h.extend_from_slice(&(value.len() as u16).to_be_bytes());
        h.extend_from_slice(value.as_bytes());
    }
    let total = 12 + h.len() + payload.len() + 4;
    let mut m = Vec::with_capacity(total);
    m.extend_from_slice(&(total as u32).to_be_bytes());
    m.extend_from_slice(&(h.len() as u32).to_be_bytes());
    let pc = crc32(&m);
    m.extend_from_slice(&pc.to_be_bytes());
    m.extend_from_slice(&h);
    m.extend_from_slice(payload);
    let mc = crc32(&m);
    m.extend_from_slice(&mc.to_be_bytes());
    Bytes::from(m)
}

/// An event of a Bedrock stream.
pub fn event(event_type: &str, payload: &[u8]) -> Bytes {
    encode(
        &[
            (":event-type", event_type),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        payload,
    )
}

/// An exception in a Bedrock stream.
pub fn exception(exception_type: &str, payload: &[u8]) -> Bytes {
    encode(
        &[
            (":exception-type", exception_type),
            (":content-type", "application/json"),
            (":message-type", "exception"),
        ],
        payload,
    )
}

/// Decode one message: (headers, payload, bytes used). For tests and tools.
/// A decoded message: headers, payload, bytes consumed.
pub type Decoded = (Vec<(String, String)>, Vec<u8>, usize);

pub fn decode(buf: &[u8]) -> Result<Decoded, String> {
    if buf.len() < 16 {
        return Err("short prelude".into());
    }
    let be = |i: usize| u32::from_be_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]);
    let total = be(0) as usize;
    let hlen = be(4) as usize;
    if crc32(&buf[..8]) != be(8) {
        return Err("prelude crc".into());
    }
    if buf.len() < total || total < 16 + hlen {
        return Err("short message".into());
    }
    if crc32(&buf[..total - 4]) != be(total - 4) {
        return Err("message crc".into());
    }
    let get = |a: usize, b: usize| buf.get(a..b).ok_or_else(|| "malformed headers".to_string());
    let mut hs = Vec::new();
    let mut i = 12;
    while i < 12 + hlen {
        let nl = get(i, i + 1)?[0] as usize;
        let name = String::from_utf8_lossy(get(i + 1, i + 1 + nl)?).into_owned();
        i += 1 + nl;
        let t = get(i, i + 3)?;
        if t[0] != 7 {
            return Err("non-string header".into());
        }
        let vl = u16::from_be_bytes([t[1], t[2]]) as usize;
        let value = String::from_utf8_lossy(get(i + 3, i + 3 + vl)?).into_owned();
        i += 3 + vl;
        hs.push((name, value));
    }
    Ok((hs, buf[12 + hlen..total - 4].to_vec(), total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn round_trip() {
        let m = event("messageStart", br#"{"role":"assistant"}"#);
        let (h, p, n) = decode(&m).unwrap_or_default();
        assert_eq!(n, m.len());
        assert_eq!(
            h[0],
            (":event-type".to_string(), "messageStart".to_string())
        );
        assert_eq!(p, br#"{"role":"assistant"}"#);
        let mut bad = m.to_vec();
        let last = bad.len() - 5;
        bad[last] ^= 1;
        assert!(decode(&bad).is_err());
    }
}
