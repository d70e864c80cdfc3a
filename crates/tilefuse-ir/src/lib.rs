//! The tilefuse fusion IR: a small, verified DAG of tensor ops with static
//! shapes, numpy broadcasting, a readable printout, JSON, a stable
//! fingerprint, and a reference evaluator that scheduled kernels are checked
//! against.
//!
//! ```
//! use tilefuse_ir::{DType, Fusion, ReduceOp, BinaryOp, UnaryOp};
//!
//! let mut f = Fusion::new();
//! let x = f.input(&[4, 8], DType::F32, Some("x")).unwrap();
//! let m = f.reduce(ReduceOp::Max, x, Some(&[1]), true).unwrap();
//! let d = f.binary(BinaryOp::Sub, x, m).unwrap();
//! let e = f.unary(UnaryOp::Exp, d).unwrap();
//! f.output(e).unwrap();
//! assert_eq!(f.ty(e).unwrap().shape, vec![4, 8]);
//! assert_eq!(tilefuse_ir::Fusion::from_json(&f.to_json()).unwrap(), f);
//! ```

mod close;
mod dtype;
mod error;
mod evaluate;
mod fingerprint;
mod fusion;
mod infer;
pub mod interrupt;
mod op;
mod printer;
pub mod shape;
mod summary;
mod tensor;
mod view;

pub use close::check_close;
pub use dtype::{DType, UnknownDType};
pub use error::{FusionError, Result};
pub use evaluate::{binary_scalar, evaluate, gelu, reduce_identity, unary_scalar};
pub use fingerprint::sha256_hex;
pub use fusion::{FUSION_SCHEMA_VERSION, Fusion, MAX_ELEMENTS, Node, TensorId, is_identifier};
pub use half::{bf16, f16};
pub use infer::{MatmulDims, TensorType, infer, matmul_dims};
pub use op::{BinaryOp, ConstValue, Op, ReduceOp, UnaryOp};
pub use shape::Shape;
pub use summary::{Complexity, MatmulSummary, ReductionSummary, Summary, summarize};
pub use tensor::{Data, Scalar, Tensor};
pub use view::{
    AsTensorRef, DataMut, DataRef, TensorMut, TensorRef, check_arguments, check_count,
    check_outputs, check_results,
};
