//! Shared flag parsing: sizes, store lists, address lists, secrets.

use std::net::SocketAddr;

use tandem_dkvs::Mode;

/// "4096", "64K", "512M", "2G" (binary units).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                _ => return Err(format!("unknown size suffix in '{s}' (use K, M or G)")),
            };
            (&s[..i], m)
        }
        _ => (s, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size (e.g. 512M)"))?;
    n.checked_mul(mult)
        .filter(|&b| b > 0)
        .ok_or_else(|| format!("size '{s}' is zero or too large"))
}

pub fn parse_stores(s: &str) -> Result<Vec<Mode>, String> {
    let v: Result<Vec<Mode>, String> = s.split(',').map(|x| x.trim().parse()).collect();
    let v = v?;
    if v.is_empty() {
        return Err("no store given".into());
    }
    Ok(v)
}

pub fn parse_addrs(s: &str) -> Result<Vec<SocketAddr>, String> {
    s.split(',')
        .map(|a| {
            a.trim()
                .parse::<SocketAddr>()
                .map_err(|e| format!("bad address '{a}': {e}"))
        })
        .collect()
}

/// The admin secret shared with memory servers: `--secret`, else `TANDEM_SECRET`.
pub fn secret_from(flag: Option<&str>) -> Result<Option<u64>, String> {
    let raw = match flag {
        Some(s) => Some(s.to_string()),
        None => std::env::var("TANDEM_SECRET").ok(),
    };
    match raw {
        None => Ok(None),
        Some(s) => u64::from_str_radix(s.trim().trim_start_matches("0x"), 16)
            .ok()
            .filter(|&v| v != 0)
            .map(Some)
            .ok_or_else(|| {
                "the secret must be a non-zero hex number of up to 16 digits".to_string()
            }),
    }
}

/// A fresh random secret from the OS.
pub fn random_secret() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        if f.read_exact(&mut b).is_ok() {
            return u64::from_le_bytes(b) | 1;
        }
    }
    // Fallback: time and pid; good enough to avoid accidental collisions.
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    (t ^ ((std::process::id() as u64) << 32)) | 1
}

pub fn write_json(path: &str, value: &impl serde::Serialize) -> Result<(), String> {
    let s = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
    std::fs::write(path, s + "\n").map_err(|e| format!("cannot write {path}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_lists_parse_with_clear_errors() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert!(parse_size("12Q").unwrap_err().contains("suffix"));
        assert!(parse_size("0").is_err());
        assert_eq!(
            parse_stores("pandora,ford").unwrap(),
            vec![Mode::Pandora, Mode::Ford]
        );
        assert!(parse_stores("pandora,fast")
            .unwrap_err()
            .contains("unknown store"));
        assert!(parse_addrs("127.0.0.1:1,nope").is_err());
        assert_eq!(secret_from(Some("0xff")).unwrap(), Some(255));
        assert!(secret_from(Some("zz")).is_err());
    }
}
