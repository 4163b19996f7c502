//! Server-sent events (`text/event-stream`), read as browsers read them:
//! [`SseDecoder`] for a body that arrives in chunks, [`events`] for a body
//! in hand.
//!
//! askloop's one SSE reader: the providers read model streams with it, and
//! the bench, the test kit and the tests read askloop's own streams with it.

/// One server-sent event: its type (`message` when the event had no
/// `event:` line) and its data (the `data:` lines joined with `\n`).
/// Borrowed from the [`SseDecoder`] until its next call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SseEvent<'a> {
    /// The event's type: the last `event:` line's value, else `message`.
    pub event: &'a str,
    /// The `data:` lines' values joined with `\n`.
    pub data: &'a str,
}

impl SseEvent<'_> {
    /// A copy that outlives the decoder's next call.
    pub fn to_owned_event(&self) -> OwnedSseEvent {
        OwnedSseEvent {
            event: self.event.to_owned(),
            data: self.data.to_owned(),
        }
    }
}

/// An [`SseEvent`] that owns its text, as [`events`] returns them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OwnedSseEvent {
    /// The event's type (`message` when the event had no `event:` line).
    pub event: String,
    /// The `data:` lines' values joined with `\n`.
    pub data: String,
}

/// The bytes are not server-sent events: a `data:` or `event:` value is
/// not UTF-8, or (for [`events`] only) the body ends inside an event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SseError(String);

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Server-sent event framing (the WHATWG `text/event-stream` rules), fed
/// the body's chunks as they come:
///
/// - lines end with `\n`, `\r\n` or `\r`, and a line end may be split
///   between two chunks (a `\r` at the end of one, the `\n` at the start
///   of the next);
/// - `data:` with or without one space after the colon; several `data:`
///   lines of one event are joined with `\n`; `event:` sets the type;
///   `id:`, `retry:`, unknown fields and `:` comment lines (keep-alives)
///   are ignored; a line without a colon is a field with an empty value;
/// - a blank line dispatches the event, unless it had no `data:` line;
/// - a UTF-8 byte order mark at the very start is skipped;
/// - at the end of the body, an event not closed by a blank line is
///   dropped (as the spec and browsers do): a stream cut in the middle of
///   an event must not hand the parser half of it;
/// - the `data:` and `event:` values must be UTF-8, else [`SseError`]
///   (lines that are ignored are not checked).
///
/// The bytes of a partial line are kept until the line ends; complete
/// lines are read in place, so an event costs one copy of its data.
///
/// ```
/// use askloop::sse::SseDecoder;
///
/// let mut decoder = SseDecoder::new();
/// decoder.push(b"event: ping\ndata: {}\n\ndata: one\r\nda");
/// let first = decoder.next_event()?.expect("a whole event");
/// assert_eq!((first.event, first.data), ("ping", "{}"));
/// // The second event waits for its blank line.
/// assert!(decoder.next_event()?.is_none());
/// decoder.push(b"ta: two\n\n");
/// let second = decoder.next_event()?.expect("a whole event");
/// assert_eq!((second.event, second.data), ("message", "one\ntwo"));
/// decoder.end();
/// assert!(decoder.next_event()?.is_none());
/// assert!(!decoder.is_inside_event());
/// # Ok::<(), askloop::sse::SseError>(())
/// ```
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// Received bytes; `buf[pos..]` is not read yet.
    buf: Vec<u8>,
    pos: usize,
    /// `buf[pos..searched]` holds no line end: a long line arriving in many
    /// chunks is searched once, not again from its start at each chunk.
    searched: usize,
    /// The data of the event being read, each line followed by `\n`.
    data: String,
    /// The type of the event being read (empty: `message`).
    event: String,
    /// The previous line ended with `\r`: a `\n` that comes next belongs to it.
    after_cr: bool,
    /// The byte order mark was looked for.
    bom_checked: bool,
    /// The last call returned an event: its buffers are cleared first.
    dispatched: bool,
    /// The body ended.
    ended: bool,
}

impl SseDecoder {
    /// A decoder at the start of a body.
    pub fn new() -> Self {
        SseDecoder::default()
    }

    /// Adds a chunk of the body.
    pub fn push(&mut self, chunk: &[u8]) {
        if self.pos == self.buf.len() {
            self.buf.clear();
        } else if self.pos > 0 {
            self.buf.drain(..self.pos);
        }
        self.searched -= self.pos.min(self.searched);
        self.pos = 0;
        self.buf.extend_from_slice(chunk);
    }

    /// Tells that the body ended: what is left unterminated is dropped.
    pub fn end(&mut self) {
        self.ended = true;
    }

