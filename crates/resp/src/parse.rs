//! The incremental request parser.

use crate::Request;

/// What one connection's parser accepts.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Bytes in one bulk string (a key or a value).
    pub max_bulk: usize,
    /// Arguments in one request (the command's name included).
    pub max_args: usize,
    /// Bytes of all the arguments of one request together.
    pub max_request: usize,
    /// Bytes of an inline request's line.
    pub max_inline: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bulk: 1 << 20,
            max_args: 1 << 16,
            max_request: 16 << 20,
            max_inline: 64 << 10,
        }
    }
}

/// A request that breaks the protocol or a limit; the server answers it
/// with `-ERR Protocol error: ...` and closes the connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Protocol error: {}", self.0)
    }
}

fn fail<T>(why: impl Into<String>) -> Result<T, ProtocolError> {
    Err(ProtocolError(why.into()))
}

/// Longest `*N` or `$N` header line, CRLF included.
const MAX_HEADER: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq)]
enum State {
    /// Between requests.
    Start,
    /// Inside `*N`: this many bulk strings still to come.
    Args { left: usize },
    /// Inside `$N`: the bulk string's length.
    Bulk { len: usize, left: usize },
}

/// One connection's parser: [`Parser::feed`] it what arrived, take the
/// requests it completes with [`Parser::request`].
#[derive(Debug)]
pub struct Parser {
    limits: Limits,
    buf: Vec<u8>,
    /// Parsed up to here.
    pos: usize,
    /// Searched for a line end up to here (from `pos`).
    scanned: usize,
    state: State,
    args: Request,
    arg_bytes: usize,
}

impl Parser {
    pub fn new(limits: Limits) -> Parser {
        Parser {
            limits,
            buf: Vec::new(),
            pos: 0,
            scanned: 0,
            state: State::Start,
            args: Vec::new(),
            arg_bytes: 0,
        }
    }

    /// Bytes received and not yet parsed into a request: a server stops
    /// reading a connection while this is large (pipelined requests wait
    /// in the kernel, not here).
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn feed(&mut self, data: &[u8]) {
        if self.pos > 0 && self.pos >= self.buf.len() / 2 {
            self.buf.drain(..self.pos);
            self.scanned -= self.pos;
            self.pos = 0;
        }
        self.buf.extend_from_slice(data);
    }

    /// The next whole request, if one has arrived.
    pub fn request(&mut self) -> Result<Option<Request>, ProtocolError> {
        loop {
            match self.state {
                State::Start => {
                    let Some(&first) = self.buf.get(self.pos) else {
                        return Ok(None);
                    };
                    if first != b'*' {
                        match self.inline()? {
                            None => return Ok(None),
                            // An empty line: nothing to run (looped, not
                            // recursed: a client may send a million).
                            Some(words) if words.is_empty() => continue,
                            Some(words) => return Ok(Some(words)),
                        }
                    }
                    let Some(n) = self.header(b'*')? else {
                        return Ok(None);
                    };
                    match n {
                        // `*0` and `*-1` are empty: nothing to run.
                        n if n <= 0 => continue,
                        n if n as usize > self.limits.max_args => {
                            return fail("invalid multibulk length")
                        }
                        n => {
                            self.args = Vec::with_capacity((n as usize).min(64));
                            self.arg_bytes = 0;
                            self.state = State::Args { left: n as usize };
                        }
                    }
                }
                State::Args { left: 0 } => {
                    self.state = State::Start;
                    return Ok(Some(std::mem::take(&mut self.args)));
                }
                State::Args { left } => {
                    let Some(n) = self.header(b'$')? else {
                        return Ok(None);
                    };
                    if n < 0 || n as usize > self.limits.max_bulk {
                        return fail("invalid bulk length");
                    }
                    self.arg_bytes += n as usize;
                    if self.arg_bytes > self.limits.max_request {
                        return fail("request too large");
                    }
                    self.state = State::Bulk {
                        len: n as usize,
                        left,
                    };
                }
                State::Bulk { len, left } => {
                    if self.buffered() < len + 2 {
                        return Ok(None);
                    }
                    let (start, end) = (self.pos, self.pos + len);
                    if &self.buf[end..end + 2] != b"\r\n" {
                        return fail("bulk string not followed by CRLF");
                    }
                    self.args.push(self.buf[start..end].to_vec());
                    self.advance(len + 2);
                    self.state = State::Args { left: left - 1 };
                }
            }
        }
    }

    fn advance(&mut self, n: usize) {
        self.pos += n;
        self.scanned = self.pos;
    }

    /// The end of the line that starts at `pos` (the index of its `\n`),
    /// searching only bytes not searched before; `None` while incomplete,
    /// an error once `max` bytes hold no line end.
    fn line_end(&mut self, max: usize, what: &str) -> Result<Option<usize>, ProtocolError> {
        let from = self.scanned.max(self.pos);
        let upto = self.buf.len().min(self.pos + max);
        match self.buf[from..upto].iter().position(|&b| b == b'\n') {
            Some(i) => Ok(Some(from + i)),
            None if upto - self.pos >= max => fail(format!("too big {what}")),
            None => {
                self.scanned = upto;
                Ok(None)
            }
        }
    }

