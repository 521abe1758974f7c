//! The hash the kernel's lookup tables use: fast, unseeded, and never iterated in its order.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// A map that is only looked up: see `docs/decisions/LD-002-fold-maps-and-hashing.md`.
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

/// A table split in shards by id, each under its own lock: tasks working on different ids
/// seldom wait for one another. The shard is a function of the id alone, and nothing is built
/// by going through the shards, so the hashing reaches no fold, id or replayed path. Nothing
/// holds two shards at once.
pub(crate) struct Sharded<T> {
    shards: Box<[Mutex<T>]>,
}

impl<T: Default> Default for Sharded<T> {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }
}

impl<T> Sharded<T> {
    /// The shard that keeps `id`'s entries, whatever a panicking holder left (each change to a
    /// shard is whole before its lock is released).
    pub(crate) fn lock(&self, id: &str) -> MutexGuard<'_, T> {
        self.shards[shard_of(id, self.shards.len())]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T> std::fmt::Debug for Sharded<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sharded")
            .field("shards", &self.shards.len())
            .finish()
    }
}

/// Enough that two worker threads seldom meet on one; each is an empty map until used.
const SHARDS: usize = 32;

/// Which of `shards` (more than 0) keeps `id`.
fn shard_of(id: &str, shards: usize) -> usize {
    let mut hasher = IdHasher::default();
    hasher.write(id.as_bytes());
    // The map hash ends on a multiply, which leaves ids that differ in their last bytes
    // bunched in a few shards: mixed again (MurmurHash3's finalizer) before the modulo.
    let mut mixed = hasher.finish();
    mixed ^= mixed >> 33;
    mixed = mixed.wrapping_mul(0xff51_afd7_ed55_8ccd);
    mixed ^= mixed >> 33;
    mixed = mixed.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    mixed ^= mixed >> 33;
    (mixed % shards.max(1) as u64) as usize
}

/// An id as a map key. Most ids are short (`name#n`) and live inline, so keying a map by them
/// costs no allocation; longer ones go to the heap. Hashes and compares as its `str`, so maps
/// are looked up with a plain `&str`.
#[derive(Clone)]
pub(crate) enum IdKey {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<str>),
}

const INLINE: usize = 22;

impl IdKey {
    pub(crate) fn new(id: &str) -> Self {
        match u8::try_from(id.len()) {
            Ok(len) if id.len() <= INLINE => {
                let mut bytes = [0; INLINE];
                bytes[..id.len()].copy_from_slice(id.as_bytes());
                Self::Inline { len, bytes }
            }
            _ => Self::Heap(id.into()),
        }
    }

    /// The id's bytes: hashing and comparing keys need not check them as UTF-8 again.
    fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Self::Heap(id) => id.as_bytes(),
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        match self {
            // Made from a whole `&str`, so the bytes are always valid UTF-8.
            Self::Inline { len, bytes } => {
                std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default()
            }
            Self::Heap(id) => id,
        }
    }
}

impl std::borrow::Borrow<str> for IdKey {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl std::hash::Hash for IdKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // What `str`'s `Hash` writes (its bytes, then 0xff: `Hasher::write_str`'s default, which
        // a hasher on stable Rust cannot override), so that maps are looked up with a `&str`.
        // From the bytes, because `as_str` checks them as UTF-8 on every call.
        state.write(self.as_bytes());
        state.write_u8(0xff);
    }
}

impl PartialEq for IdKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for IdKey {}

impl std::fmt::Debug for IdKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_spread_over_the_shards() {
        for prefix in ["conc-", "an-execution-id-of-some-length-"] {
            let mut used = [0u32; 32];
            for n in 0..3200 {
                used[shard_of(&format!("{prefix}{n}"), 32)] += 1;
            }
            assert!(
                used.iter().all(|&count| (50..=150).contains(&count)),
                "{prefix}: {used:?}"
            );
        }
        assert_eq!(shard_of("anything", 0), 0, "no shards is one");
    }

    #[test]
    fn short_and_long_ids_key_the_same_as_their_str() {
        let mut map: IdMap<IdKey, u32> = IdMap::default();
        let long = "x".repeat(40);
        for (n, id) in ["", "a#1", "exactly-twenty-two-by", "é#12", &long]
            .iter()
            .enumerate()
        {
            map.insert(IdKey::new(id), n as u32);
        }
        assert_eq!(map.get("a#1"), Some(&1));
        assert_eq!(map.get("exactly-twenty-two-by"), Some(&2));
        assert_eq!(map.get("é#12"), Some(&3));
        assert_eq!(map.get(long.as_str()), Some(&4));
        assert_eq!(map.get(""), Some(&0));
        assert_eq!(map.get("a#2"), None);
        assert!(matches!(IdKey::new(&long), IdKey::Heap(_)));
    }

    #[test]
    fn an_id_key_hashes_as_its_str() {
        use std::hash::{BuildHasher, BuildHasherDefault};
        let hasher = BuildHasherDefault::<IdHasher>::default();
        let long = "y".repeat(30);
        for id in ["", "a#1", "é#12", "exactly-twenty-two-by", &long] {
            assert_eq!(hasher.hash_one(IdKey::new(id)), hasher.hash_one(id));
            assert_eq!(IdKey::new(id), IdKey::new(id));
        }
        assert_ne!(IdKey::new("a#1"), IdKey::new("a#2"));
    }
}
