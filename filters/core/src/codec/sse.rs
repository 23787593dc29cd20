//! Incremental Server-Sent Events parser: `feed` any split of the byte
//! stream, get whole events. Handles `\n`, `\r\n` and `\r` line ends (a `\r`
//! at the end of one chunk and `\n` at the start of the next count once),
//! multi-line `data`, comments. As the WHATWG rules say, a byte-order mark
//! opening the stream is skipped (even split across chunks) and an event
//! with no `data` line is not dispatched. Bounded: a line longer than
//! `max_line` bytes is an error instead of unbounded buffering.

/// UTF-8 byte-order mark.
const BOM: &[u8] = b"\xEF\xBB\xBF";

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Event {
    /// The `event:` field, empty when absent.
    pub event: String,
    /// `data:` lines joined with `\n`.
    pub data: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseError {
    LineTooLong,
    InvalidUtf8,
}

#[derive(Debug)]
pub struct SseParser {
    line: Vec<u8>,
    after_cr: bool,
    event: String,
    data: String,
    has_data: bool,
    max_line: usize,
    /// Bytes of a leading byte-order mark seen so far; `None` once the
    /// stream's start is past.
    bom: Option<usize>,
}

impl Default for SseParser {
    fn default() -> Self {
        SseParser::new(4 * 1024 * 1024)
    }
}

impl SseParser {
    pub fn new(max_line: usize) -> SseParser {
        SseParser {
            line: Vec::new(),
            after_cr: false,
            event: String::new(),
            data: String::new(),
            has_data: false,
            max_line,
            bom: Some(0),
        }
    }

    /// Feed bytes; complete events are passed to `on_event`.
    pub fn feed(
        &mut self,
        mut chunk: &[u8],
        on_event: &mut dyn FnMut(Event),
    ) -> Result<(), SseError> {
        chunk = self.skip_bom(chunk);
        if self.after_cr {
            if let Some(rest) = chunk.strip_prefix(b"\n") {
                chunk = rest;
            }
            if !chunk.is_empty() {
                self.after_cr = false;
            }
        }
        while !chunk.is_empty() {
            match chunk.iter().position(|&b| b == b'\n' || b == b'\r') {
                None => {
                    if self.line.len() + chunk.len() > self.max_line {
                        return Err(SseError::LineTooLong);
                    }
                    self.line.extend_from_slice(chunk);
                    return Ok(());
                }
                Some(i) => {
                    let (head, tail) = chunk.split_at(i);
                    let is_cr = tail.first() == Some(&b'\r');
                    let mut rest = tail.get(1..).unwrap_or(&[]);
                    if is_cr {
                        if rest.is_empty() {
                            self.after_cr = true;
                        } else if let Some(r) = rest.strip_prefix(b"\n") {
                            rest = r;
                        }
                    }
                    if self.line.is_empty() {
                        self.line_done(head, on_event)?;
                    } else {
                        if self.line.len() + head.len() > self.max_line {
                            return Err(SseError::LineTooLong);
                        }
                        let mut line = std::mem::take(&mut self.line);
                        line.extend_from_slice(head);
                        let r = self.line_done(&line, on_event);
                        line.clear();
                        self.line = line;
                        r?;
                    }
                    chunk = rest;
                }
            }
        }
        Ok(())
    }

    /// End of stream: an event not followed by a blank line is dispatched
    /// (lenient, as most providers end with one anyway).
    pub fn finish(&mut self, on_event: &mut dyn FnMut(Event)) -> Result<(), SseError> {
        self.end_bom();
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.line_done(&line, on_event)?;
        }
        self.line_done(b"", on_event)
    }

    /// Consumes what `chunk` holds of a leading byte-order mark. Bytes that
    /// began like one but are not are kept as the start of the first line.
    fn skip_bom<'c>(&mut self, mut chunk: &'c [u8]) -> &'c [u8] {
        let Some(mut seen) = self.bom else {
            return chunk;
        };
        while let (Some(&want), Some((&b, rest))) = (BOM.get(seen), chunk.split_first()) {
            if b != want {
                self.bom = Some(seen);
                self.end_bom();
                return chunk;
            }
            seen += 1;
            chunk = rest;
        }
        self.bom = if seen < BOM.len() { Some(seen) } else { None };
        chunk
    }

    /// The stream's start is past: a partial mark was data after all.
    fn end_bom(&mut self) {
        if let Some(seen) = self.bom.take() {
            self.line
                .extend_from_slice(BOM.get(..seen).unwrap_or_default());
        }
    }

    fn line_done(&mut self, line: &[u8], on_event: &mut dyn FnMut(Event)) -> Result<(), SseError> {
        if line.is_empty() {
            if self.has_data {
                let ev = Event {
                    event: std::mem::take(&mut self.event),
                    data: std::mem::take(&mut self.data),
                };
                self.has_data = false;
                on_event(ev);
            } else {
                // No data: nothing is dispatched and the type is forgotten.
                self.event.clear();
            }
            return Ok(());
        }
        if line.first() == Some(&b':') {
            return Ok(());
        }
        let line = std::str::from_utf8(line).map_err(|_| SseError::InvalidUtf8)?;
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => {
                self.event.clear();
                self.event.push_str(value);
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_split(input: &[u8], split: usize) -> Vec<Event> {
        let mut p = SseParser::default();
        let mut out = Vec::new();
        let (a, b) = input.split_at(split);
        p.feed(a, &mut |e| out.push(e)).unwrap();
        p.feed(b, &mut |e| out.push(e)).unwrap();
        p.finish(&mut |e| out.push(e)).unwrap();
        out
    }

    #[test]
    fn every_split_same_events() {
        let input = b": comment\r\nevent: a\r\ndata: {\"x\":1}\r\n\r\ndata: l1\ndata: l2\n\nevent: b\rdata:x\r\r";
        let expected = vec![
            Event {
                event: "a".into(),
                data: "{\"x\":1}".into(),
            },
            Event {
                event: "".into(),
                data: "l1\nl2".into(),
            },
            Event {
                event: "b".into(),
                data: "x".into(),
            },
        ];
        for i in 0..=input.len() {
            assert_eq!(parse_split(input, i), expected, "split at {i}");
        }
    }

    #[test]
    fn byte_by_byte() {
        let input = b"data: hello\n\ndata: [DONE]\n\n";
        let mut p = SseParser::default();
        let mut out = Vec::new();
        for b in input {
            p.feed(std::slice::from_ref(b), &mut |e| out.push(e))
                .unwrap();
        }
        assert_eq!(out.len(), 2);
        assert_eq!(out[1].data, "[DONE]");
    }

    #[test]
    fn leading_bom_skipped_at_every_split() {
        let input = b"\xEF\xBB\xBFdata: a\n\n\xEF\xBB\xBFdata: b\n\n";
        for i in 0..=input.len() {
            let evs = parse_split(input, i);
            assert_eq!(evs.len(), 1, "split at {i}: {evs:?}");
            // Only the stream's first bytes may be a mark; later it is an
            // unknown field name (not `data`), so that event has no data.
            assert_eq!(evs[0].data, "a", "split at {i}");
        }
        // A stream that starts like a mark but is not one keeps its bytes.
        let not_bom = b"\xEF\xBBdata: x\n\n";
        for i in 0..=not_bom.len() {
            let mut p = SseParser::default();
            let (a, b) = not_bom.split_at(i);
            let r = p.feed(a, &mut |_| {}).and_then(|()| p.feed(b, &mut |_| {}));
            assert_eq!(r, Err(SseError::InvalidUtf8), "split at {i}");
        }
        let mut p = SseParser::default();
        let mut out = Vec::new();
        p.feed(b"\xEF", &mut |e| out.push(e)).unwrap();
        assert_eq!(p.finish(&mut |e| out.push(e)), Err(SseError::InvalidUtf8));
    }

    #[test]
    fn events_without_data_are_not_dispatched() {
        let input =
            b"event: ping\n\nevent: a\nid: 1\n\n: c\n\ndata\n\nevent: b\ndata: x\n\nevent: c\n";
        for i in 0..=input.len() {
            assert_eq!(
                parse_split(input, i),
                vec![
                    Event {
                        event: "".into(),
                        data: "".into()
                    },
                    Event {
                        event: "b".into(),
                        data: "x".into()
                    },
                ],
                "split at {i}"
            );
        }
    }

    #[test]
    fn line_limit() {
        let mut p = SseParser::new(8);
        assert_eq!(
            p.feed(b"data: 0123456789", &mut |_| {}),
            Err(SseError::LineTooLong)
        );
    }

    #[test]
    fn invalid_utf8() {
        let mut p = SseParser::default();
        assert_eq!(
            p.feed(b"data: \xff\n\n", &mut |_| {}),
            Err(SseError::InvalidUtf8)
        );
    }
}
