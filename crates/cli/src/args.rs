//! Shared flag parsing: sizes, store lists, address lists, secrets.

use std::net::SocketAddr;

use tandem_fabric::auth::Keyring;

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

/// This process's credentials: `--secret HEX` (a master secret, every
/// role), else `TANDEM_KEYRING` (a keyring file: some roles), else
/// `TANDEM_SECRET`.
pub fn keyring_from(flag: Option<&str>) -> Result<Option<Keyring>, String> {
    match flag {
        Some(hex) => Keyring::from_master_hex(hex)
            .map(Some)
            .map_err(|e| format!("--secret: {e}")),
        None => Keyring::from_env(),
    }
}

/// [`keyring_from`], required.
pub fn require_keyring(flag: Option<&str>) -> Result<Keyring, String> {
    keyring_from(flag)?.ok_or_else(|| {
        "credentials are needed: --secret HEX, TANDEM_SECRET or TANDEM_KEYRING (make a secret with `tandem keys new`)".to_string()
    })
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
        assert!(keyring_from(Some("0xff"))
            .unwrap_err()
            .contains("at least 128"));
        assert!(keyring_from(Some("zz")).is_err());
        let ring = keyring_from(Some("00112233445566778899aabbccddeeff"))
            .unwrap()
            .unwrap();
        assert!(ring.get(tandem_fabric::auth::Role::Admin).is_some());
    }
}
