//! Client-side encryption of everything a remote holds, and the key records that open it.
//!
//! - A remote has one random **master key**: 32 bytes for XChaCha20-Poly1305 (an AEAD:
//!   `chacha20poly1305`, RustCrypto) and 32 bytes for HMAC-SHA-256 names.
//! - `keys/<16 hex>` on the remote holds it wrapped (restic's `keys/`): JSON with the KDF
//!   (argon2id, `argon2`), its parameters and salt, and the master key sealed under the key
//!   the KDF derives from the secret (a key file's bytes or a passphrase). Several key records
//!   may open one remote; a secret that opens none is "wrong key", never garbage.
//! - Every sealed thing is `nonce (24 random bytes) || ciphertext || tag (16)`, with
//!   associated data that says what it is (`blob:<id>`, `index`, `record:<id>`, `ref:<name>`),
//!   so the remote cannot pass one thing off as another.
//! - Names the remote shows for content (checkpoint records) are HMAC-SHA-256 of the id under
//!   the name key: they do not reveal the plaintext SHA-256. Packs and indexes are named by
//!   the SHA-256 of their *encrypted* bytes.
//!
//! A remote made with `--no-encryption` uses [`Keys::Plain`]: nothing sealed, names are ids.

use argon2::{Algorithm, Argon2, Params, Version};
use chacha20poly1305::aead::{Aead, AeadInPlace, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::error::{Error, Result};
use crate::id::ObjectId;

const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;
/// Bytes sealing adds.
pub const OVERHEAD: usize = NONCE_LEN + TAG_LEN;
/// Default argon2id cost: 64 MiB, 3 passes, 1 lane (OWASP's second recommended setting).
pub const KDF_MEMORY_KIB: u32 = 64 * 1024;
pub const KDF_PASSES: u32 = 3;

/// Fills `buf` from the OS's random source.
pub fn random(buf: &mut [u8]) -> Result<()> {
    getrandom::getrandom(buf)
        .map_err(|e| Error::io_op("reading random bytes", std::io::Error::other(e.to_string())))
}

/// A random hex name of `n` bytes.
pub fn random_hex(n: usize) -> Result<String> {
    let mut b = vec![0u8; n];
    random(&mut b)?;
    Ok(hex(&b))
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str, what: &str) -> Result<Vec<u8>> {
    if s.len() % 2 != 0 || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err(Error::Corrupt(format!("{what}: not hex")));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&s[i..i + 2], 16)
                .map_err(|_| Error::Corrupt(format!("{what}: not hex")))
        })
        .collect()
}

/// The keys of a remote.
#[derive(Clone)]
pub enum Keys {
    /// Unencrypted (`--no-encryption`).
    Plain,
    Sealed {
        cipher: Box<XChaCha20Poly1305>,
        name_key: [u8; 32],
    },
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Keys::Plain => "Keys::Plain",
            Keys::Sealed { .. } => "Keys::Sealed(..)",
        })
    }
}

/// A key record as stored under `keys/` (JSON).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KeyRecord {
    pub kdf: String,
    pub memory_kib: u32,
    pub passes: u32,
    pub lanes: u32,
    pub salt: String,
    /// The 64-byte master key sealed under the derived key (`nonce || ct || tag`, hex).
    pub wrapped: String,
    pub created_ns: i64,
}

fn derive(secret: &[u8], salt: &[u8], m: u32, t: u32, p: u32) -> Result<[u8; 32]> {
    let params = Params::new(m, t, p, Some(32))
        .map_err(|e| Error::Corrupt(format!("key record: bad argon2 parameters ({e})")))?;
    let mut out = [0u8; 32];
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
        .hash_password_into(secret, salt, &mut out)
        .map_err(|e| Error::Invalid(format!("deriving the remote key: {e}")))?;
    Ok(out)
}

fn seal_with(cipher: &XChaCha20Poly1305, aad: &[u8], plain: &[u8]) -> Result<Vec<u8>> {
    let mut nonce = [0u8; NONCE_LEN];
    random(&mut nonce)?;
    let ct = cipher
        .encrypt(XNonce::from_slice(&nonce), Payload { msg: plain, aad })
        .map_err(|_| Error::Invalid("encryption failed".into()))?;
    let mut out = Vec::with_capacity(NONCE_LEN + ct.len());
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&ct);
    Ok(out)
}

