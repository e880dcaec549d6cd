//! Credentials: one 256-bit key per role, held only by the processes that
//! act in that role (docs/SECURITY.md says who holds which).
//!
//! A cluster is configured either with one master secret (`TANDEM_SECRET`,
//! at least 128 bits of hex), from which every role's key is derived, or
//! with a keyring file that holds the keys of some roles only
//! (`TANDEM_KEYRING`, written by `tandem keys`). A process given the compute
//! keyring can join and run transactions, but it cannot revoke anyone:
//! that takes the admin key, which it does not have and cannot derive.

use std::fmt;
use std::path::Path;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// Bytes of a role key (HMAC-SHA256 keys of the hash's output size).
pub const KEY_BYTES: usize = 32;
/// The shortest master secret accepted: 128 bits.
pub const MASTER_BYTES_MIN: usize = 16;

/// What a connecting party claims to be; the listener decides which roles
/// it accepts, and the handshake proves the claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Role {
    /// The membership service (and operators' tools): registers and revokes
    /// compute nodes on memory servers, reads regions to check them.
    Admin = 1,
    /// A compute server: joins the membership, heartbeats, and opens data
    /// connections to memory servers (with its region key).
    Compute = 2,
    /// A memory server announcing itself to the membership as a replacement.
    Memory = 3,
    /// A message-passing node (DDP, HEAL, Kite, ZAB) talking to another, or
    /// to its configuration manager.
    Peer = 4,
    /// A client session of a message-passing node.
    Client = 5,
}

impl Role {
    pub const ALL: [Role; 5] = [
        Role::Admin,
        Role::Compute,
        Role::Memory,
        Role::Peer,
        Role::Client,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Compute => "compute",
            Role::Memory => "memory",
            Role::Peer => "peer",
            Role::Client => "client",
        }
    }

    pub fn from_u8(b: u8) -> Option<Role> {
        Role::ALL.into_iter().find(|r| *r as u8 == b)
    }

    pub fn parse(s: &str) -> Result<Role, String> {
        Role::ALL
            .into_iter()
            .find(|r| r.name() == s.trim())
            .ok_or_else(|| format!("unknown role '{s}': admin, compute, memory, peer or client"))
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One role's key. `Debug` never prints it.
#[derive(Clone, PartialEq, Eq)]
pub struct Key([u8; KEY_BYTES]);

impl Key {
    pub fn bytes(&self) -> &[u8; KEY_BYTES] {
        &self.0
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(..)")
    }
}

/// The keys this process holds, by role.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Keyring {
    keys: [Option<Key>; 6],
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Keyring{:?}", self.roles().collect::<Vec<_>>())
    }
}

impl Keyring {
    /// Every role's key, derived from a master secret of at least 128 bits.
    pub fn from_master(master: &[u8]) -> Result<Keyring, String> {
        if master.len() < MASTER_BYTES_MIN {
            return Err(format!(
                "the secret has {} bits; at least {} are needed (make one with `tandem keys new`)",
                master.len() * 8,
                MASTER_BYTES_MIN * 8
            ));
        }
        let mut ring = Keyring::default();
        for role in Role::ALL {
            ring.set(role, derive(master, role));
        }
        Ok(ring)
    }

    /// A master secret written as hex (what `TANDEM_SECRET` holds).
    pub fn from_master_hex(hex: &str) -> Result<Keyring, String> {
        let bytes = parse_hex(hex.trim().trim_start_matches("0x")).ok_or_else(|| {
            "the secret must be hex digits (make one with `tandem keys new`)".to_string()
        })?;
        Keyring::from_master(&bytes)
    }

    /// A fresh random master secret, as hex (`tandem keys new`).
    pub fn new_master_hex() -> String {
        to_hex(&crate::random::bytes::<KEY_BYTES>())
    }

    pub fn set(&mut self, role: Role, key: Key) {
        self.keys[role as usize] = Some(key);
    }

    pub fn get(&self, role: Role) -> Option<&Key> {
        self.keys[role as usize].as_ref()
    }

    /// The key for `role`, or an error that says which credential is missing.
    pub fn require(&self, role: Role) -> Result<&Key, String> {
        self.get(role).ok_or_else(|| {
            format!(
                "no {role} credential: this process's keyring holds {}",
                self.describe()
            )
        })
    }

