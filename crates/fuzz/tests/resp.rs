//! Fuzz target of the RESP front end's request parser (`tandem-resp`):
//! whatever a client sends, the parser returns the same requests (or the
//! same protocol error) whether the bytes arrive whole or split at any
//! point, and what it allocates stays within its limits.

use tandem_fuzz::{peak_alloc, Fuzz, Rng};
use tandem_resp::{Limits, Parser, ProtocolError, Request};

const LIMITS: Limits = Limits {
    max_bulk: 64,
    max_args: 16,
    max_request: 256,
    max_inline: 128,
};

fn parse_all(chunks: &[&[u8]]) -> (Vec<Request>, Option<ProtocolError>) {
    let mut p = Parser::new(LIMITS);
    let mut out = Vec::new();
    for c in chunks {
        p.feed(c);
        loop {
            match p.request() {
                Ok(Some(r)) => out.push(r),
                Ok(None) => break,
                Err(e) => return (out, Some(e)),
            }
        }
    }
    (out, None)
}

/// A valid pipeline: arrays of bulk strings, and an inline request.
fn gen(rng: &mut Rng) -> Vec<u8> {
    let mut b = Vec::new();
    for _ in 0..1 + rng.below(4) {
        if rng.one_in(4) {
            b.extend_from_slice(b"PING x\r\n");
            continue;
        }
        let n = 1 + rng.below(4);
        b.extend_from_slice(format!("*{n}\r\n").as_bytes());
        for _ in 0..n {
            let len = rng.below(20);
            let arg = rng.bytes(len);
            b.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            b.extend_from_slice(&arg);
            b.extend_from_slice(b"\r\n");
        }
    }
    b
}

fn check(input: &[u8]) -> String {
    let (whole, alloc) = peak_alloc(|| parse_all(&[input]));
    // Two copies of the input at most (the buffer and the arguments it
    // was cut into), plus the vectors' headers.
    assert!(
        alloc.peak <= 2 * input.len() + 4096,
        "{} bytes held for {} bytes of input",
        alloc.peak,
        input.len()
    );
    let cut = input.len() / 3;
    let split = parse_all(&[&input[..cut], &input[cut..]]);
    assert_eq!(whole, split, "split at {cut}");
    let bytes: Vec<&[u8]> = input.chunks(1).collect();
    assert_eq!(whole, parse_all(&bytes), "a byte at a time");
    match whole {
        (_, Some(e)) => {
            e.0.split(|c: char| c.is_ascii_digit())
                .next()
                .unwrap_or("")
                .to_string()
        }
        (r, None) => format!("{} requests", r.len().min(4)),
    }
}

#[test]
fn fuzz_resp_requests_parse_the_same_however_they_arrive() {
    let seeds = [
        b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n".to_vec(),
        b"SET k v\r\n".to_vec(),
        b"*1\r\n$99999999999\r\n".to_vec(),
        b"*-1\r\n*0\r\n".to_vec(),
    ];
    Fuzz::new("RESP request parser (whole, split, byte by byte)")
        .max_len(1024)
        .seeds(seeds)
        .run(gen, check);
}
