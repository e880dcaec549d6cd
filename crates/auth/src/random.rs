//! Randomness from the operating system's CSPRNG (`getrandom`), for keys
//! and nonces. Nothing here falls back to a clock: without the OS's
//! generator there is no safe key, so the process stops.

/// `N` fresh random bytes.
pub fn bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).expect("the OS random number generator failed");
    b
}

/// A fresh random u64, never zero (zero means "no key" in key tables).
pub fn nonzero_u64() -> u64 {
    loop {
        let v = u64::from_le_bytes(bytes::<8>());
        if v != 0 {
            return v;
        }
    }
}
