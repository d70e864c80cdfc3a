//! Stable fusion fingerprints, the key of every heuristic cache.
//!
//! A fingerprint is the SHA-256 of the fusion's name-free JSON, prefixed with
//! the schema version. It depends only on the structure (ops, attributes,
//! shapes, dtypes, wiring, outputs), not on tensor names, the process, the
//! platform, or the crate version as long as the JSON schema is the same.

use sha2::{Digest, Sha256};

use crate::fusion::{FUSION_SCHEMA_VERSION, Fusion};

impl Fusion {
    /// 32 hex digits (128 bits) identifying the fusion's structure.
    pub fn fingerprint(&self) -> String {
        let mut hasher = Sha256::new();
        hasher.update(format!("tilefuse-fusion/v{FUSION_SCHEMA_VERSION}\n"));
        hasher.update(self.structural_json());
        hasher.finalize()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}
