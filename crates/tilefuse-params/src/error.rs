//! The params error: a field path and what is wrong there.

use std::fmt;

/// A params value that cannot be used. `path` is the dotted field path
/// (`tile_sizes.cta_tile.m`, `launch.workgroup_size[0]`), empty for the
/// value as a whole.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ParamsError {
    pub path: String,
    pub message: String,
}

impl ParamsError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        ParamsError {
            path: path.into(),
            message: message.into(),
        }
    }

    /// The same error seen from a parent struct: `field` is prefixed to the path.
    pub fn within(mut self, field: &str) -> Self {
        self.path = match self.path.as_str() {
            "" => field.to_owned(),
            p if p.starts_with('[') => format!("{field}{p}"),
            p => format!("{field}.{p}"),
        };
        self
    }
}

impl fmt::Display for ParamsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}
