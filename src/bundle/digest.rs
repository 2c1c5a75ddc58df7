//! The bundle's one digest: SHA-256 as lowercase hex, what `bundle.sha256` pins and the install
//! manifest records.

use sha2::{Digest, Sha256};

pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}
