//! RESP2 replies.

/// What a server answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`
    Simple(String),
    /// `-ERR ...`: the text after the dash, its first word the error's kind.
    Error(String),
    Int(i64),
    Bulk(Vec<u8>),
    /// `$-1`: a key that is absent.
    Nil,
    Array(Vec<Reply>),
    /// `*-1`: an `EXEC` whose watched keys changed.
    NilArray,
}

impl Reply {
    pub fn ok() -> Reply {
        Reply::Simple("OK".into())
    }

    /// `-ERR text`, or `-KIND text` when `text` starts with an upper-case kind.
    pub fn err(text: impl Into<String>) -> Reply {
        Reply::Error(text.into())
    }

    /// Append the reply's bytes to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Reply::Simple(s) => line(out, b'+', clean(s).as_bytes()),
            Reply::Error(s) => line(out, b'-', clean(s).as_bytes()),
            Reply::Int(n) => line(out, b':', n.to_string().as_bytes()),
            Reply::Bulk(b) => {
                line(out, b'$', b.len().to_string().as_bytes());
                out.extend_from_slice(b);
                out.extend_from_slice(b"\r\n");
            }
            Reply::Nil => out.extend_from_slice(b"$-1\r\n"),
            Reply::NilArray => out.extend_from_slice(b"*-1\r\n"),
            Reply::Array(items) => {
                line(out, b'*', items.len().to_string().as_bytes());
                for i in items {
                    i.encode(out);
                }
            }
        }
    }
}

fn line(out: &mut Vec<u8>, kind: u8, body: &[u8]) {
    out.push(kind);
    out.extend_from_slice(body);
    out.extend_from_slice(b"\r\n");
}

/// A simple string or error may not hold a line break.
fn clean(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains(['\r', '\n']) {
        s.replace(['\r', '\n'], " ").into()
    } else {
        s.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(r: &Reply) -> String {
        let mut out = Vec::new();
        r.encode(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn replies_encode_as_redis_sends_them() {
        assert_eq!(bytes(&Reply::ok()), "+OK\r\n");
        assert_eq!(bytes(&Reply::err("ERR no\r\nway")), "-ERR no  way\r\n");
        assert_eq!(bytes(&Reply::Int(-3)), ":-3\r\n");
        assert_eq!(bytes(&Reply::Bulk(b"a\r\nb".to_vec())), "$4\r\na\r\nb\r\n");
        assert_eq!(bytes(&Reply::Nil), "$-1\r\n");
        assert_eq!(bytes(&Reply::NilArray), "*-1\r\n");
        let a = Reply::Array(vec![Reply::Int(1), Reply::Nil]);
        assert_eq!(bytes(&a), "*2\r\n:1\r\n$-1\r\n");
    }
}
