//! Content hashes: a benchmark version, a component, a prompt or a request
//! is identified by the SHA-256 of its parts.

use sha2::{Digest, Sha256};

pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

pub fn sha256_hex(parts: &[&[u8]]) -> String {
    hex(&sha256(parts))
}

/// The digest [`sha256_hex`] spells out: each part prefixed by its length.
pub fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    h.finalize().into()
}

/// [`sha256_hex`] of parts each given in pieces (a part is its pieces
/// joined), without joining them: a request body and its cache key's
/// tail hash as the one body they spell.
pub fn sha256_hex_pieces(parts: &[&[&[u8]]]) -> String {
    let mut h = Sha256::new();
    for pieces in parts {
        let len: usize = pieces.iter().map(|p| p.len()).sum();
        h.update((len as u64).to_le_bytes());
        for p in pieces.iter() {
            h.update(p);
        }
    }
    let digest: [u8; 32] = h.finalize().into();
    hex(&digest)
}

#[cfg(test)]
mod tests {
    use sha2::Digest;

    use super::*;
    #[test]
    fn pieces_hash_as_the_part_they_spell() {
        assert_eq!(
            sha256_hex_pieces(&[&[b"ab", b"c"], &[b"", b"de"]]),
            sha256_hex(&[b"abc", b"de"])
        );
    }

    #[test]
    fn hex_spells_bytes_in_lower_case() {
        assert_eq!(hex(&[0x00, 0x0f, 0xa5, 0xff, 0x10]), "000fa5ff10");
        assert_eq!(hex(&[]), "");
        // The length-prefixed digest, as stored in every database so far.
        assert_eq!(
            sha256_hex(&[b"abc"]),
            hex(&Sha256::digest([&3u64.to_le_bytes()[..], b"abc"].concat()))
        );
        assert_eq!(sha256_hex(&[b"a", b"b"]), hex(&sha256(&[b"a", b"b"])));
    }
}
