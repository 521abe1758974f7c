//! The hash the kernel's lookup tables use: fast, unseeded, and never iterated in its order.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A map that is only looked up: see `docs/adr/0002-fold-maps-and-hashing.md`.
pub(crate) type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// A fast, unseeded hash for the short ids the fold looks up (the multiply-rotate scheme of
/// rustc's FxHasher).
#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x517c_c1b7_2722_0a95;
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word)).wrapping_mul(K);
        }
        for &byte in chunks.remainder() {
            self.0 = (self.0.rotate_left(5) ^ u64::from(byte)).wrapping_mul(K);
        }
    }

    fn write_u8(&mut self, byte: u8) {
        self.write(&[byte]);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}
