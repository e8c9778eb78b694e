//! SHA-256 for the content hashes of file operations: the launcher hashes what it reads and
//! writes, dshd hashes what it expects, and both must agree, so both use this module (RustCrypto's
//! `sha2`, streaming: a file is hashed without being held in memory).

use sha2::Digest as _;

/// A SHA-256 digest.
pub type Digest = [u8; 32];

/// A running SHA-256.
#[derive(Debug, Clone, Default)]
pub struct Sha256(sha2::Sha256);

impl Sha256 {
    /// The hash of no bytes yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The digest of `bytes`.
    pub fn digest(bytes: &[u8]) -> Digest {
        sha2::Sha256::digest(bytes).into()
    }

    /// Adds `bytes`.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The digest of everything added.
    pub fn finish(self) -> Digest {
        self.0.finalize().into()
    }
}

/// Lower-case hexadecimal, as `sha256sum` prints it.
pub fn hex(digest: &Digest) -> String {
    use std::fmt::Write as _;
    digest.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The FIPS 180-4 examples, the longer one streamed in pieces that straddle its blocks.
    #[test]
    fn known_answers() {
        assert_eq!(
            hex(&Sha256::digest(b"")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            hex(&Sha256::digest(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let mut h = Sha256::new();
        for chunk in b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".chunks(7) {
            h.update(chunk);
        }
        assert_eq!(
            hex(&h.finish()),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
    }
}
