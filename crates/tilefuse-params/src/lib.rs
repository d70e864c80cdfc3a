//! The tilefuse heuristic params format: plain serde structs, one per
//! scheduler, that users read, edit, save and tune.
//!
//! Every struct derives serde and schemars; nothing is translated by hand.
//! Values load from partial JSON (missing fields take documented defaults),
//! and every error names the field path:
//!
//! ```
//! use tilefuse_params::{MatmulParams, ParamsStruct};
//! use serde_json::json;
//!
//! let p = MatmulParams::from_value(json!({"tile_sizes": {"cta_tile": {"m": 64}}})).unwrap();
//! assert_eq!((p.tile_sizes.cta_tile.m, p.tile_sizes.cta_tile.n), (64, 128));
//!
//! let err = MatmulParams::from_value(json!({"tile_sizes": {"cta_tile": {"m": "64"}}})).unwrap_err();
//! assert_eq!(err.to_string(), "tile_sizes.cta_tile.m: expected a positive integer, got \"64\"");
//! ```

mod common;
mod convert;
mod error;
mod heuristic;
mod kind;
mod matmul;
mod pointwise;
mod reduction;
mod schema_check;
mod tunable;
mod version;

pub use common::{CompileParams, IndexType, LaunchParams, MAX_WORKGROUP_INVOCATIONS};
pub use convert::ParamsStruct;
pub use error::ParamsError;
pub use heuristic::{HeuristicParams, SCHEDULERS, StructInfo, structs};
pub use kind::SchedulerKind;
pub use matmul::{
    CircularBufferOptions, CtaOrder, GemmTile, MatMulTileOptions, MatmulParams, SupportedVecSize,
    TilingStrategy,
};
pub use pointwise::PointwiseParams;
pub use reduction::ReductionParams;
pub use tunable::{Domain, Tunable};
pub use version::PARAMS_VERSION;
