//! The hash of a hash map's keys. Maps live in shared memory that every version of the
//! shim and the CLI may open, so the value of this function is part of the map format: a
//! faster path for a key size must give exactly what the general one gives.

/// The multiplier of every word step of [`hash_key`].
pub(crate) const WORD_MUL: u64 = 0x9e37_79b9_7f4a_7c15;
/// The multiplier of [`hash_key`]'s final mix.
pub(crate) const FINAL_MUL: u64 = 0xd6e8_feb8_6659_fd93;

/// The hash of a key: 8-byte words through a multiply-xorshift mix, seeded per map. Keys
/// of 4 and 8 bytes are one word `w` (little-endian, zero-extended):
/// `h = (seed ^ w) * WORD_MUL; h ^= h >> 32; h *= FINAL_MUL; h ^= h >> 32`, the low 32 bits
/// (what the JIT's inlined lookups compute, `jit::translate::inline_hash`).
#[inline(always)]
pub(crate) fn hash_key(seed: u64, key: &[u8]) -> u32 {
    const K: u64 = WORD_MUL;
    // The common key sizes take one word and two multiplications.
    let word = match key.len() {
        4 => {
            let mut w = [0u8; 4];
            w.copy_from_slice(key);
            Some(u64::from(u32::from_le_bytes(w)))
        }
        8 => {
            let mut w = [0u8; 8];
            w.copy_from_slice(key);
            Some(u64::from_le_bytes(w))
        }
        _ => None,
    };
    if let Some(w) = word {
        let mut h = (seed ^ w).wrapping_mul(K);
        h ^= h >> 32;
        h = h.wrapping_mul(FINAL_MUL);
        h ^= h >> 32;
        return h as u32;
    }
    if let Ok(k) = <&[u8; 16]>::try_from(key) {
        // The general loop below unrolled for two words (same value: maps in shared memory
        // are hashed alike by every version that opens them).
        let [a, b] = [0, 8].map(|o| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&k[o..o + 8]);
            u64::from_le_bytes(w)
        });
        let mut h = seed ^ 16u64.wrapping_mul(K);
        h = (h ^ a).wrapping_mul(K);
        h ^= h >> 29;
        h = (h ^ b).wrapping_mul(K);
        h ^= h >> 29;
        h ^= h >> 32;
        h = h.wrapping_mul(FINAL_MUL);
        h ^= h >> 32;
        return h as u32;
    }
    hash_words(seed, key)
}

/// [`hash_key`] of keys of any length: the words of the key, the last one zero-padded.
fn hash_words(seed: u64, key: &[u8]) -> u32 {
    const K: u64 = WORD_MUL;
    let mut h = seed ^ (key.len() as u64).wrapping_mul(K);
    let mut chunks = key.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(K);
        h ^= h >> 29;
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(K);
    }
    h ^= h >> 32;
    h = h.wrapping_mul(FINAL_MUL);
    h ^= h >> 32;
    h as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fast_paths_hash_as_the_general_one() {
        let mut x = 0x1234_5678_9abc_def0u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..1000 {
            let seed = next();
            let k: Vec<u8> = (0..16).map(|_| next() as u8).collect();
            assert_eq!(
                hash_key(seed, &k),
                hash_words(seed, &k),
                "16-byte key {k:?}"
            );
        }
        // A known value: the format of maps already in shared memory.
        assert_eq!(hash_key(7, &[1; 16]), hash_words(7, &[1; 16]));
        assert_eq!(hash_key(7, &[1; 16]), 0xc656_a12c);
    }
}
