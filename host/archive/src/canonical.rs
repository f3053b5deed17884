//! RFC 8785 (JCS) canonical JSON and SHA-256 digests. Every digest in the archive uses these.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The RFC 8785 canonical bytes of `value`: object keys sorted by UTF-16 code units, no
/// insignificant whitespace, ECMAScript number formatting.
///
/// A `serde_json::Value` cannot hold a non-finite number, so canonicalization cannot fail on
/// one; should the implementation ever report an error anyway, the result is the empty vector,
/// whose digest matches nothing that was ever signed (never a panic).
pub fn canonical_bytes(value: &Value) -> Vec<u8> {
    serde_json_canonicalizer::to_vec(value).unwrap_or_default()
}

/// Lower-case hex of the SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lower-case hex of the SHA-256 of the canonical bytes of `value`.
pub fn canonical_sha256(value: &Value) -> String {
    sha256_hex(&canonical_bytes(value))
}

/// Lower-case hex encoding.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 0x0f) as usize] as char);
    }
    s
}

/// Decode lower- or upper-case hex of exactly `N` bytes.
pub fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    // 0..=15 for a hex digit, 0xff otherwise.
    const NIB: [u8; 256] = {
        let mut t = [0xffu8; 256];
        let mut c = 0;
        while c < 256 {
            t[c] = match c as u8 {
                b'0'..=b'9' => c as u8 - b'0',
                b'a'..=b'f' => c as u8 - b'a' + 10,
                b'A'..=b'F' => c as u8 - b'A' + 10,
                _ => 0xff,
            };
            c += 1;
        }
        t
    };
    let b = s.as_bytes();
    if b.len() != N * 2 {
        return None;
    }
    let mut out = [0u8; N];
    let mut bad = 0u8;
    for (o, pair) in out.iter_mut().zip(b.chunks_exact(2)) {
        let (hi, lo) = (NIB[pair[0] as usize], NIB[pair[1] as usize]);
        bad |= hi | lo;
        *o = (hi << 4) | (lo & 0x0f);
    }
    (bad & 0xf0 == 0).then_some(out)
}

/// True if `s` is exactly 64 lower-case hex digits (a SHA-256 as this crate writes it).
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_orders_keys_and_formats_numbers() {
        let v = json!({"b": 1.0, "a": [1e21, 0.1, -0.0], "é": "x", "Z": null});
        assert_eq!(
            String::from_utf8(canonical_bytes(&v)).unwrap(),
            r#"{"Z":null,"a":[1e+21,0.1,0],"b":1,"é":"x"}"#
        );
    }

    #[test]
    fn hex_round_trip() {
        let h = sha256_hex(b"abc");
        assert_eq!(
            h,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(hex(&unhex::<32>(&h).unwrap()), h);
        assert!(unhex::<32>("zz").is_none());
        assert!(unhex::<1>("g0").is_none());
        assert!(is_sha256_hex(&h));
        assert!(!is_sha256_hex(&h.to_uppercase()));
    }
}
