//! Stable fusion fingerprints, the key of every heuristic cache.
//!
//! A fingerprint is the SHA-256 of the fusion's name-free JSON, prefixed with
//! the schema version. It depends only on the structure (ops, attributes,
//! shapes, dtypes, wiring, outputs), not on tensor names, the process, the
//! platform, or the crate version as long as the JSON schema is the same.

use sha2::{Digest, Sha256};

use crate::fusion::{FUSION_SCHEMA_VERSION, Fusion};
use crate::op::Op;

impl Fusion {
    /// 32 hex digits (128 bits) identifying the fusion's structure.
    pub fn fingerprint(&self) -> String {
        digest("fusion", &self.structural_json(|_| {}))
    }

    /// 32 hex digits identifying the fusion's structure with its extents
    /// left out: the fusions of one family differ only in how large their
    /// dimensions are (a softmax of 1024² and one of 4096² x 128), so a
    /// winner tuned for one is a good first guess for another. Ranks stay,
    /// and so do extents 0 and 1: they change broadcasting and emptiness.
    pub fn family(&self) -> String {
        let sizeless = self.structural_json(|op| {
            if let Op::Input { shape, .. } | Op::Broadcast { shape } | Op::Reshape { shape } = op {
                shape.iter_mut().for_each(|d| *d = (*d).min(2));
            }
        });
        digest("family", &sizeless)
    }
}

fn digest(what: &str, json: &str) -> String {
    let mut hex = sha256_hex(&format!("tilefuse-{what}/v{FUSION_SCHEMA_VERSION}\n{json}"));
    hex.truncate(32);
    hex
}

/// The SHA-256 of `text` in lowercase hex (64 digits), the digest every
/// key in tilefuse is cut from.
pub fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