fn open_with(cipher: &XChaCha20Poly1305, aad: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
    if sealed.len() < OVERHEAD {
        return None;
    }
    let (nonce, ct) = sealed.split_at(NONCE_LEN);
    cipher
        .decrypt(XNonce::from_slice(nonce), Payload { msg: ct, aad })
        .ok()
}

/// Opens `sealed` where it lies (no copy of the ciphertext); the plaintext's range in it.
fn open_in_place_with(
    cipher: &XChaCha20Poly1305,
    aad: &[u8],
    sealed: &mut [u8],
) -> Option<std::ops::Range<usize>> {
    if sealed.len() < OVERHEAD {
        return None;
    }
    let (nonce, rest) = sealed.split_at_mut(NONCE_LEN);
    let (ct, tag) = rest.split_at_mut(rest.len() - TAG_LEN);
    cipher
        .decrypt_in_place_detached(
            XNonce::from_slice(nonce),
            aad,
            ct,
            chacha20poly1305::Tag::from_slice(tag),
        )
        .ok()?;
    Some(NONCE_LEN..sealed.len() - TAG_LEN)
}

impl Keys {
    /// A new random master key and a key record that opens it with `secret`
    /// (argon2id with `memory_kib` KiB and `passes`).
    ///
    /// # Errors
    /// The OS random source failing.
    pub fn create(secret: &[u8], memory_kib: u32, passes: u32) -> Result<(Keys, KeyRecord)> {
        let mut master = [0u8; 64];
        random(&mut master)?;
        let mut salt = [0u8; 16];
        random(&mut salt)?;
        let kek = derive(secret, &salt, memory_kib, passes, 1)?;
        let wrap = XChaCha20Poly1305::new((&kek).into());
        let wrapped = seal_with(&wrap, b"ckptfs-master-key", &master)?;
        let rec = KeyRecord {
            kdf: "argon2id".into(),
            memory_kib,
            passes,
            lanes: 1,
            salt: hex(&salt),
            wrapped: hex(&wrapped),
            created_ns: crate::text::time::now_ns(),
        };
        Ok((Keys::from_master(&master), rec))
    }

    fn from_master(master: &[u8; 64]) -> Keys {
        let mut enc = [0u8; 32];
        enc.copy_from_slice(&master[..32]);
        let mut name_key = [0u8; 32];
        name_key.copy_from_slice(&master[32..]);
        Keys::Sealed {
            cipher: Box::new(XChaCha20Poly1305::new((&enc).into())),
            name_key,
        }
    }

    /// Opens a key record with `secret`: `Ok(None)` when the secret is not the one it was made
    /// with (its tag does not verify).
    ///
    /// # Errors
    /// `Corrupt` for a record that does not parse or has absurd KDF parameters.
    pub fn open_record(rec: &KeyRecord, secret: &[u8]) -> Result<Option<Keys>> {
        if rec.kdf != "argon2id" || rec.memory_kib > 4 << 20 || rec.passes > 100 || rec.lanes > 64 {
            return Err(Error::Corrupt(format!(
                "key record: unsupported KDF {} (m={} KiB, t={}, p={})",
                rec.kdf, rec.memory_kib, rec.passes, rec.lanes
            )));
        }
        let salt = unhex(&rec.salt, "key record salt")?;
        let wrapped = unhex(&rec.wrapped, "key record")?;
        let kek = derive(secret, &salt, rec.memory_kib, rec.passes, rec.lanes)?;
        let wrap = XChaCha20Poly1305::new((&kek).into());
        let Some(master) = open_with(&wrap, b"ckptfs-master-key", &wrapped) else {
            return Ok(None);
        };
        let master: [u8; 64] = master
            .try_into()
            .map_err(|_| Error::Corrupt("key record: master key is not 64 bytes".into()))?;
        Ok(Some(Keys::from_master(&master)))
    }

    pub fn encrypted(&self) -> bool {
        matches!(self, Keys::Sealed { .. })
    }

    /// Seals `plain` as `what` (its associated data).
    ///
    /// # Errors
    /// The OS random source failing.
    pub fn seal(&self, what: &[u8], plain: &[u8]) -> Result<Vec<u8>> {
        match self {
            Keys::Plain => Ok(plain.to_vec()),
            Keys::Sealed { cipher, .. } => seal_with(cipher, what, plain),
        }
    }

