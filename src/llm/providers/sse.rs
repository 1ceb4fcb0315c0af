//! An incremental Server-Sent Events parser (the WHATWG `text/event-stream` rules).
//!
//! Bytes arrive in whatever pieces the network delivers, so the parser keeps the
//! unfinished line as raw bytes and decodes it only once the line is complete: a UTF-8
//! character split between two reads is never mangled. Line ends are `\n`, `\r\n` or a
//! lone `\r`; a `\r` at the end of one piece with its `\n` in the next is one line end,
//! not two.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field; `None` means the default type, `message`.
    pub event: Option<String>,
    /// All `data:` lines joined with `\n`.
    pub data: String,
    pub id: Option<String>,
}

#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    /// The previous piece ended in `\r`: a leading `\n` in the next piece belongs to it.
    after_cr: bool,
    /// Whether the stream's first bytes (and a possible byte-order mark) were seen.
    bom_checked: bool,
    event: Option<String>,
    data: String,
    has_data: bool,
    id: Option<String>,
    /// Any field line has been read since the last dispatch.
    fields_pending: bool,
    /// Why the stream was refused: a line or an event past its cap. Once set, nothing
    /// more is read.
    overflow: Option<String>,
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// The longest line kept: a server that streams without a newline must not fill memory.
pub const MAX_LINE: usize = 1 << 20;
/// The most data one event may carry.
pub const MAX_EVENT: usize = 4 << 20;

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feed the next piece of the stream; complete events are appended to `out`.
    pub fn feed(&mut self, mut bytes: &[u8], out: &mut Vec<SseEvent>) {
        if self.overflow.is_some() {
            return;
        }
        if !self.bom_checked {
            // The BOM may itself be split across pieces: wait until three bytes are in.
            self.line.extend_from_slice(bytes);
            if self.line.len() < BOM.len() && BOM.starts_with(&self.line) {
                return;
            }
            self.bom_checked = true;
            let pending = std::mem::take(&mut self.line);
            let start = if pending.starts_with(BOM) { BOM.len() } else { 0 };
            return self.feed(&pending[start..], out);
        }
        if bytes.is_empty() {
            return; // an empty read must not forget a pending `\r`
        }
        if self.after_cr {
            self.after_cr = false;
            if let Some(rest) = bytes.strip_prefix(b"\n") {
                bytes = rest;
            }
        }
        while let Some(pos) = bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.line.extend_from_slice(&bytes[..pos]);
            let line = std::mem::take(&mut self.line);
            self.process_line(&line, out);
            if bytes[pos] == b'\r' {
                match bytes.get(pos + 1) {
                    Some(b'\n') => bytes = &bytes[pos + 2..],
                    Some(_) => bytes = &bytes[pos + 1..],
                    None => {
                        self.after_cr = true;
                        bytes = &[];
                    }
                }
            } else {
                bytes = &bytes[pos + 1..];
            }
        }
        self.line.extend_from_slice(bytes);
        if self.line.len() > MAX_LINE {
            self.refuse(format!("a line is longer than {} MiB", MAX_LINE >> 20));
        }
    }

    /// Why the stream was refused, if it was: the caller ends the call with this.
    pub fn overflow(&self) -> Option<&str> {
        self.overflow.as_deref()
    }

    fn refuse(&mut self, why: String) {
        self.line = Vec::new();
        self.data = String::new();
        self.overflow.get_or_insert(why);
    }

    /// Whether the stream so far ends inside an event: an unfinished line, or fields
    /// not yet closed by a blank line. At the end of a stream this means the stream
    /// was cut off.
    pub fn has_partial_event(&self) -> bool {
        (!self.line.is_empty() && !(self.line.len() < BOM.len() && !self.bom_checked && BOM.starts_with(&self.line)))
            || self.fields_pending
    }

    fn process_line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) {
        if self.overflow.is_some() {
            return;
        }
        if line.len() > MAX_LINE {
            return self.refuse(format!("a line is longer than {} MiB", MAX_LINE >> 20));
        }
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line[0] == b':' {
            return; // comment, often a keep-alive
        }
        let text = String::from_utf8_lossy(line);
        let (field, value) = match text.find(':') {
            Some(i) => {
                let value = &text[i + 1..];
                (&text[..i], value.strip_prefix(' ').unwrap_or(value))
            }
            None => (&text[..], ""),
        };
        match field {
            "event" => {
                self.event = Some(value.to_string());
                self.fields_pending = true;
            }
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
                self.fields_pending = true;
                if self.data.len() > MAX_EVENT {
                    self.refuse(format!("an event carries more than {} MiB", MAX_EVENT >> 20));
                }
            }
            "id" if !value.contains('\0') => {
                self.id = Some(value.to_string());
                self.fields_pending = true;
            }
            _ => {} // `retry` and unknown fields are ignored, as the standard says
        }
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        self.fields_pending = false;
        let event = self.event.take();
        if !self.has_data {
            return;
        }
        self.has_data = false;
        out.push(SseEvent { event, data: std::mem::take(&mut self.data), id: self.id.clone() });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_in_pieces(stream: &[u8], cuts: &[usize]) -> (Vec<SseEvent>, bool) {
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        let mut start = 0;
        for &cut in cuts.iter().chain(std::iter::once(&stream.len())) {
            parser.feed(&stream[start..cut], &mut out);
            start = cut;
        }
        (out, parser.has_partial_event())
    }

    fn ev(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent { event: event.map(str::to_string), data: data.to_string(), id: None }
    }

    const STREAM: &str = "\u{FEFF}: keep-alive\r\n\r\nevent: message_start\r\ndata: {\"a\":\"héllo 世界\"}\r\n\r\n\
                          data:first\rdata: second\r\rdata: [DONE]\n\n";

    fn expected() -> Vec<SseEvent> {
        vec![
            ev(Some("message_start"), "{\"a\":\"héllo 世界\"}"),
            ev(None, "first\nsecond"),
            ev(None, "[DONE]"),
        ]
    }

    #[test]
    fn whole_stream_parses() {
        let (events, partial) = parse_in_pieces(STREAM.as_bytes(), &[]);
        assert_eq!(events, expected());
        assert!(!partial);
    }

    #[test]
    fn every_single_split_point_gives_the_same_events() {
        let bytes = STREAM.as_bytes();
        for cut in 0..=bytes.len() {
            let (events, partial) = parse_in_pieces(bytes, &[cut]);
            assert_eq!(events, expected(), "split at byte {cut}");
            assert!(!partial, "split at byte {cut}");
        }
    }

    #[test]
    fn every_pair_of_split_points_gives_the_same_events() {
        let bytes = STREAM.as_bytes();
        for a in 0..=bytes.len() {
            for b in a..=bytes.len() {
                let (events, _) = parse_in_pieces(bytes, &[a, b]);
                assert_eq!(events, expected(), "split at bytes {a} and {b}");
            }
        }
    }

    #[test]
    fn byte_by_byte_gives_the_same_events() {
        let bytes = STREAM.as_bytes();
        let cuts: Vec<usize> = (1..bytes.len()).collect();
        assert_eq!(parse_in_pieces(bytes, &cuts).0, expected());
    }

    #[test]
    fn a_stream_cut_inside_an_event_is_partial() {
        let full = "data: {\"x\":1}\n\ndata: {\"y\":";
        let (events, partial) = parse_in_pieces(full.as_bytes(), &[]);
        assert_eq!(events, vec![ev(None, "{\"x\":1}")]);
        assert!(partial);
        // A complete line without its blank line is still an unfinished event.
        let (events, partial) = parse_in_pieces(b"data: {\"x\":1}\n", &[]);
        assert!(events.is_empty());
        assert!(partial);
    }

    #[test]
    fn comments_and_unknown_fields_dispatch_nothing() {
        let (events, partial) = parse_in_pieces(b": ping\n\nretry: 100\nfoo: bar\n\n", &[]);
        assert!(events.is_empty());
        assert!(!partial);
    }

    #[test]
    fn invalid_utf8_is_replaced_not_fatal() {
        let (events, _) = parse_in_pieces(b"data: a\xFFb\n\n", &[]);
        assert_eq!(events, vec![ev(None, "a\u{FFFD}b")]);
    }

    #[test]
    fn id_is_kept_across_events() {
        let (events, _) = parse_in_pieces(b"id: 7\ndata: a\n\ndata: b\n\n", &[]);
        assert_eq!(events[0].id.as_deref(), Some("7"));
        assert_eq!(events[1].id.as_deref(), Some("7"));
    }
}