    /// A `*N` or `$N` line: its number.
    fn header(&mut self, kind: u8) -> Result<Option<i64>, ProtocolError> {
        let Some(end) = self.line_end(MAX_HEADER, "length header")? else {
            return Ok(None);
        };
        let line = &self.buf[self.pos..end];
        if line.first() != Some(&kind) {
            let got = line.first().map_or('?', |&b| b as char);
            return fail(format!("expected '{}', got '{got}'", kind as char));
        }
        let Some(digits) = line[1..].strip_suffix(b"\r") else {
            return fail("length header not ended by CRLF");
        };
        let n = std::str::from_utf8(digits)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .ok_or_else(|| ProtocolError(format!("invalid {} length", noun(kind))))?;
        self.advance(end + 1 - self.pos);
        Ok(Some(n))
    }

    /// An inline request: one line, its words split on spaces (a telnet
    /// session's; no quoting).
    fn inline(&mut self) -> Result<Option<Request>, ProtocolError> {
        let Some(end) = self.line_end(self.limits.max_inline, "inline request")? else {
            return Ok(None);
        };
        let line = &self.buf[self.pos..end];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let words: Request = line
            .split(|&b| b == b' ' || b == b'\t')
            .filter(|w| !w.is_empty())
            .map(<[u8]>::to_vec)
            .collect();
        self.advance(end + 1 - self.pos);
        if words.len() > self.limits.max_args {
            return fail("invalid multibulk length");
        }
        Ok(Some(words))
    }
}

fn noun(kind: u8) -> &'static str {
    match kind {
        b'*' => "multibulk",
        _ => "bulk",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(p: &mut Parser) -> Result<Vec<Request>, ProtocolError> {
        let mut out = Vec::new();
        while let Some(r) = p.request()? {
            out.push(r);
        }
        Ok(out)
    }

    fn words(r: &[Vec<u8>]) -> Vec<&str> {
        r.iter().map(|w| std::str::from_utf8(w).unwrap()).collect()
    }

    #[test]
    fn arrays_and_inline_requests_parse_whole_or_a_byte_at_a_time() {
        let wire = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\na\r\nb!\r\nPING\r\n*1\r\n$4\r\nPING\r\n";
        let mut whole = Parser::new(Limits::default());
        whole.feed(wire);
        let a = all(&mut whole).unwrap();
        let mut slow = Parser::new(Limits::default());
        let mut b = Vec::new();
        for &byte in wire {
            slow.feed(&[byte]);
            b.extend(all(&mut slow).unwrap());
        }
        assert_eq!(a, b);
        assert_eq!(words(&a[0]), ["SET", "k", "a\r\nb!"]);
        assert_eq!(words(&a[1]), ["PING"]);
        assert_eq!(words(&a[2]), ["PING"]);
        assert_eq!(whole.buffered(), 0);
    }

    fn error(wire: &[u8], limits: Limits) -> String {
        let mut p = Parser::new(limits);
        p.feed(wire);
        all(&mut p).unwrap_err().to_string()
    }

    /// Every length is checked before anything is allocated or awaited: a
    /// huge one is an error at once, not a wait for that many bytes.
    #[test]
    fn bad_and_oversized_requests_are_refused_before_they_are_buffered() {
        let d = Limits::default();
        assert!(error(b"*99999999999\r\n", d).contains("invalid multibulk length"));
        assert!(error(b"*1\r\n$2147483648\r\n", d).contains("invalid bulk length"));
        assert!(error(b"*1\r\n$-5\r\n", d).contains("invalid bulk length"));
        assert!(error(b"*1\r\n*1\r\n", d).contains("expected '$', got '*'"));
        assert!(error(b"*1\r\n$1\r\nab\r\n", d).contains("CRLF"));
        assert!(error(b"*x\r\n", d).contains("invalid multibulk length"));
        assert!(error(&[b'*'; 40], d).contains("too big length header"));
        let small = Limits {
            max_inline: 8,
            max_request: 6,
            ..d
        };
        assert!(error(b"GET abcdefgh", small).contains("too big inline request"));
        assert!(error(b"*2\r\n$4\r\nabcd\r\n$4\r\n", small).contains("request too large"));
    }

    /// Empty lines and empty arrays are skipped in a loop: a million of
    /// them cost no stack.
    #[test]
    fn a_million_empty_requests_are_skipped_without_recursion() {
        let mut p = Parser::new(Limits::default());
        p.feed(&b"\r\n*0\r\n\n".repeat(1_000_000));
        p.feed(b"PING\r\n");
        assert_eq!(p.request().unwrap().unwrap(), vec![b"PING".to_vec()]);
    }

    /// A slow client's partial line is searched once, not from its start on
    /// every byte.
    #[test]
    fn a_partial_line_is_searched_once() {
        let mut p = Parser::new(Limits::default());
        for _ in 0..1000 {
            p.feed(b"a");
            assert_eq!(p.request(), Ok(None));
            assert_eq!(p.scanned, p.buf.len());
        }
        p.feed(b"\r\n");
        assert_eq!(p.request().unwrap().unwrap().len(), 1);
    }
}
