//! CRC-32C (Castagnoli), the checksum of binary records: slicing-by-8 over tables built at
//! compile time, so no dependency and no `unsafe`.

const POLY: u32 = 0x82F6_3B78;

const TABLES: [[u32; 256]; 8] = {
    let mut tables = [[0u32; 256]; 8];
    let mut n = 0;
    while n < 256 {
        let mut crc = n as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
            bit += 1;
        }
        tables[0][n] = crc;
        n += 1;
    }
    let mut n = 0;
    while n < 256 {
        let mut t = 1;
        while t < 8 {
            let previous = tables[t - 1][n];
            tables[t][n] = (previous >> 8) ^ tables[0][(previous & 0xFF) as usize];
            t += 1;
        }
        n += 1;
    }
    tables
};

/// The CRC-32C of `bytes`.
pub(crate) fn crc32c(bytes: &[u8]) -> u32 {
    !update(!0u32, bytes)
}

/// The CRC-32C of the concatenation of `parts`, without concatenating them.
pub(crate) fn crc32c_of_parts(parts: &[&[u8]]) -> u32 {
    !parts.iter().fold(!0u32, |crc, part| update(crc, part))
}

/// The running (inverted) CRC state after `bytes`.
fn update(mut crc: u32, bytes: &[u8]) -> u32 {
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let low = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]) ^ crc;
        let high = u32::from_le_bytes([chunk[4], chunk[5], chunk[6], chunk[7]]);
        crc = TABLES[7][(low & 0xFF) as usize]
            ^ TABLES[6][((low >> 8) & 0xFF) as usize]
            ^ TABLES[5][((low >> 16) & 0xFF) as usize]
            ^ TABLES[4][(low >> 24) as usize]
            ^ TABLES[3][(high & 0xFF) as usize]
            ^ TABLES[2][((high >> 8) & 0xFF) as usize]
            ^ TABLES[1][((high >> 16) & 0xFF) as usize]
            ^ TABLES[0][(high >> 24) as usize];
    }
    for byte in chunks.remainder() {
        crc = (crc >> 8) ^ TABLES[0][((crc ^ u32::from(*byte)) & 0xFF) as usize];
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::{crc32c, crc32c_of_parts};

    #[test]
    fn parts_give_the_checksum_of_their_concatenation() {
        let data: Vec<u8> = (0..100u8).collect();
        for cut in [0, 1, 7, 8, 9, 50, 100] {
            let (a, b) = data.split_at(cut);
            assert_eq!(crc32c_of_parts(&[a, b]), crc32c(&data), "cut at {cut}");
        }
        assert_eq!(crc32c_of_parts(&[]), crc32c(b""));
    }

    #[test]
    fn matches_the_published_check_values() {
        // RFC 3720, B.4, and the standard check input.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xFFu8; 32]), 0x62A8_AB43);
        let ascending: Vec<u8> = (0..32).collect();
        assert_eq!(crc32c(&ascending), 0x46DD_794E);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn every_single_bit_flip_changes_it() {
        let data: Vec<u8> = (0..200u32).map(|i| (i * 7 + 3) as u8).collect();
        let sum = crc32c(&data);
        for byte in 0..data.len() {
            for bit in 0..8 {
                let mut flipped = data.clone();
                flipped[byte] ^= 1 << bit;
                assert_ne!(crc32c(&flipped), sum, "byte {byte} bit {bit}");
            }
        }
    }
}
