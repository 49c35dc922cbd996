//! `ObjectId`: the SHA-256 of an object's uncompressed bytes, shown as 64 lowercase hex digits.

use std::fmt;

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// Length of an id in bytes (SHA-256).
pub const ID_LEN: usize = 32;

/// A content address. Ordering is byte order, which is also hex order.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectId(pub [u8; ID_LEN]);

impl ObjectId {
    /// Hashes `data`.
    pub fn of(data: &[u8]) -> ObjectId {
        ObjectId(Sha256::digest(data).into())
    }

    /// Lowercase hex form.
    pub fn to_hex(&self) -> String {
        let mut s = String::with_capacity(ID_LEN * 2);
        for b in self.0 {
            s.push(char::from(b"0123456789abcdef"[(b >> 4) as usize]));
            s.push(char::from(b"0123456789abcdef"[(b & 15) as usize]));
        }
        s
    }

    /// First 12 hex digits, for human output.
    pub fn short(&self) -> String {
        self.to_hex()[..12].to_string()
    }

    /// Parses exactly 64 hex digits.
    ///
    /// # Errors
    /// `Invalid` naming the text when it is not 64 hex digits.
    pub fn parse(hex: &str) -> Result<ObjectId> {
        let bytes = hex.as_bytes();
        if bytes.len() != ID_LEN * 2 {
            return Err(Error::Invalid(format!(
                "not a 64-digit hex object id: {hex:?}"
            )));
        }
        let mut out = [0u8; ID_LEN];
        for (i, pair) in bytes.chunks(2).enumerate() {
            let hi = hex_val(pair[0]);
            let lo = hex_val(pair[1]);
            match (hi, lo) {
                (Some(h), Some(l)) => out[i] = (h << 4) | l,
                _ => return Err(Error::Invalid(format!("not a hex object id: {hex:?}"))),
            }
        }
        Ok(ObjectId(out))
    }
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// True when `s` is a non-empty string of hex digits (a possible id prefix).
pub fn is_hex_prefix(s: &str) -> bool {
    !s.is_empty() && s.len() <= ID_LEN * 2 && s.bytes().all(|c| hex_val(c).is_some())
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObjectId({})", self.short())
    }
}

impl serde::Serialize for ObjectId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> serde::Deserialize<'de> for ObjectId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        ObjectId::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let id = ObjectId::of(b"hello");
        assert_eq!(
            id.to_hex(),
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        assert_eq!(ObjectId::parse(&id.to_hex()).unwrap(), id);
        assert!(ObjectId::parse("xyz").is_err());
        assert!(is_hex_prefix("2cf2"));
        assert!(!is_hex_prefix("2cg2"));
    }
}
