//! Redis's data commands, parsed and checked before they run (so `MULTI`
//! can queue them and refuse a bad one at once, as Redis does).

use tandem_resp::{Reply, Request};

/// `SET`'s condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cond {
    Always,
    /// `NX`: only if the key is absent.
    Absent,
    /// `XX`: only if the key is present.
    Present,
}

/// A command that reads or writes keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cmd {
    Get(Vec<u8>),
    Set {
        key: Vec<u8>,
        value: Vec<u8>,
        cond: Cond,
        /// `GET`: answer the old value.
        get: bool,
    },
    Del(Vec<Vec<u8>>),
    Exists(Vec<Vec<u8>>),
    MGet(Vec<Vec<u8>>),
    MSet(Vec<(Vec<u8>, Vec<u8>)>),
    IncrBy(Vec<u8>, i64),
    /// `WATCH`'s read of a key's write stamp (an integer; nil if absent).
    /// No client command parses to it.
    Stamp(Vec<u8>),
}

impl Cmd {
    /// Whether it may write (a cut-off run of it has an unknown outcome).
    pub fn writes(&self) -> bool {
        !matches!(
            self,
            Cmd::Get(_) | Cmd::Exists(_) | Cmd::MGet(_) | Cmd::Stamp(_)
        )
    }
}

pub use tandem_resp::control::{name, wrong_args};

fn syntax() -> Reply {
    Reply::err("ERR syntax error")
}

fn not_integer() -> Reply {
    Reply::err("ERR value is not an integer or out of range")
}

/// Parse a data command. `None`: not one (a control command, or unknown).
pub fn parse(req: &Request) -> Option<Result<Cmd, Reply>> {
    let n = name(req);
    let args = &req[1..];
    let at_least = |k: usize| {
        if args.len() >= k {
            Ok(())
        } else {
            Err(wrong_args(&n))
        }
    };
    let exactly = |k: usize| {
        if args.len() == k {
            Ok(())
        } else {
            Err(wrong_args(&n))
        }
    };
    let cmd = match n.as_str() {
        "GET" => exactly(1).map(|_| Cmd::Get(args[0].clone())),
        "SET" => at_least(2).and_then(|_| set(args)),
        "DEL" | "UNLINK" => at_least(1).map(|_| Cmd::Del(args.to_vec())),
        "EXISTS" => at_least(1).map(|_| Cmd::Exists(args.to_vec())),
        "MGET" => at_least(1).map(|_| Cmd::MGet(args.to_vec())),
        "MSET" if args.is_empty() || args.len() % 2 == 1 => Err(wrong_args(&n)),
        "MSET" => Ok(Cmd::MSet(
            args.chunks(2)
                .map(|p| (p[0].clone(), p[1].clone()))
                .collect(),
        )),
        "INCR" => exactly(1).map(|_| Cmd::IncrBy(args[0].clone(), 1)),
        "DECR" => exactly(1).map(|_| Cmd::IncrBy(args[0].clone(), -1)),
        "INCRBY" | "DECRBY" => exactly(2).and_then(|_| {
            let by = integer(&args[1]).ok_or_else(not_integer)?;
            let by = if n == "DECRBY" {
                by.checked_neg().ok_or_else(not_integer)?
            } else {
                by
            };
            Ok(Cmd::IncrBy(args[0].clone(), by))
        }),
        _ => return None,
    };
    Some(cmd)
}

fn set(args: &[Vec<u8>]) -> Result<Cmd, Reply> {
    let (mut cond, mut get) = (Cond::Always, false);
    for opt in &args[2..] {
        match String::from_utf8_lossy(opt).to_ascii_uppercase().as_str() {
            "NX" if cond == Cond::Always => cond = Cond::Absent,
            "XX" if cond == Cond::Always => cond = Cond::Present,
            "GET" => get = true,
            "EX" | "PX" | "EXAT" | "PXAT" | "KEEPTTL" => return Err(Reply::err(
                "ERR this store's keys do not expire (EX, PX, EXAT, PXAT and KEEPTTL are refused)",
            )),
            _ => return Err(syntax()),
        }
    }
    Ok(Cmd::Set {
        key: args[0].clone(),
        value: args[1].clone(),
        cond,
        get,
    })
}

/// A Redis integer: optional minus, decimal digits, no spaces or plus.
pub fn integer(b: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.is_empty() || s.starts_with('+') || s.len() > 20 {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(words: &str) -> Request {
        words.split(' ').map(|w| w.as_bytes().to_vec()).collect()
    }

    #[test]
    fn commands_are_checked_before_they_run() {
        assert_eq!(parse(&req("get k")), Some(Ok(Cmd::Get(b"k".to_vec()))));
        assert_eq!(parse(&req("PING")), None);
        assert_eq!(parse(&req("GET")), Some(Err(wrong_args("GET"))));
        assert_eq!(parse(&req("MSET a 1 b")), Some(Err(wrong_args("MSET"))));
        assert_eq!(parse(&req("SET k v NX XX")), Some(Err(syntax())));
        assert!(
            matches!(parse(&req("SET k v EX 10")), Some(Err(Reply::Error(e))) if e.contains("expire"))
        );
        assert_eq!(parse(&req("INCRBY k 1x")), Some(Err(not_integer())));
        assert_eq!(
            parse(&req("DECRBY k 3")),
            Some(Ok(Cmd::IncrBy(b"k".to_vec(), -3)))
        );
        assert_eq!(integer(b"-12"), Some(-12));
        assert_eq!(integer(b"+1"), None);
    }
}