    pub fn roles(&self) -> impl Iterator<Item = Role> + '_ {
        Role::ALL.into_iter().filter(|r| self.get(*r).is_some())
    }

    /// Only the keys of `roles` (to write a keyring for one kind of process).
    pub fn only(&self, roles: &[Role]) -> Keyring {
        let mut ring = Keyring::default();
        for r in roles {
            if let Some(k) = self.get(*r) {
                ring.set(*r, k.clone());
            }
        }
        ring
    }

    fn describe(&self) -> String {
        let v: Vec<_> = self.roles().map(|r| r.name()).collect();
        if v.is_empty() {
            "no keys".into()
        } else {
            v.join(", ")
        }
    }

    /// The keyring file's text: a `role = hex` line per key.
    pub fn to_file_text(&self) -> String {
        let mut s = String::from("# Tandem keyring: one line per role this process may act as.\n");
        for r in self.roles() {
            s.push_str(&format!(
                "{} = {}\n",
                r.name(),
                to_hex(self.get(r).unwrap().bytes())
            ));
        }
        s
    }

    /// Parse a keyring file's text.
    pub fn from_file_text(text: &str) -> Result<Keyring, String> {
        let mut ring = Keyring::default();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (role, hex) = line
                .split_once('=')
                .ok_or_else(|| format!("line {}: expected `role = hex`", i + 1))?;
            let role = Role::parse(role).map_err(|e| format!("line {}: {e}", i + 1))?;
            let bytes = parse_hex(hex.trim())
                .filter(|b| b.len() == KEY_BYTES)
                .ok_or_else(|| format!("line {}: a key is {} hex digits", i + 1, KEY_BYTES * 2))?;
            ring.set(role, Key(bytes.try_into().unwrap()));
        }
        if ring.roles().next().is_none() {
            return Err("the keyring holds no key".into());
        }
        Ok(ring)
    }

    /// Read a keyring file. A file others may read is refused, as ssh refuses
    /// a private key anyone can read.
    pub fn from_file(path: &Path) -> Result<Keyring, String> {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(format!(
                "{}: a keyring must be readable by its owner only (chmod 600)",
                path.display()
            ));
        }
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Keyring::from_file_text(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Write a keyring file readable by its owner only (replacing one there).
    pub fn write_file(&self, path: &Path) -> Result<(), String> {
        use std::io::Write;
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let err = |e: std::io::Error| format!("{}: {e}", path.display());
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)
            .map_err(err)?;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(err)?;
        f.write_all(self.to_file_text().as_bytes()).map_err(err)
    }

    /// What the environment gives this process: `TANDEM_KEYRING` (a keyring
    /// file), else `TANDEM_SECRET` (a master secret), else nothing.
    pub fn from_env() -> Result<Option<Keyring>, String> {
        if let Ok(path) = std::env::var("TANDEM_KEYRING") {
            return Keyring::from_file(Path::new(&path)).map(Some);
        }
        match std::env::var("TANDEM_SECRET") {
            Ok(hex) => Keyring::from_master_hex(&hex)
                .map(Some)
                .map_err(|e| format!("TANDEM_SECRET: {e}")),
            Err(_) => Ok(None),
        }
    }
}

/// A master secret, as hex: what a launcher hands its child processes in
/// `TANDEM_SECRET`, and the keyring it derives. `Debug` never prints it.
#[derive(Clone, PartialEq, Eq)]
pub struct MasterSecret(String);

impl MasterSecret {
    /// A fresh one from the OS's CSPRNG.
    pub fn generate() -> MasterSecret {
        MasterSecret(Keyring::new_master_hex())
    }

    pub fn from_hex(hex: &str) -> Result<MasterSecret, String> {
        Keyring::from_master_hex(hex)?;
        Ok(MasterSecret(
            hex.trim().trim_start_matches("0x").to_string(),
        ))
    }

    /// What `TANDEM_SECRET` must hold.
    pub fn hex(&self) -> &str {
        &self.0
    }

    /// Every role's key.
    pub fn keyring(&self) -> Keyring {
        Keyring::from_master_hex(&self.0).expect("checked when made")
    }
}

impl fmt::Debug for MasterSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MasterSecret(..)")
    }
}

/// A role's key from the master secret: HMAC-SHA256(master, label). The
/// label names the role, so knowing one role's key reveals no other.
fn derive(master: &[u8], role: Role) -> Key {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(master).expect("HMAC takes any key length");
    mac.update(b"tandem/v1/role-key/");
    mac.update(role.name().as_bytes());
    Key(mac.finalize().into_bytes().into())
}

pub fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn parse_hex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_secret_is_refused_and_a_long_one_derives_distinct_keys() {
        assert!(Keyring::from_master_hex("c0ffee").is_err());
        assert!(Keyring::from_master_hex("00112233445566778899aabbccddeeff").is_ok());
        let ring = Keyring::from_master_hex(&Keyring::new_master_hex()).unwrap();
        let keys: std::collections::BTreeSet<_> = Role::ALL
            .iter()
            .map(|r| *ring.get(*r).unwrap().bytes())
            .collect();
        assert_eq!(keys.len(), Role::ALL.len());
    }

    #[test]
    fn a_keyring_file_round_trips_and_holds_only_what_it_was_given() {
        let ring = Keyring::from_master_hex(&Keyring::new_master_hex()).unwrap();
        let compute = ring.only(&[Role::Compute]);
        let back = Keyring::from_file_text(&compute.to_file_text()).unwrap();
        assert_eq!(back, compute);
        assert!(back.get(Role::Admin).is_none());
        assert!(back
            .require(Role::Admin)
            .unwrap_err()
            .contains("no admin credential"));
        assert!(Keyring::from_file_text("admin = 00").is_err());
        assert!(Keyring::from_file_text("root = 00").is_err());
    }

    #[test]
    fn debug_never_prints_a_key() {
        let ring = Keyring::from_master_hex(&Keyring::new_master_hex()).unwrap();
        let hex = to_hex(ring.get(Role::Admin).unwrap().bytes());
        assert!(!format!("{ring:?}").contains(&hex[..8]));
    }
}