    /// Whether the bytes pushed so far stop inside an event: a line not
    /// ended, or field lines that no blank line has closed. Asked once
    /// [`Self::next_event`] has returned `None`, at the end of a body, it
    /// tells a body cut short (whose last event the decoder drops) from a
    /// whole one.
    pub fn is_inside_event(&self) -> bool {
        self.pos < self.buf.len() || (!self.dispatched && (!self.data.is_empty() || !self.event.is_empty()))
    }

    /// The next complete event in what was pushed, if any.
    pub fn next_event(&mut self) -> Result<Option<SseEvent<'_>>, SseError> {
        if !self.advance()? {
            return Ok(None);
        }
        // `advance` returns true only with at least one data line.
        let data = &self.data[..self.data.len() - 1];
        let event = if self.event.is_empty() { "message" } else { &self.event };
        Ok(Some(SseEvent { event, data }))
    }

    /// Reads lines until an event is complete (true) or the bytes run out.
    fn advance(&mut self) -> Result<bool, SseError> {
        if self.dispatched {
            self.dispatched = false;
            self.data.clear();
            self.event.clear();
        }
        if !self.bom_checked {
            let rest = &self.buf[self.pos..];
            if rest.len() < BOM.len() && BOM.starts_with(rest) && !self.ended {
                return Ok(false);
            }
            if rest.starts_with(BOM) {
                self.pos += BOM.len();
            }
            self.bom_checked = true;
        }
        loop {
            if self.after_cr && self.pos < self.buf.len() {
                self.after_cr = false;
                if self.buf[self.pos] == b'\n' {
                    self.pos += 1;
                }
            }
            let start = self.pos;
            let from = self.searched.max(start);
            let Some(found) = memchr::memchr2(b'\n', b'\r', &self.buf[from..]) else {
                // A partial line (dropped if the body ended).
                self.searched = self.buf.len();
                return Ok(false);
            };
            let end = from + found - start;
            self.pos = start + end + 1;
            self.searched = self.pos;
            if self.buf[start + end] == b'\r' {
                self.after_cr = true;
            }
            if end == 0 {
                if self.data.is_empty() {
                    // No data line: nothing to dispatch (the type is reset).
                    self.event.clear();
                    continue;
                }
                self.dispatched = true;
                return Ok(true);
            }
            self.field(start, start + end)?;
        }
    }

    /// Handles the non-blank line `buf[start..end]`.
    fn field(&mut self, start: usize, end: usize) -> Result<(), SseError> {
        let line = &self.buf[start..end];
        let (name, value) = match memchr::memchr(b':', line) {
            // A comment (`: keep-alive`).
            Some(0) => return Ok(()),
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        let target = match name {
            b"data" => &mut self.data,
            b"event" => &mut self.event,
            // id, retry, and fields nobody defined.
            _ => return Ok(()),
        };
        let value = std::str::from_utf8(value).map_err(|err| {
            SseError(format!(
                "a `{}:` line is not UTF-8 ({err})",
                String::from_utf8_lossy(name)
            ))
        })?;
        if name == b"data" {
            target.push_str(value);
            target.push('\n');
        } else {
            target.clear();
            target.push_str(value);
        }
        Ok(())
    }
}

/// The events of a whole body, owned: for a body already read to its end
/// (a test's response, a recording).
///
/// Unlike [`SseDecoder`], which drops an event the body ends inside of (as
/// browsers do, since a stream may be cut at any time), this is an error
/// here: a body in hand that stops in the middle of an event was cut short.
///
/// ```
/// use askloop::sse;
///
/// let body = b": keep-alive\n\ndata: {\"type\":\"start\"}\n\ndata: [DONE]\n\n";
/// let events = sse::events(body)?;
/// let data: Vec<&str> = events.iter().map(|e| e.data.as_str()).collect();
/// assert_eq!(data, [r#"{"type":"start"}"#, "[DONE]"]);
/// assert!(events.iter().all(|e| e.event == "message"));
///
/// assert!(sse::events(b"data: [DONE]\n\ndata: {\"cut\":").is_err());
/// # Ok::<(), sse::SseError>(())
/// ```
pub fn events(body: &[u8]) -> Result<Vec<OwnedSseEvent>, SseError> {
    let mut decoder = SseDecoder::new();
    decoder.push(body);
    decoder.end();
    let mut events = Vec::new();
    while let Some(event) = decoder.next_event()? {
        events.push(event.to_owned_event());
    }
    if decoder.is_inside_event() {
        return Err(SseError(format!(
            "the body ends inside an event, after {} whole ones (a blank line must close every event)",
            events.len()
        )));
    }
    Ok(events)
}

