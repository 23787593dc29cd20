//! Bedrock stream framing (`application/vnd.amazon.eventstream`), written
//! by AWS's own event-stream encoder (`aws-smithy-eventstream`), so the
//! prelude, header encoding and both CRCs are AWS's, not a copy of the
//! gateway's decoder.

use aws_smithy_eventstream::frame::write_message_to;
use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
use bytes::Bytes;

/// Encode one message with string headers. The encoder refuses only
/// payloads over 16 MiB and header names over 255 bytes; the mock's frames
/// are one stream chunk or one small JSON document, far below both, so the
/// refusal (an empty frame) cannot happen for what the mock sends.
fn encode(headers: [(&'static str, &str); 3], payload: &[u8]) -> Bytes {
    let headers = headers
        .into_iter()
        .map(|(name, value)| Header::new(name, HeaderValue::String(value.to_string().into())))
        .collect();
    let message = Message::new_from_parts(headers, Bytes::copy_from_slice(payload));
    let mut out = Vec::with_capacity(payload.len() + 112);
    match write_message_to(&message, &mut out) {
        Ok(()) => Bytes::from(out),
        Err(_) => Bytes::new(),
    }
}

/// An event of a Bedrock stream.
pub fn event(event_type: &str, payload: &[u8]) -> Bytes {
    encode(
        [
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
        [
            (":exception-type", exception_type),
            (":content-type", "application/json"),
            (":message-type", "exception"),
        ],
        payload,
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use aws_smithy_eventstream::frame::read_message_from;

    #[test]
    fn round_trips_through_aws_decoder() {
        let m = read_message_from(event("messageStop", br#"{"stopReason":"end_turn"}"#)).unwrap();
        let s = |v: &'static str| HeaderValue::String(v.into());
        assert_eq!(
            m.headers(),
            [
                Header::new(":event-type", s("messageStop")),
                Header::new(":content-type", s("application/json")),
                Header::new(":message-type", s("event")),
            ]
        );
        assert_eq!(&m.payload()[..], br#"{"stopReason":"end_turn"}"#);
    }

    #[test]
    fn corrupted_frame_is_refused_by_aws_decoder() {
        let mut b = exception("modelStreamErrorException", b"{}").to_vec();
        let n = b.len();
        b[n - 6] ^= 1;
        assert!(read_message_from(Bytes::from(b)).is_err());
    }
}
