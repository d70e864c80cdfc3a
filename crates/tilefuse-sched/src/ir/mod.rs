//! The loop-nest kernel IR.

mod expr;
mod index;
mod kernel;
mod names;
mod pipelining;
mod printer;
mod region;
mod terms;
mod within;

pub use expr::{Expr, MAX_EXPR_DEPTH};
pub use index::{BufferId, Index, LoopId, Var, flat_offset};
pub use kernel::{
    Block, BlockId, Buffer, CrossInvocation, IterKind, IterVar, Kernel, Loop, LoopKind, Node, Role,
    Scope, ThreadAxis,
};
pub(crate) use names::fresh_name;
pub use region::{Region, RegionError};
