//! One `use tilefuse::…` for embedders: the fusion IR, the params format,
//! scheduling and the devices, re-exported from their crates.
//!
//! ```
//! use tilefuse::{DType, Fusion, MatmulParams, ParamsStruct, UnaryOp};
//!
//! let mut f = Fusion::new();
//! let x = f.input(&[8], DType::F32, Some("x")).unwrap();
//! let y = f.unary(UnaryOp::Tanh, x).unwrap();
//! f.output(y).unwrap();
//! let params = MatmulParams::from_json(r#"{"splitk_factor": 2}"#).unwrap();
//! assert_eq!(params.splitk_factor, 2);
//! ```

pub use tilefuse_ir as ir;
pub use tilefuse_ir::{
    AsTensorRef, BinaryOp, DType, Data, DataMut, DataRef, Fusion, FusionError, Op, ReduceOp,
    Tensor, TensorId, TensorMut, TensorRef, TensorType, UnaryOp, evaluate,
};
pub use tilefuse_params as params;
pub use tilefuse_params::{
    CompileParams, HeuristicParams, LaunchParams, MatmulParams, ParamsError, ParamsStruct,
    PointwiseParams, ReductionParams,
};
pub use tilefuse_runtime as runtime;
pub use tilefuse_runtime::{Device, DeviceInfo, Kernel, RuntimeError, Timing};
pub use tilefuse_sched as sched;
pub use tilefuse_sched::{LowerError, Lowered, Schedule, ScheduleError, Target, lower};
