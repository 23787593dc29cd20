//! Incremental decoder of the AWS event-stream binary framing
//! (`application/vnd.amazon.eventstream`, used by Bedrock ConverseStream).
//!
//! A message is: total length (u32 BE), headers length (u32 BE), prelude
//! CRC32 (of the first 8 bytes), headers, payload, message CRC32 (of all
//! bytes before it). A header is name length (u8), name, value type (u8)
//! and a value whose size the type gives (strings and bytes: u16 BE length
//! first). Feed any split of the bytes; whole messages come out as soon as
//! their last byte arrived. Every malformation (bad lengths, CRC mismatch,
//! bad header, trailing partial frame at the end) is an [`EsError`]; the
//! decoder never panics and keeps at most one frame (≤ [`MAX_FRAME`]).

/// Largest frame accepted (the AWS limit is 16 MiB + headers).
pub const MAX_FRAME: usize = 16 * 1024 * 1024 + 128 * 1024;

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

static CRC_TABLE: [u32; 256] = crc_table();

/// CRC-32 (IEEE 802.3), as event-stream uses.
pub fn crc32(data: &[u8]) -> u32 {
    let mut c = 0xFFFF_FFFFu32;
    for b in data {
        c = CRC_TABLE[((c ^ u32::from(*b)) & 0xFF) as usize] ^ (c >> 8);
    }
    c ^ 0xFFFF_FFFF
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EsError {
    /// Total length below the 16-byte minimum or above [`MAX_FRAME`], or a
    /// headers length that does not fit.
    BadLength(u32),
    PreludeCrc,
    MessageCrc,
    BadHeader(&'static str),
    /// The stream ended inside a frame.
    Truncated(usize),
}

impl std::fmt::Display for EsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EsError::BadLength(n) => write!(f, "event-stream frame with an invalid length ({n})"),
            EsError::PreludeCrc => write!(f, "event-stream prelude CRC mismatch"),
            EsError::MessageCrc => write!(f, "event-stream message CRC mismatch"),
            EsError::BadHeader(w) => write!(f, "event-stream header malformed: {w}"),
            EsError::Truncated(n) => {
                write!(f, "event-stream ended inside a frame ({n} bytes left)")
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// String-valued headers (`:event-type`, `:message-type`, …); other
    /// header types are checked and skipped.
    pub headers: Vec<(String, String)>,
    pub payload: Vec<u8>,
}

impl Message {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
    failed: bool,
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 4)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

fn parse_headers(mut h: &[u8]) -> Result<Vec<(String, String)>, EsError> {
    let mut out = Vec::new();
    while !h.is_empty() {
        let n = *h.first().ok_or(EsError::BadHeader("name length"))? as usize;
        let name = h.get(1..1 + n).ok_or(EsError::BadHeader("name"))?;
        let name =
            std::str::from_utf8(name).map_err(|_| EsError::BadHeader("name is not UTF-8"))?;
        let ty = *h.get(1 + n).ok_or(EsError::BadHeader("value type"))?;
        let rest = h.get(2 + n..).ok_or(EsError::BadHeader("value"))?;
        let fixed = |len: usize| -> Result<usize, EsError> {
            if rest.len() < len {
                Err(EsError::BadHeader("value"))
            } else {
                Ok(len)
            }
        };
        let used = match ty {
            0 | 1 => 0,
            2 => fixed(1)?,
            3 => fixed(2)?,
            4 => fixed(4)?,
            5 | 8 => fixed(8)?,
            9 => fixed(16)?,
            6 | 7 => {
                let l = rest.get(..2).ok_or(EsError::BadHeader("value length"))?;
                let l = u16::from_be_bytes([l[0], l[1]]) as usize;
                let v = rest.get(2..2 + l).ok_or(EsError::BadHeader("value"))?;
                if ty == 7 {
                    let v = std::str::from_utf8(v)
                        .map_err(|_| EsError::BadHeader("string value is not UTF-8"))?;
                    out.push((name.to_string(), v.to_string()));
                }
                2 + l
            }
            _ => return Err(EsError::BadHeader("unknown value type")),
        };
        h = rest.get(used..).ok_or(EsError::BadHeader("value"))?;
    }
    Ok(out)
}

impl Decoder {
    /// Feed bytes; `on_message` gets each complete message. After an error
    /// the decoder stays failed (further input is ignored).
    pub fn feed(
        &mut self,
        chunk: &[u8],
        on_message: &mut dyn FnMut(Message),
    ) -> Result<(), EsError> {
        if self.failed {
            return Ok(());
        }
        self.buf.extend_from_slice(chunk);
        let mut start = 0;
        let r = loop {
            let b = self.buf.get(start..).unwrap_or(&[]);
            let (Some(total), Some(hlen), Some(prelude_crc)) = (be32(b, 0), be32(b, 4), be32(b, 8))
            else {
                break Ok(());
            };
            let t = total as usize;
            if !(16..=MAX_FRAME).contains(&t) || (hlen as usize) > t - 16 {
                break Err(EsError::BadLength(total));
            }
            if prelude_crc != crc32(b.get(..8).unwrap_or(&[])) {
                break Err(EsError::PreludeCrc);
            }
            if b.len() < t {
                break Ok(());
            }
            let frame = b.get(..t).unwrap_or(&[]);
            if be32(frame, t - 4) != Some(crc32(frame.get(..t - 4).unwrap_or(&[]))) {
                break Err(EsError::MessageCrc);
            }
            let h = hlen as usize;
            let headers = match parse_headers(frame.get(12..12 + h).unwrap_or(&[])) {
                Ok(hs) => hs,
                Err(e) => break Err(e),
            };
            let payload = frame.get(12 + h..t - 4).unwrap_or(&[]).to_vec();
            on_message(Message { headers, payload });
            start += t;
        };
        if r.is_err() {
            self.failed = true;
            self.buf = Vec::new();
        } else if start > 0 {
            self.buf.drain(..start.min(self.buf.len()));
        }
        r
    }

    /// End of input: an unfinished frame is an error.
    pub fn finish(&mut self) -> Result<(), EsError> {
        if self.failed || self.buf.is_empty() {
            return Ok(());
        }
        let n = self.buf.len();
        self.buf.clear();
        Err(EsError::Truncated(n))
    }
}

/// Encode one message with string headers (tests, benches, fuzz seeds).
pub fn encode(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut h = Vec::new();
    for (n, v) in headers {
        h.push(n.len() as u8);
        h.extend_from_slice(n.as_bytes());
        h.push(7);
        h.extend_from_slice(&(v.len() as u16).to_be_bytes());
        h.extend_from_slice(v.as_bytes());
    }
    let total = 16 + h.len() + payload.len();
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&(total as u32).to_be_bytes());
    out.extend_from_slice(&(h.len() as u32).to_be_bytes());
    let c = crc32(&out);
    out.extend_from_slice(&c.to_be_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(payload);
    let c = crc32(&out);
    out.extend_from_slice(&c.to_be_bytes());
    out
}

/// An event message as Bedrock sends it.
pub fn event(event_type: &str, payload: &[u8]) -> Vec<u8> {
    encode(
        &[
            (":event-type", event_type),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        payload,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn roundtrip_every_split() {
        let mut input = event("messageStart", br#"{"role":"assistant"}"#);
        input.extend(event(
            "contentBlockDelta",
            br#"{"contentBlockIndex":0,"delta":{"text":"hi"}}"#,
        ));
        for i in 0..=input.len() {
            let mut d = Decoder::default();
            let mut got = Vec::new();
            d.feed(&input[..i], &mut |m| got.push(m)).unwrap();
            d.feed(&input[i..], &mut |m| got.push(m)).unwrap();
            d.finish().unwrap();
            assert_eq!(got.len(), 2, "split {i}");
            assert_eq!(got[1].header(":event-type"), Some("contentBlockDelta"));
            assert_eq!(got[0].payload, br#"{"role":"assistant"}"#);
        }
    }

    #[test]
    fn truncated_and_corrupted() {
        let frame = event("messageStop", br#"{"stopReason":"end_turn"}"#);
        // Truncated anywhere: no message, error at finish.
        for i in 1..frame.len() {
            let mut d = Decoder::default();
            let mut n = 0;
            assert_eq!(d.feed(&frame[..i], &mut |_| n += 1), Ok(()));
            assert_eq!(n, 0);
            assert_eq!(d.finish(), Err(EsError::Truncated(i)));
        }
        // Any single flipped bit: an error or (never) a wrong message.
        for i in 0..frame.len() {
            for bit in 0..8 {
                let mut f = frame.clone();
                f[i] ^= 1 << bit;
                let mut d = Decoder::default();
                let mut got = Vec::new();
                let r = d.feed(&f, &mut |m| got.push(m));
                let r = r.and_then(|_| d.finish());
                assert!(r.is_err(), "byte {i} bit {bit} accepted");
                assert!(got.is_empty());
            }
        }
        let mut d = Decoder::default();
        assert_eq!(
            d.feed(&[0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0], &mut |_| {}),
            Err(EsError::BadLength(4))
        );
        let mut d = Decoder::default();
        assert_eq!(
            d.feed(&[0xff; 12], &mut |_| {}),
            Err(EsError::BadLength(u32::MAX))
        );
    }
}
