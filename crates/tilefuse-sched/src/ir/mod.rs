//! The loop-nest kernel IR.

mod expr;
mod index;
mod kernel;
mod printer;

pub use expr::Expr;
pub use index::{Index, LoopId, Var};
pub use kernel::{
    Block, BlockId, Buffer, BufferId, IterKind, IterVar, Kernel, Loop, LoopKind, Node, Role, Scope,
    ThreadAxis,
};
