//! AWS's own event-stream codec (`aws-smithy-eventstream`, what the AWS SDKs
//! use) as the oracle for the filter's decoder: frames AWS encodes with
//! every header value type — the ones the decoder reads (string) and the
//! ones it checks and skips (bool, byte, int16/32/64, bytes, timestamp,
//! uuid) — decode to the same string headers and payload at every split;
//! and frames the filter's test encoder writes are ones AWS reads back.

use aws_smithy_eventstream::frame::{read_message_from, write_message_to};
use aws_smithy_types::event_stream::{Header, HeaderValue, Message as AwsMessage};
use aws_smithy_types::DateTime;
use bytes::Bytes;
use tollgate_core::codec::eventstream::{encode, Decoder, Message};

fn every_type(event_type: &str, payload: &str) -> AwsMessage {
    AwsMessage::new(Bytes::from(payload.to_string()))
        .add_header(Header::new("flag-true", HeaderValue::Bool(true)))
        .add_header(Header::new(
            ":message-type",
            HeaderValue::String("event".into()),
        ))
        .add_header(Header::new("flag-false", HeaderValue::Bool(false)))
        .add_header(Header::new("byte", HeaderValue::Byte(-7)))
        .add_header(Header::new("short", HeaderValue::Int16(-300)))
        .add_header(Header::new("int", HeaderValue::Int32(1 << 30)))
        .add_header(Header::new("long", HeaderValue::Int64(-(1 << 40))))
        .add_header(Header::new(
            "blob",
            HeaderValue::ByteArray(Bytes::from_static(b"\x00\x07\xff")),
        ))
        .add_header(Header::new(
            ":event-type",
            HeaderValue::String(event_type.to_string().into()),
        ))
        .add_header(Header::new(
            "when",
            HeaderValue::Timestamp(DateTime::from_secs(1_700_000_000)),
        ))
        .add_header(Header::new("id", HeaderValue::Uuid(u128::MAX - 5)))
        .add_header(Header::new(
            ":content-type",
            HeaderValue::String("application/json".into()),
        ))
}

fn aws_bytes(m: &AwsMessage) -> Vec<u8> {
    let mut out = Vec::new();
    write_message_to(m, &mut out).unwrap();
    out
}

fn decode(parts: &[&[u8]]) -> Vec<Message> {
    let mut d = Decoder::default();
    let mut out = Vec::new();
    for p in parts {
        d.feed(p, &mut |m| out.push(m)).unwrap();
    }
    d.finish().unwrap();
    out
}

#[test]
fn aws_frames_with_every_header_type_decode_at_every_split() {
    let mut stream = aws_bytes(&every_type(
        "contentBlockDelta",
        r#"{"contentBlockIndex":0,"delta":{"text":"hi"}}"#,
    ));
    stream.extend(aws_bytes(&every_type(
        "messageStop",
        r#"{"stopReason":"end_turn"}"#,
    )));
    let want = |event: &str, payload: &str| Message {
        headers: vec![
            (":message-type".into(), "event".into()),
            (":event-type".into(), event.into()),
            (":content-type".into(), "application/json".into()),
        ],
        payload: payload.as_bytes().to_vec(),
    };
    let expected = vec![
        want(
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"text":"hi"}}"#,
        ),
        want("messageStop", r#"{"stopReason":"end_turn"}"#),
    ];
    for i in 0..=stream.len() {
        let (a, b) = stream.split_at(i);
        assert_eq!(decode(&[a, b]), expected, "split at {i}");
    }
}

#[test]
fn every_header_type_alone_is_skipped_exactly() {
    let values = [
        HeaderValue::Bool(true),
        HeaderValue::Bool(false),
        HeaderValue::Byte(i8::MIN),
        HeaderValue::Int16(i16::MAX),
        HeaderValue::Int32(i32::MIN),
        HeaderValue::Int64(i64::MAX),
        HeaderValue::ByteArray(Bytes::new()),
        HeaderValue::ByteArray(Bytes::from(vec![0xab; 300])),
        HeaderValue::Timestamp(DateTime::from_secs(1_700_000_000)),
        HeaderValue::Uuid(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef),
    ];
    for v in values {
        let m = AwsMessage::new(Bytes::from_static(b"{}"))
            .add_header(Header::new("x", v.clone()))
            .add_header(Header::new(":event-type", HeaderValue::String("e".into())));
        let got = decode(&[&aws_bytes(&m)]);
        assert_eq!(got.len(), 1, "{v:?}");
        assert_eq!(
            got[0].headers,
            vec![(":event-type".to_string(), "e".to_string())],
            "{v:?}"
        );
        assert_eq!(got[0].payload, b"{}", "{v:?}");
    }
}

#[test]
fn the_filters_test_encoder_writes_frames_aws_reads() {
    let frame = encode(
        &[(":event-type", "metadata"), (":message-type", "event")],
        br#"{"usage":{"inputTokens":1}}"#,
    );
    let m = read_message_from(Bytes::from(frame)).unwrap();
    let names: Vec<(&str, &HeaderValue)> = m
        .headers()
        .iter()
        .map(|h| (h.name().as_str(), h.value()))
        .collect();
    assert_eq!(
        names,
        vec![
            (":event-type", &HeaderValue::String("metadata".into())),
            (":message-type", &HeaderValue::String("event".into())),
        ]
    );
    assert_eq!(m.payload().as_ref(), br#"{"usage":{"inputTokens":1}}"#);
}