    /// Opens what [`Keys::seal`] made of `what`.
    ///
    /// # Errors
    /// `Corrupt` naming `describe` when the tag does not verify (altered on the remote, or
    /// sealed as something else).
    pub fn open(&self, what: &[u8], sealed: &[u8], describe: &str) -> Result<Vec<u8>> {
        match self {
            Keys::Plain => Ok(sealed.to_vec()),
            Keys::Sealed { cipher, .. } => open_with(cipher, what, sealed).ok_or_else(|| {
                Error::Corrupt(format!(
                    "{describe} fails authentication (altered on the remote?)"
                ))
            }),
        }
    }

    /// As [`Keys::open`], decrypting `sealed` where it lies (a lazy read's ranged GET holds
    /// several blobs; none is copied before it is opened); the plaintext's range in `sealed`.
    ///
    /// # Errors
    /// As [`Keys::open`].
    pub fn open_in_place(
        &self,
        what: &[u8],
        sealed: &mut [u8],
        describe: &str,
    ) -> Result<std::ops::Range<usize>> {
        match self {
            Keys::Plain => Ok(0..sealed.len()),
            Keys::Sealed { cipher, .. } => {
                open_in_place_with(cipher, what, sealed).ok_or_else(|| {
                    Error::Corrupt(format!(
                        "{describe} fails authentication (altered on the remote?)"
                    ))
                })
            }
        }
    }

    /// The remote's name for content `id`: HMAC-SHA-256 under the name key (the id itself
    /// when unencrypted).
    pub fn name_of(&self, id: &ObjectId) -> String {
        match self {
            Keys::Plain => id.to_hex(),
            Keys::Sealed { name_key, .. } => {
                let mut m = <Hmac<Sha256> as Mac>::new_from_slice(name_key)
                    .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
                m.update(&id.0);
                hex(&m.finalize().into_bytes())
            }
        }
    }
}

/// The secret that opens a remote: the bytes of a key file (`--key-file`, trailing newline
/// dropped), else `CKPTFS_PASSPHRASE`, else `CKPTFS_PASSPHRASE_FILE`'s bytes.
///
/// # Errors
/// `Usage` when none is given; errors reading the file.
pub fn secret_from(key_file: Option<&std::path::Path>) -> Result<Vec<u8>> {
    let read = |p: &std::path::Path| -> Result<Vec<u8>> {
        let mut d = crate::store::object::read_regular_file(p, 1 << 16, true, "key file")?
            .ok_or_else(|| Error::NotFound(format!("key file {}", p.display())))?;
        while d.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            d.pop();
        }
        if d.is_empty() {
            return Err(Error::Invalid(format!("key file {} is empty", p.display())));
        }
        Ok(d)
    };
    if let Some(p) = key_file {
        return read(p);
    }
    if let Some(p) = std::env::var_os("CKPTFS_PASSPHRASE") {
        if !p.is_empty() {
            return Ok(p.into_encoded_bytes());
        }
    }
    if let Some(p) = std::env::var_os("CKPTFS_PASSPHRASE_FILE") {
        return read(std::path::Path::new(&p));
    }
    Err(Error::Usage(
        "an encrypted remote needs its key: --key-file FILE, CKPTFS_PASSPHRASE or \
         CKPTFS_PASSPHRASE_FILE (or --no-encryption when adding a remote, on purpose)"
            .into(),
    ))
}

#[cfg(test)]
mod tests {
    //! The edges the pack tests do not reach (found by `scripts/mutants.sh crypto`).
    use super::*;

    fn keys() -> Keys {
        Keys::create(b"secret", 256, 1).expect("keys").0
    }

    #[test]
    fn the_default_kdf_cost_is_owasps() {
        assert_eq!((KDF_MEMORY_KIB, KDF_PASSES), (64 * 1024, 3));
        assert_eq!(
            OVERHEAD, 40,
            "24-byte XChaCha20 nonce and 16-byte Poly1305 tag"
        );
    }

