//! The one error type of the IR crate.

/// Everything that can go wrong building, loading or evaluating a fusion.
/// Messages name the op and the shapes or dtypes involved.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FusionError {
    /// An op's arguments or attributes do not fit it.
    #[error("{op}: {message}")]
    Op { op: &'static str, message: String },
    /// A tensor id that is not (yet) a node of this fusion.
    #[error("tensor id {id} is not in this fusion (it has {len} tensors)")]
    UnknownTensor { id: usize, len: usize },
    /// A tensor name that is malformed or already taken.
    #[error("{0}")]
    Name(String),
    /// Outputs are missing or marked twice.
    #[error("{0}")]
    Output(String),
    /// Fusion JSON that does not parse or describes an invalid fusion.
    #[error("invalid fusion JSON: {0}")]
    Json(String),
    /// Arguments given to `evaluate` that do not match the fusion's inputs.
    #[error("{0}")]
    Argument(String),
    /// The evaluation was interrupted ([`crate::interrupt`]).
    #[error("interrupted")]
    Interrupted,
    /// Memory for a tensor could not be allocated.
    #[error("out of memory: {what} needs {bytes} bytes")]
    OutOfMemory { what: String, bytes: u64 },
}

impl FusionError {
    pub(crate) fn op(op: &'static str, message: impl Into<String>) -> Self {
        FusionError::Op {
            op,
            message: message.into(),
        }
    }
}

pub type Result<T, E = FusionError> = std::result::Result<T, E>;
