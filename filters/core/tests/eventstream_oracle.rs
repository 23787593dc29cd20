//! The filter's event-stream decoder checked against AWS's own encoder
//! (`aws-smithy-eventstream`): frames carrying every header value type the
//! format defines, fed at every split point, must yield the payloads and
//! exactly the string headers, in order, while the other header types are
//! skipped; corrupted CRCs and lengths must be refused, as AWS's decoder
//! refuses them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use aws_smithy_eventstream::frame::{read_message_from, write_message_to};
use aws_smithy_types::event_stream::{Header, HeaderValue, Message as AwsMessage};
use aws_smithy_types::DateTime;
use tollgate_core::codec::eventstream::{encode, Decoder, EsError, Message};

fn frame(headers: Vec<(&'static str, HeaderValue)>, payload: &[u8]) -> Vec<u8> {
    let headers = headers
        .into_iter()
        .map(|(n, v)| Header::new(n, v))
        .collect();
    let m = AwsMessage::new_from_parts(headers, payload.to_vec());
    let mut out = Vec::new();
    write_message_to(&m, &mut out).unwrap();
    out
}

fn s(v: &'static str) -> HeaderValue {
    HeaderValue::String(v.into())
}

/// Three frames: every header type around the string headers, only
/// non-string headers with an empty payload, and values that look like
/// framing (a byte array holding a frame prelude, an empty string).
fn stream() -> (Vec<u8>, Vec<Message>) {
    let all_types = vec![
        ("flag-true", HeaderValue::Bool(true)),
        (":event-type", s("contentBlockDelta")),
        ("flag-false", HeaderValue::Bool(false)),
        ("byte", HeaderValue::Byte(-7)),
        ("int16", HeaderValue::Int16(-12_345)),
        (":content-type", s("application/json")),
        ("int32", HeaderValue::Int32(0x7fff_fff0)),
        ("int64", HeaderValue::Int64(-0x0123_4567_89ab_cdef)),
        (
            "bytes",
            HeaderValue::ByteArray(vec![0, 1, 2, 0xff, 7, 0, 3].into()),
        ),
        (
            "timestamp",
            HeaderValue::Timestamp(DateTime::from_millis(1_795_380_704_123)),
        ),
        (
            "uuid",
            HeaderValue::Uuid(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210),
        ),
        (":message-type", s("event")),
    ];
    let p1 = br#"{"delta":{"text":"hello"},"contentBlockIndex":0}"#;
    let no_strings = vec![
        ("b", HeaderValue::Bool(true)),
        ("n", HeaderValue::Int64(1)),
        ("t", HeaderValue::Timestamp(DateTime::from_secs(0))),
        ("u", HeaderValue::Uuid(u128::MAX)),
        ("x", HeaderValue::ByteArray(Vec::new().into())),
    ];
    let tricky = vec![
        // A byte array that holds a whole frame prelude of its own.
        (
            "nested",
            HeaderValue::ByteArray(frame(vec![(":event-type", s("fake"))], b"{}").into()),
        ),
        ("empty", s("")),
        (":event-type", s("messageStop")),
        ("utf8", s("héllo ✓")),
    ];
    let p3 = br#"{"stopReason":"end_turn"}"#;
    let mut bytes = frame(all_types, p1);
    bytes.extend(frame(no_strings, b""));
    bytes.extend(frame(tricky, p3));
    let strings = |v: &[(&str, &str)]| {
        v.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect::<Vec<_>>()
    };
    let expected = vec![
        Message {
            headers: strings(&[
                (":event-type", "contentBlockDelta"),
                (":content-type", "application/json"),
                (":message-type", "event"),
            ]),
            payload: p1.to_vec(),
        },
        Message {
            headers: Vec::new(),
            payload: Vec::new(),
        },
        Message {
            headers: strings(&[
                ("empty", ""),
                (":event-type", "messageStop"),
                ("utf8", "héllo ✓"),
            ]),
            payload: p3.to_vec(),
        },
    ];
    (bytes, expected)
}

fn decode(chunks: &[&[u8]]) -> (Vec<Message>, Result<(), EsError>) {
    let mut d = Decoder::default();
    let mut out = Vec::new();
    for c in chunks {
        if let Err(e) = d.feed(c, &mut |m| out.push(m)) {
            return (out, Err(e));
        }
    }
    let end = d.finish();
    (out, end)
}

#[test]
fn aws_frames_decode_at_every_split_point() {
    let (bytes, expected) = stream();
    for at in 0..=bytes.len() {
        let (got, end) = decode(&[&bytes[..at], &bytes[at..]]);
        assert_eq!(end, Ok(()), "split at {at}");
        assert_eq!(got, expected, "split at {at}");
    }
    for a in (0..bytes.len()).step_by(7) {
        for b in (a..=bytes.len()).step_by(11) {
            let (got, end) = decode(&[&bytes[..a], &bytes[a..b], &bytes[b..]]);
            assert_eq!((got, end), (expected.clone(), Ok(())), "splits {a}, {b}");
        }
    }
    let one_byte: Vec<&[u8]> = bytes.chunks(1).collect();
    assert_eq!(decode(&one_byte), (expected, Ok(())));
}

#[test]
fn each_header_type_alone_is_skipped() {
    let values = [
        HeaderValue::Bool(true),
        HeaderValue::Bool(false),
        HeaderValue::Byte(i8::MIN),
        HeaderValue::Int16(i16::MAX),
        HeaderValue::Int32(i32::MIN),
        HeaderValue::Int64(i64::MAX),
        HeaderValue::ByteArray(vec![7u8; 300].into()),
        HeaderValue::Timestamp(DateTime::from_millis(-1)),
        HeaderValue::Uuid(1),
    ];
    for v in values {
        let label = format!("{v:?}");
        let bytes = frame(vec![("h", v), (":event-type", s("e"))], b"payload");
        let (got, end) = decode(&[&bytes]);
        assert_eq!(end, Ok(()), "{label}");
        assert_eq!(
            got,
            vec![Message {
                headers: vec![(":event-type".into(), "e".into())],
                payload: b"payload".to_vec(),
            }],
            "{label}"
        );
    }
}

/// Flip one bit at `at`; both decoders must refuse the frame.
fn corrupt(bytes: &[u8], at: usize) -> Vec<u8> {
    let mut b = bytes.to_vec();
    b[at] ^= 0x10;
    assert!(
        read_message_from(&b[..]).is_err(),
        "AWS's decoder accepted a frame corrupted at byte {at}"
    );
    b
}

#[test]
fn crc_corruption_is_refused() {
    let (bytes, expected) = stream();
    let first = u32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize;
    let cases = [
        (0, "total length", EsError::PreludeCrc),
        (5, "headers length", EsError::PreludeCrc),
        (9, "prelude CRC", EsError::PreludeCrc),
        (14, "a header name", EsError::MessageCrc),
        (first - 10, "the payload", EsError::MessageCrc),
        (first - 2, "the message CRC", EsError::MessageCrc),
    ];
    for (at, what, want) in cases {
        let b = corrupt(&bytes[..first], at);
        let (got, end) = decode(&[&b]);
        // A corrupted length can also make the frame's size invalid.
        match (&want, &end) {
            (EsError::PreludeCrc, Err(EsError::BadLength(_))) => {}
            _ => assert_eq!(end, Err(want), "corrupted {what}"),
        }
        assert!(got.is_empty(), "corrupted {what}");
    }
    // Corruption in the second frame: the first message still comes out,
    // then the decoder stays failed and ignores the rest.
    let second = first + u32::from_be_bytes(bytes[first..first + 4].try_into().unwrap()) as usize;
    let mut b = bytes.clone();
    b[second - 6] ^= 0x01;
    let mut d = Decoder::default();
    let mut got = Vec::new();
    assert_eq!(d.feed(&b, &mut |m| got.push(m)), Err(EsError::MessageCrc));
    assert_eq!(got, expected[..1]);
    assert_eq!(d.feed(&bytes, &mut |m| got.push(m)), Ok(()));
    assert_eq!(got.len(), 1);
}

#[test]
fn truncated_stream_is_refused() {
    let (bytes, expected) = stream();
    let first = u32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize;
    let (got, end) = decode(&[&bytes[..first + 5]]);
    assert_eq!(got, expected[..1]);
    assert_eq!(end, Err(EsError::Truncated(5)));
    let (got, end) = decode(&[&bytes[..bytes.len() - 1]]);
    assert_eq!(got, expected[..2]);
    assert!(matches!(end, Err(EsError::Truncated(_))));
}

#[test]
fn the_filters_test_encoder_writes_frames_aws_reads() {
    let frame = encode(
        &[(":event-type", "metadata"), (":message-type", "event")],
        br#"{"usage":{"inputTokens":1}}"#,
    );
    let m = read_message_from(&frame[..]).unwrap();
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
