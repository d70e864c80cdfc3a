//! Runtime errors.

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RuntimeError {
    /// A schedule that cannot become a kernel (see the message).
    #[error(transparent)]
    Schedule(#[from] tilefuse_sched::ScheduleError),
    /// A schedule the device's lowering cannot take (the pass and why).
    #[error(transparent)]
    Lower(#[from] tilefuse_sched::LowerError),
    /// Arguments that do not match the kernel's inputs.
    #[error("{0}")]
    Argument(String),
    /// A kernel that exceeds a device limit (named in the message).
    #[error("{0}")]
    Limit(String),
    /// A device setting (an environment variable) that is not valid.
    #[error("{0}")]
    Config(String),
    /// Memory for a kernel's buffers could not be allocated.
    #[error("out of memory: {what} needs {bytes} bytes")]
    OutOfMemory { what: String, bytes: u64 },
    /// The work was interrupted (Ctrl-C) before it finished.
    #[error("interrupted")]
    Interrupted,
    /// The GPU or its driver failed.
    #[error("gpu: {0}")]
    Gpu(String),
    /// A broken invariant of tilefuse itself; please report it.
    #[error("internal error: {0}")]
    Internal(String),
}

pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;
