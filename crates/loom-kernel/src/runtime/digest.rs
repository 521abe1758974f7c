//! Input digests: a stable fingerprint of a command's input, compared on replay.

use crate::payload::Payload;

/// The digest recorded with a step whose input is `input` (canonical JSON, as the context
/// makes it: keys in order, compact).
pub fn input_digest(input: &Payload) -> String {
    digest_text(input.as_json())
}

/// FNV-1a (64 bit) of `parts`, one after another: a hash fixed for good, for anything
/// recorded or derived from what is recorded (std's hashers are seeded and may change between
/// releases). Not a security measure.
pub fn stable_hash(parts: &[&[u8]]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    parts
        .iter()
        .flat_map(|part| part.iter())
        .fold(OFFSET, |hash, byte| {
            (hash ^ u64::from(*byte)).wrapping_mul(PRIME)
        })
}

/// [`stable_hash`] of the canonical JSON text, as 16 hex digits: it tells a changed input from
/// the recorded one.
pub(crate) fn digest_text(canonical_json: &str) -> String {
    let hash = stable_hash(&[canonical_json.as_bytes()]);
    // By hand rather than `format!("{hash:016x}")`: every replayed step computes a digest,
    // and the formatting machinery cost more than the hash.
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut digest = String::with_capacity(16);
    for shift in (0..16).rev() {
        digest.push(char::from(HEX[((hash >> (shift * 4)) & 0xf) as usize]));
    }
    digest
}

#[cfg(test)]
mod tests {
    #[test]
    fn stable_and_sensitive() {
        assert_eq!(super::digest_text(""), "cbf29ce484222325");
        assert_ne!(
            super::digest_text("{\"a\":1}"),
            super::digest_text("{\"a\":2}")
        );
        for text in ["", "1", "{\"a\":[1,2.5]}", "\"\u{e9}\""] {
            let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
                (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
            });
            assert_eq!(super::digest_text(text), format!("{hash:016x}"));
        }
    }
}
