//! The params format version.

/// Current version of the params format. Bump it when a field is added
/// (with `#[serde(default)]`, so older JSON still loads) or its meaning
/// changes; values from a newer version are rejected.
pub const PARAMS_VERSION: u32 = 1;

pub(crate) fn current_version() -> u32 {
    PARAMS_VERSION
}
