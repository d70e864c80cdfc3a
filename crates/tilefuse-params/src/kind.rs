//! `SchedulerKind`: which automatic scheduler, typed. Strings appear only
//! at the serde and Python edges (`"pointwise"`, ...).

use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// An automatic scheduler, in the order `pick` tries them.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum SchedulerKind {
    Pointwise,
    Reduction,
    Matmul,
}

impl SchedulerKind {
    /// Every kind, in the order `pick` tries them.
    pub const ALL: [SchedulerKind; 3] = [
        SchedulerKind::Pointwise,
        SchedulerKind::Reduction,
        SchedulerKind::Matmul,
    ];

    /// The params' `"scheduler"` tag.
    pub const fn as_str(self) -> &'static str {
        match self {
            SchedulerKind::Pointwise => "pointwise",
            SchedulerKind::Reduction => "reduction",
            SchedulerKind::Matmul => "matmul",
        }
    }
}

impl fmt::Display for SchedulerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SchedulerKind {
    type Err = String;

    /// A tag, or the message naming the tags there are.
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                let known: Vec<&str> = Self::ALL.iter().map(|k| k.as_str()).collect();
                format!("no scheduler {s:?}; expected one of {}", known.join(", "))
            })
    }
}
