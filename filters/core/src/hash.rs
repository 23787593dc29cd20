//! A 64-bit hash fixed for all builds and machines: session names and key
//! ids are hashed with it, and every gateway replica must compute the same
//! values to choose the same provider key ([`crate::keys`]).

/// A 64-bit hash of bytes, fixed for all builds and machines (every
/// gateway replica must compute the same): eight bytes at a time, each
/// word mixed in by a multiply and a rotation, finished by
/// [`mix`].
pub fn hash_bytes(seed: u64, bytes: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h = seed ^ (bytes.len() as u64).wrapping_mul(K);
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        h = (h ^ u64::from_le_bytes(b)).wrapping_mul(K).rotate_left(29);
    }
    let mut last = [0u8; 8];
    let rest = words.remainder();
    last[..rest.len()].copy_from_slice(rest);
    h = (h ^ u64::from_le_bytes(last)).wrapping_mul(K);
    mix(h)
}

/// splitmix64's finaliser: every input bit moves every output bit.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
