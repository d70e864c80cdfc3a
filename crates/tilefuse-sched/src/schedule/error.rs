//! The schedule error: which primitive, which block or loop, what failed.

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("no block named {name:?}; blocks: {known}")]
    NoBlock { name: String, known: String },
    #[error("block {0} is no longer in the schedule (it was inlined)")]
    StaleBlock(String),
    #[error("loop {0} is no longer in the schedule (it was split, fused or removed)")]
    StaleLoop(String),
    /// A primitive's precondition does not hold.
    #[error("{primitive}: {message}")]
    Precondition {
        primitive: &'static str,
        message: String,
    },
    /// A trace that does not parse or does not fit the fusion.
    #[error("invalid trace: {0}")]
    Trace(String),
}

impl ScheduleError {
    pub(crate) fn pre(primitive: &'static str, message: impl Into<String>) -> Self {
        ScheduleError::Precondition {
            primitive,
            message: message.into(),
        }
    }
}
