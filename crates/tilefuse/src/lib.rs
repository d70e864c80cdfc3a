//! One `use tilefuse::…` for embedders: the whole flow a Python user has —
//! define a fusion, get a scheduler's heuristic params, edit them, schedule,
//! build for a device, run — with the same names as Python.
//!
//! ```
//! use tilefuse::{BinaryOp, DType, Data, Device, Fusion, ReduceOp, SchedulerKind, Tensor, UnaryOp};
//! use tilefuse::{evaluate, heuristics, schedule};
//!
//! fn close(got: &Tensor, want: &Tensor) -> bool {
//!     let (Data::F32(g), Data::F32(w)) = (&got.data, &want.data) else { return false };
//!     g.iter().zip(w).all(|(g, w)| (g - w).abs() <= 1e-5 * (1.0 + w.abs()))
//! }
//!
//! // softmax over the rows of x: exp(x - max) / sum(exp(x - max))
//! let mut f = Fusion::new();
//! let x = f.input(&[8, 64], DType::F32, Some("x"))?;
//! let m = f.reduce(ReduceOp::Max, x, Some(&[-1]), true)?;
//! let d = f.binary(BinaryOp::Sub, x, m)?;
//! let e = f.unary(UnaryOp::Exp, d)?;
//! let s = f.reduce(ReduceOp::Sum, e, Some(&[-1]), true)?;
//! let y = f.binary(BinaryOp::Div, e, s)?;
//! f.output(y)?;
//!
//! let device = Device::cpu();
//! let mut params = heuristics(&f, None, &device.info())?;
//! assert_eq!(params.kind(), SchedulerKind::Reduction);
//! params = params.with("unroll_factor_reduction", 2.into())?; // edit a field
//! let kernel = device.build(&schedule(&f, &params, &device.info())?)?;
//!
//! let data: Vec<f32> = (0..8 * 64).map(|i| (i % 13) as f32 * 0.25).collect();
//! let input = Tensor::new(vec![8, 64], Data::F32(data))?;
//! let got = kernel.run(&[input.clone()])?;
//! assert!(close(&got[0], &evaluate(&f, &[input])?[0]));
//!
//! // a matmul with its bias and relu epilogue, on the default device
//! let mut g = Fusion::new();
//! let a = g.input(&[32, 16], DType::F32, Some("a"))?;
//! let b = g.input(&[16, 24], DType::F32, Some("b"))?;
//! let c = g.matmul(a, b, false, false)?;
//! let r = g.unary(UnaryOp::Relu, c)?;
//! g.output(r)?;
//! let device = Device::default()?;
//! let params = heuristics(&g, Some(SchedulerKind::Matmul), &device.info())?;
//! let kernel = device.build(&schedule(&g, &params, &device.info())?)?;
//! let a_in = Tensor::new(vec![32, 16], Data::F32((0..512).map(|i| (i % 7) as f32 - 3.0).collect()))?;
//! let b_in = Tensor::new(vec![16, 24], Data::F32((0..384).map(|i| (i % 5) as f32 * 0.5).collect()))?;
//! let inputs = [a_in, b_in];
//! let got = kernel.run(&inputs)?;
//! assert!(close(&got[0], &evaluate(&g, &inputs)?[0]));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Kernels on the CPU device are compiled into tilefuse's executor: in a
//! debug build of your program they run tens of times slower than in a
//! release build (`cargo run --release`).

pub use tilefuse_ir as ir;
pub use tilefuse_ir::{
    AsTensorRef, BinaryOp, DType, Data, DataMut, DataRef, Fusion, FusionError, Op, ReduceOp,
    Tensor, TensorId, TensorMut, TensorRef, TensorType, UnaryOp, bf16, evaluate, f16,
};
pub use tilefuse_params as params;
pub use tilefuse_params::{
    CompileParams, Domain, HeuristicParams, LaunchParams, MatmulParams, ParamsError, ParamsStruct,
    PointwiseParams, ReductionParams, SchedulerKind, Tunable,
};
pub use tilefuse_runtime as runtime;
pub use tilefuse_runtime::{Device, DeviceInfo, Kernel, RuntimeError, Timing};
pub use tilefuse_sched as sched;
pub use tilefuse_sched::{LowerError, Lowered, Schedule, ScheduleError, Target, lower};
pub use tilefuse_schedulers as schedulers;
pub use tilefuse_schedulers::{
    Scheduler, Segment, can_schedule, heuristics, pick, schedule, segments, tunables,
};
pub use tilefuse_tune as tune;
