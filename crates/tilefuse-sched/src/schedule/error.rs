//! The schedule error: which primitive, which block or loop, what failed.

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("no block named {name:?}; blocks: {known}")]
    NoBlock { name: String, known: String },
    #[error("block {0} is no longer in the schedule (it was inlined)")]
    StaleBlock(String),
    #[error("loop {0} is no longer in the schedule (it was split, fused or removed)")]
    StaleLoop(String),
    /// A primitive's precondition does not hold; `blocks` and `loops` name
    /// the blocks and loops at fault (TVM's `ScheduleError` carries them
    /// the same way), so callers need not parse `message`.
    #[error("{primitive}: {message}")]
    Precondition {
        primitive: &'static str,
        message: String,
        blocks: Vec<String>,
        loops: Vec<String>,
    },
    /// A trace that does not parse or does not fit the fusion.
    #[error("invalid trace: {0}")]
    Trace(String),
}

impl ScheduleError {
    /// A failed precondition of `primitive`; name what is at fault with
    /// [`Self::blocks`] and [`Self::loops`].
    pub fn pre(primitive: &'static str, message: impl Into<String>) -> Self {
        ScheduleError::Precondition {
            primitive,
            message: message.into(),
            blocks: Vec::new(),
            loops: Vec::new(),
        }
    }

    /// Adds the blocks at fault to a precondition error.
    pub fn blocks<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        if let ScheduleError::Precondition { blocks, .. } = &mut self {
            blocks.extend(names.into_iter().map(Into::into));
        }
        self
    }

    /// Adds the loops at fault to a precondition error.
    pub fn loops<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        if let ScheduleError::Precondition { loops, .. } = &mut self {
            loops.extend(names.into_iter().map(Into::into));
        }
        self
    }

    /// The blocks this error names: those at fault in a failed
    /// precondition, or the block that is missing.
    pub fn blocks_at_fault(&self) -> &[String] {
        match self {
            ScheduleError::Precondition { blocks, .. } => blocks,
            ScheduleError::NoBlock { name, .. } | ScheduleError::StaleBlock(name) => {
                std::slice::from_ref(name)
            }
            _ => &[],
        }
    }

    /// The loops this error names: those at fault in a failed
    /// precondition, or the loop that is gone.
    pub fn loops_at_fault(&self) -> &[String] {
        match self {
            ScheduleError::Precondition { loops, .. } => loops,
            ScheduleError::StaleLoop(name) => std::slice::from_ref(name),
            _ => &[],
        }
    }
}