    #[test]
    fn random_names_are_hex_of_their_length_and_differ() {
        let (a, b) = (random_hex(8).unwrap(), random_hex(8).unwrap());
        assert_eq!(a.len(), 16);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()), "{a}");
        assert_ne!(a, b);
        assert_eq!(unhex(&a, "x").unwrap().len(), 8);
    }

    #[test]
    fn unhex_refuses_odd_lengths_and_non_hex() {
        for bad in ["abc", "zz", "0g", "a"] {
            assert!(unhex(bad, "x").is_err(), "{bad}");
        }
        assert_eq!(unhex("00ff", "x").unwrap(), vec![0, 255]);
    }

    #[test]
    fn keys_never_show_their_bytes() {
        let shown = format!("{:?}", keys());
        assert_eq!(shown, "Keys::Sealed(..)");
        assert_eq!(format!("{:?}", Keys::Plain), "Keys::Plain");
        assert!(keys().encrypted() && !Keys::Plain.encrypted());
    }

    /// An empty plaintext seals to exactly OVERHEAD bytes and opens; anything shorter is an
    /// error, never a panic, in both ways of opening.
    #[test]
    fn sealed_lengths_at_and_below_the_overhead() {
        let k = keys();
        let empty = k.seal(b"w", b"").unwrap();
        assert_eq!(empty.len(), OVERHEAD);
        assert_eq!(k.open(b"w", &empty, "e").unwrap(), b"");
        let mut copy = empty.clone();
        let r = k.open_in_place(b"w", &mut copy, "e").unwrap();
        assert!(r.is_empty());
        for n in [0, 5, NONCE_LEN, OVERHEAD - 1] {
            let mut short = empty[..n].to_vec();
            assert!(k.open(b"w", &short, "s").is_err(), "{n}");
            assert!(k.open_in_place(b"w", &mut short, "s").is_err(), "{n}");
        }
        // In place, the plaintext's range is the sealed bytes less nonce and tag.
        let mut sealed = k.seal(b"w", b"hello").unwrap();
        let r = k.open_in_place(b"w", &mut sealed, "h").unwrap();
        assert_eq!(r, NONCE_LEN..NONCE_LEN + 5);
        assert_eq!(&sealed[r], b"hello");
    }

    #[test]
    fn names_are_keyed_hmacs_distinct_per_object() {
        let (k, other) = (keys(), keys());
        let (a, b) = (ObjectId::of(b"a"), ObjectId::of(b"b"));
        let na = k.name_of(&a);
        assert_eq!(na.len(), 64);
        assert!(na.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(na, k.name_of(&b));
        assert_ne!(na, other.name_of(&a), "another master key, other names");
        assert_eq!(Keys::Plain.name_of(&a), a.to_hex());
    }

    /// A key file's bytes are the secret, line ends at its end dropped, inside kept; an empty
    /// or oversized one is refused.
    #[test]
    fn a_key_file_is_its_bytes_less_the_final_line_end() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("k");
        for (content, want) in [
            (&b"pw\n"[..], &b"pw"[..]),
            (b"pw\r\n\n", b"pw"),
            (b"p\nw\n", b"p\nw"),
            (b"\x00\xff", b"\x00\xff"),
        ] {
            std::fs::write(&f, content).unwrap();
            assert_eq!(secret_from(Some(&f)).unwrap(), want);
        }
        for bad in [&b"\n\r\n"[..], &[b'x'; (1 << 16) + 1][..]] {
            std::fs::write(&f, bad).unwrap();
            assert!(secret_from(Some(&f)).is_err(), "{} bytes", bad.len());
        }
        assert!(secret_from(Some(&t.path().join("none"))).is_err());
    }

    /// Each bound of a key record is checked on its own, before any key is derived (a record
    /// from the remote is untrusted: a cost past them would take the machine's memory).
    #[test]
    fn each_kdf_bound_of_a_key_record_is_refused_alone() {
        let (_, rec) = Keys::create(b"right", 256, 1).unwrap();
        type Edit = fn(&mut KeyRecord);
        let edits: [(&str, Edit); 4] = [
            ("kdf", |r| r.kdf = "scrypt".into()),
            ("memory", |r| r.memory_kib = (4 << 20) + 1),
            ("passes", |r| r.passes = 101),
            ("lanes", |r| r.lanes = 65),
        ];
        for (what, edit) in edits {
            let mut r = rec.clone();
            edit(&mut r);
            let e = Keys::open_record(&r, b"right").map(|_| ()).unwrap_err();
            assert!(e.to_string().contains("unsupported KDF"), "{what}: {e}");
        }
        assert!(Keys::open_record(&rec, b"right").unwrap().is_some());
        // At the bounds themselves: derived (with other parameters the key is another one,
        // so the record does not open), not refused.
        let at_bounds: [(&str, Edit); 2] = [
            ("passes", |r| r.passes = 100),
            ("lanes", |r| {
                r.lanes = 64;
                r.memory_kib = 8 * 64;
            }),
        ];
        for (what, edit) in at_bounds {
            let mut r = rec.clone();
            edit(&mut r);
            assert!(Keys::open_record(&r, b"right").unwrap().is_none(), "{what}");
        }
    }
}
