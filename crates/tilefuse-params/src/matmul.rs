//! Params of the matmul scheduler (nvFuser's `MatmulParams`). WebGPU
//! meaning of the tile levels: cta = workgroup tile, warp = subgroup tile,
//! instruction = per-invocation register tile.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ParamsError;
use crate::common::{CompileParams, LaunchParams};
use crate::convert::params_struct;
use crate::version::{PARAMS_VERSION, current_version};

/// A tile of the `m × n × k` iteration space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GemmTile {
    /// Rows of the output tile.
    #[schemars(range(min = 1))]
    pub m: u32,
    /// Columns of the output tile.
    #[schemars(range(min = 1))]
    pub n: u32,
    /// Depth of one step along the reduction axis.
    #[schemars(range(min = 1))]
    pub k: u32,
}

impl GemmTile {
    pub const fn new(m: u32, n: u32, k: u32) -> Self {
        GemmTile { m, n, k }
    }
}

/// The three tile levels of a matmul schedule. Each level must divide the
/// one above it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct MatMulTileOptions {
    /// Tile computed by one workgroup. Default `{m: 128, n: 128, k: 32}`.
    pub cta_tile: GemmTile,
    /// Tile computed by one subgroup. Default `{m: 64, n: 64, k: 32}`.
    pub warp_tile: GemmTile,
    /// Register tile computed by one invocation. Default `{m: 16, n: 8, k: 16}`.
    pub instruction_tile: GemmTile,
}

impl Default for MatMulTileOptions {
    fn default() -> Self {
        MatMulTileOptions {
            cta_tile: GemmTile::new(128, 128, 32),
            warp_tile: GemmTile::new(64, 64, 32),
            instruction_tile: GemmTile::new(16, 8, 16),
        }
    }
}

/// Multi-buffering of operand tiles staged in workgroup memory.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct CircularBufferOptions {
    /// Circular-buffer the global → workgroup memory copies. Default `false`.
    pub smem_write: bool,
    /// Double-buffer the workgroup memory → register loads. Default `false`.
    pub smem_read: bool,
    /// Stages of the workgroup-memory circular buffer. Default `2`.
    #[schemars(range(min = 1, max = 8))]
    pub stages: u32,
    /// How many stages ahead loads are issued; less than `stages`. Default `1`.
    #[schemars(range(min = 0, max = 7))]
    pub prefetch_gap: u32,
}

impl Default for CircularBufferOptions {
    fn default() -> Self {
        CircularBufferOptions {
            smem_write: false,
            smem_read: false,
            stages: 2,
            prefetch_gap: 1,
        }
    }
}

/// Widest vector loads / stores the operands and the epilogue allow.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SupportedVecSize {
    /// Operand A. Default `4`.
    #[schemars(extend("enum" = [1, 2, 4]))]
    pub a: u32,
    /// Operand B. Default `4`.
    #[schemars(extend("enum" = [1, 2, 4]))]
    pub b: u32,
    /// Output and epilogue tensors. Default `4`.
    #[schemars(extend("enum" = [1, 2, 4]))]
    pub epilogue: u32,
}

impl Default for SupportedVecSize {
    fn default() -> Self {
        SupportedVecSize {
            a: 4,
            b: 4,
            epilogue: 4,
        }
    }
}

/// Order in which workgroup ids walk the output tiles.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CtaOrder {
    /// Consecutive workgroups take consecutive tiles of a row.
    #[default]
    RowMajor,
    /// Consecutive workgroups take consecutive tiles of a column.
    ColumnMajor,
}

/// How output tiles are distributed over workgroups.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TilingStrategy {
    /// One workgroup per output tile.
    #[default]
    OneTilePerWorkgroup,
    /// A persistent grid; each workgroup loops over several tiles.
    DistributeTilesAcrossWorkgroups,
}