/// Every event of a body that arrives cut into `chunks`, as a browser
/// reads it: an event the body stops inside of is dropped (unlike
/// [`events`], which calls that an error).
pub fn decode_chunks<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Result<Vec<OwnedSseEvent>, SseError> {
    let mut decoder = SseDecoder::new();
    let mut events = Vec::new();
    for chunk in chunks {
        decoder.push(chunk);
        while let Some(event) = decoder.next_event()? {
            events.push(event.to_owned_event());
        }
    }
    decoder.end();
    while let Some(event) = decoder.next_event()? {
        events.push(event.to_owned_event());
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    type Events = Vec<(String, String)>;

    /// The events of a body cut into `chunks`, as (type, data).
    fn decode<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Result<Events, SseError> {
        Ok(decode_chunks(chunks)?.into_iter().map(|e| (e.event, e.data)).collect())
    }

    fn decode_text(text: &str) -> Events {
        decode([text.as_bytes()]).unwrap()
    }

    fn one_byte_at_a_time(bytes: &[u8]) -> Result<Events, SseError> {
        decode(bytes.chunks(1))
    }

    fn ev(event: &str, data: &str) -> (String, String) {
        (event.to_owned(), data.to_owned())
    }

    #[test]
    fn fields_with_and_without_space_joined_data_lines_and_event_types() {
        let text = concat!(
            "data: one\n\n",
            "data:two\n\n",
            "data:  three\n\n", // only one space is taken off
            "event: ping\ndata: {}\n\n",
            "data: a\ndata: b\ndata:\ndata: c\n\n",
            "event: message_stop\nid: 7\nretry: 1000\nunknown: x\ndata: last\n\n",
            "data: typed again?\n\n",
        );
        assert_eq!(
            decode_text(text),
            vec![
                ev("message", "one"),
                ev("message", "two"),
                ev("message", " three"),
                ev("ping", "{}"),
                ev("message", "a\nb\n\nc"),
                ev("message_stop", "last"),
                ev("message", "typed again?"),
            ]
        );
    }

    #[test]
    fn comments_and_events_without_data_dispatch_nothing() {
        let text = ": keep-alive\n\n: processing\n:\n\nevent: ping\n\nid: 3\n\n\n\ndata: after\n\n";
        // The `event: ping` without data is dropped and its type with it.
        assert_eq!(decode_text(text), vec![ev("message", "after")]);
        assert_eq!(decode_text(": OPENROUTER PROCESSING\n\n"), vec![]);
    }

    #[test]
    fn a_line_without_colon_is_a_field_with_an_empty_value() {
        assert_eq!(decode_text("data\n\n"), vec![ev("message", "")]);
        assert_eq!(decode_text("data\ndata\n\n"), vec![ev("message", "\n")]);
        assert_eq!(decode_text("event\ndata: x\n\n"), vec![ev("message", "x")]);
        // A colon inside the value stays in it.
        assert_eq!(decode_text("data: a: b\n\n"), vec![ev("message", "a: b")]);
    }

    #[test]
    fn lf_crlf_and_cr_line_ends_mixed_and_split_between_chunks() {
        let expected = vec![ev("message", "a"), ev("e", "b\nc"), ev("message", "d")];
        for text in [
            "data: a\n\nevent: e\ndata: b\ndata: c\n\ndata: d\n\n",
            "data: a\r\n\r\nevent: e\r\ndata: b\r\ndata: c\r\n\r\ndata: d\r\n\r\n",
            "data: a\r\revent: e\rdata: b\rdata: c\r\rdata: d\r\r",
            "data: a\r\n\nevent: e\rdata: b\ndata: c\r\n\rdata: d\n\r\n",
        ] {
            assert_eq!(decode_text(text), expected, "{text:?}");
            assert_eq!(one_byte_at_a_time(text.as_bytes()).unwrap(), expected, "{text:?}");
            // Every way of cutting it in two.
            for cut in 0..=text.len() {
                let (a, b) = text.as_bytes().split_at(cut);
                assert_eq!(decode([a, b]).unwrap(), expected, "{text:?} cut at {cut}");
            }
        }
        // `\r` ends a chunk and the next chunk starts with `\n`: one line end,
        // not a line end and a blank line.
        assert_eq!(
            decode([&b"data: a\r"[..], b"\ndata: b\r", b"\n\r", b"\n"]).unwrap(),
            vec![ev("message", "a\nb")]
        );
        // ... and with chunks in between that are empty.
        assert_eq!(
            decode([&b"data: a\r"[..], b"", b"\n", b"", b"\r\n"]).unwrap(),
            vec![ev("message", "a")]
        );
    }

    #[test]
    fn an_event_not_closed_by_a_blank_line_at_the_end_of_the_body_is_dropped() {
        assert_eq!(decode_text("data: a\n\ndata: b\n"), vec![ev("message", "a")]);
        assert_eq!(decode_text("data: a\n\ndata: b"), vec![ev("message", "a")]);
        assert_eq!(decode_text("data: a\n\ndata: [DONE]\r"), vec![ev("message", "a")]);
        assert_eq!(decode_text(""), vec![]);
    }

    #[test]
    fn a_byte_order_mark_at_the_start_is_skipped_even_when_split() {
        let text = "\u{feff}data: a\n\n";
        assert_eq!(decode_text(text), vec![ev("message", "a")]);
        assert_eq!(one_byte_at_a_time(text.as_bytes()).unwrap(), vec![ev("message", "a")]);
        // Only at the very start: later it is part of a field name.
        assert_eq!(
            decode_text("data: a\n\n\u{feff}data: b\n\ndata: c\n\n"),
            vec![ev("message", "a"), ev("message", "c")]
        );
        // In the data it is kept.
        assert_eq!(decode_text("data: \u{feff}x\n\n"), vec![ev("message", "\u{feff}x")]);
        // A body that is only part of one.
        assert_eq!(decode([&b"\xEF\xBB"[..]]).unwrap(), vec![]);
    }

    #[test]
    fn invalid_utf8_is_an_error_and_characters_split_between_chunks_are_not() {
        let err = decode([&b"data: ok\n\ndata: \xFF\xFE\n\n"[..]]).unwrap_err();
        assert!(err.to_string().contains("`data:` line is not UTF-8"), "{err}");
        let err = decode([&b"event: \xC3\n\ndata: x\n\n"[..]]).unwrap_err();
        assert!(err.to_string().contains("`event:` line is not UTF-8"), "{err}");
        // Ignored lines are not looked at.
        assert_eq!(
            decode([&b": \xFF\n\ndata: x\n\n"[..]]).unwrap(),
            vec![ev("message", "x")]
        );
        let text = "data: Kyōto ☀ 🦀\n\n";
        assert_eq!(
            one_byte_at_a_time(text.as_bytes()).unwrap(),
            vec![ev("message", "Kyōto ☀ 🦀")]
        );
    }

    #[test]
    fn a_long_line_in_many_chunks_is_one_event() {
        let long = "x".repeat(100_000);
        let text = format!(": ping\ndata: {long}\r\ndata: {long}\r\n\r\ndata: end\n\n");
        let expected = vec![ev("message", &format!("{long}\n{long}")), ev("message", "end")];
        assert_eq!(decode(text.as_bytes().chunks(997)).unwrap(), expected);
        assert_eq!(decode(text.as_bytes().chunks(1)).unwrap(), expected);
    }

    #[test]
    fn events_of_a_whole_body_are_owned_and_a_body_cut_inside_an_event_is_an_error() {
        let body = b"data: a\n\nevent: e\ndata: b\n\n";
        let events = events(body).unwrap();
        assert_eq!(
            events
                .iter()
                .map(|e| (e.event.clone(), e.data.clone()))
                .collect::<Vec<_>>(),
            vec![ev("message", "a"), ev("e", "b")]
        );
        // Blank lines and comments after the last event are not a cut.
        assert_eq!(super::events(b"data: a\n\n\n: bye\n").unwrap().len(), 1);
        for cut in [
            &b"data: a\n\ndata: b"[..],
            b"data: a\n\ndata: b\n",
            b"data: a\n\nevent: x\n",
            b"data: a\n\n: no line end",
        ] {
            let err = super::events(cut).unwrap_err();
            assert!(err.to_string().contains("ends inside an event, after 1 whole"), "{err}");
        }
        assert!(super::events(b"data: \xFF\n\n").is_err());
    }

    #[test]
    fn the_decoder_tells_when_it_holds_part_of_an_event() {
        let mut decoder = SseDecoder::new();
        assert!(!decoder.is_inside_event());
        decoder.push(b"data: a\n");
        assert!(decoder.next_event().unwrap().is_none());
        assert!(decoder.is_inside_event(), "a data line without its blank line");
        decoder.push(b"\n");
        assert!(decoder.next_event().unwrap().is_some());
        assert!(!decoder.is_inside_event(), "the event was handed out");
        decoder.push(b"da");
        assert!(decoder.next_event().unwrap().is_none());
        assert!(decoder.is_inside_event(), "a line not ended");
    }
}