/// How the matmul scheduler tiles `[b,]m,k × k,n` and its epilogue.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct MatmulParams {
    /// Params format version this value was written with. Default: current.
    #[serde(default = "current_version")]
    #[schemars(range(min = 1))]
    pub version: u32,
    pub launch: LaunchParams,
    pub compile: CompileParams,
    pub tile_sizes: MatMulTileOptions,
    /// Stage operands into workgroup memory with copies that overlap the
    /// previous tile's math. Default `false`.
    pub async_gmem_load_operands: bool,
    pub circular_buffer_options: CircularBufferOptions,
    pub supported_vec_size: SupportedVecSize,
    /// Split the k axis across this many workgroups and sum the partial
    /// products; must divide k. Default `1`.
    #[schemars(range(min = 1, max = 64))]
    pub splitk_factor: u32,
    /// Rasterization order of output tiles. Default `"row_major"`.
    pub cta_order: CtaOrder,
    /// Swizzle workgroup ids in groups of this many tiles for cache reuse;
    /// `1` disables swizzling; a factor above the tiles along the swizzled
    /// axis acts as that count. Default `1`.
    #[schemars(range(min = 1, max = 32))]
    pub grid_swizzle_factor: u32,
    /// Stage the output tile in workgroup memory before the epilogue writes
    /// it. Default `false`.
    pub use_smem_epilogue: bool,
    /// Reuse the prologue's workgroup memory for the epilogue. Default `false`.
    pub promote_prologue_smem_reuse: bool,
    /// How output tiles map onto workgroups. Default `"one_tile_per_workgroup"`.
    pub tiling_strategy: TilingStrategy,
}

impl Default for MatmulParams {
    fn default() -> Self {
        MatmulParams {
            version: PARAMS_VERSION,
            launch: LaunchParams::default(),
            compile: CompileParams::default(),
            tile_sizes: MatMulTileOptions::default(),
            async_gmem_load_operands: false,
            circular_buffer_options: CircularBufferOptions::default(),
            supported_vec_size: SupportedVecSize::default(),
            splitk_factor: 1,
            cta_order: CtaOrder::default(),
            grid_swizzle_factor: 1,
            use_smem_epilogue: false,
            promote_prologue_smem_reuse: false,
            tiling_strategy: TilingStrategy::default(),
        }
    }
}

params_struct!(GemmTile);
params_struct!(
    MatMulTileOptions,
    default = MatMulTileOptions::default(),
    check = |t: &MatMulTileOptions| {
        let levels = [
            ("cta_tile", t.cta_tile),
            ("warp_tile", t.warp_tile),
            ("instruction_tile", t.instruction_tile),
        ];
        for pair in levels.windows(2) {
            let ((outer_name, outer), (inner_name, inner)) = (pair[0], pair[1]);
            for (dim, o, i) in [
                ("m", outer.m, inner.m),
                ("n", outer.n, inner.n),
                ("k", outer.k, inner.k),
            ] {
                if !o.is_multiple_of(i) {
                    return Err(ParamsError::new(
                        format!("{inner_name}.{dim}"),
                        format!("{i} does not divide {outer_name}.{dim} ({o})"),
                    ));
                }
            }
        }
        Ok(())
    }
);
params_struct!(
    CircularBufferOptions,
    default = CircularBufferOptions::default(),
    check = |c: &CircularBufferOptions| {
        if c.prefetch_gap >= c.stages {
            return Err(ParamsError::new(
                "prefetch_gap",
                format!(
                    "must be less than stages ({}), got {}",
                    c.stages, c.prefetch_gap
                ),
            ));
        }
        Ok(())
    }
);
params_struct!(SupportedVecSize, default = SupportedVecSize::default());
params_struct!(
    MatmulParams,
    scheduler = "matmul",
    default = MatmulParams::default(),
    check = |p: &MatmulParams| {
        p.launch.check_fields().map_err(|e| e.within("launch"))?;
        p.tile_sizes
            .check_fields()
            .map_err(|e| e.within("tile_sizes"))?;
        p.circular_buffer_options
            .check_fields()
            .map_err(|e| e.within("circular_buffer_options"))
    }
);
