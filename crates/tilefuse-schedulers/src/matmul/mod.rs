//! The matmul scheduler (nvFuser's `scheduleMatmul`, in WebGPU terms):
//! `[b,]m,k × k,n` (either operand transposed, operand prologues inlined)
//! with a pointwise epilogue (bias, activation, residual, scaling).
//!
//! From the outside in, the matmul block's loops become
//!
//! ```text
//! [split-k → workgroup.z,] batch → workgroup.z,
//! output tiles (cta_tile.m × cta_tile.n) → workgroup.y / .x (cta_order swaps them;
//!     grid_swizzle_factor groups rows of tiles; distribute_tiles_across_workgroups
//!     loops a fixed grid over them),
//! subgroup tiles × invocations (warp_tile / instruction_tile) → invocation.y / .x,
//! k: cta_tile.k steps, warp_tile.k, instruction_tile.k (unrolled),
//! instruction_tile.m × .n (unrolled): each invocation's register tile
//! ```
//!
//! The register tile accumulates in private memory and the epilogue is
//! computed from it and stored (vectorized by `supported_vec_size.epilogue`)
//! by the invocation that owns it; with `use_smem_epilogue` the output tile
//! goes through workgroup memory and the whole workgroup stores it.
//! `async_gmem_load_operands` stages each cta-tile step of the operands in
//! workgroup memory, copied cooperatively (vectorized by
//! `supported_vec_size.a` / `.b`); without it invocations read operands
//! from global memory (the better choice where barriers are costly, as on a
//! CPU Vulkan). `splitk_factor` splits k across workgroups; a second stage
//! sums the partial products and a third applies the epilogue.
//!
//! Circular buffering (`Schedule::pipeline`) needs the staged operands:
//! `circular_buffer_options.smem_write` gives the workgroup-memory copies
//! `stages` rotating buffers, each filled `prefetch_gap` k steps ahead
//! (one barrier per k step instead of two); `smem_read` copies each
//! invocation's operand fragments of an instruction-tile k step from
//! workgroup memory into registers one step ahead, in two register buffers
//! (those steps unrolled, up to 16, so the buffers stay registers).
//! `stages` and `prefetch_gap` are ignored without `smem_write`. The CPU
//! device has no registers to stage into (its executor's micro-kernel
//! keeps its own register blocks), and there `smem_read` is ignored: the
//! fragments made each k step a call of its own (a 256^3 matmul took 6 ms
//! with them, 0.4 ms without).
//!
//! Not implemented, and rejected: subgroup operations
//! (`compile.use_subgroups`). Ignored: `promote_prologue_smem_reuse` (WGSL
//! declares each workgroup array on its own) and `compile.fast_math`.

mod analysis;
mod heuristics;
mod plan;
mod scheduler;
mod staging;

pub use heuristics::{matmul_heuristics, smem_epilogue_fits};
pub use scheduler::Matmul;

use analysis::accepts;
pub(super) use analysis::problem;
use staging::{
    bind_invocations, bind_tiles, cooperative, flat, own_loops, per_invocation, pipeline_operands,
    stage_operands, store_rows,
};

use tilefuse_ir::Fusion;
use tilefuse_params::MatmulParams;

use super::launch::{Fix, check_launch_limits, err, fuse};
use crate::step::Step;
use tilefuse_sched::ir::{BlockId, LoopId, Scope, ThreadAxis};
use tilefuse_sched::{DeviceInfo, Schedule};

/// Builds the matmul schedule of `fusion` from `p` (see the module docs).
pub(crate) fn schedule_matmul(
    fusion: &Fusion,
    p: &MatmulParams,
    device: &DeviceInfo,
) -> Step<Schedule> {
    let plan = plan::plan(fusion, p, device)?;
    let mut s = Schedule::new(fusion);
    s.compute_inline_all(&[]); // the matmul and the output stay
    let blocks = s.get_blocks();
    let mm = *blocks
        .iter()
        .find(|&&b| s.kernel().block(b).reduce.is_some())
        .expect("a matmul block");
    let epilogue = blocks.iter().copied().find(|&b| b != mm);
    let (ijk, later) = split_k(&mut s, &plan, mm, epilogue)?;
    // Staged operands are copied once per k step by the whole workgroup,
    // so the k step loop goes outside the invocation loops.
    let staged = p.async_gmem_load_operands;
    // The CPU device runs a workgroup's invocations in turn: with the k
    // step outside them, each step's rows of B are reused from cache by
    // every invocation's rows.
    let k_outside = staged || !device.is_gpu();
    let t = tile(&mut s, &plan, ijk, k_outside)?;
    let grid = bind_tiles(&mut s, p, t.i[0], t.j[0], device)?;
    register_tile(&mut s, &plan, &t)?;
    if staged {
        stage_operands(&mut s, p, &plan, mm, t.k[0])?;
        pipeline_operands(&mut s, p, &plan, mm, t.k[0], t.k[2])?;
    }
    let owner = if k_outside { grid } else { t.j[2] };
    let epilogue = epilogue.filter(|_| later.is_empty());
    let (init, store, staged_out) = accumulators(&mut s, p, mm, epilogue, owner, grid, t.k[0])?;
    bind_invocations(&mut s, t.invocation_loops())?;
    // The accumulators start in vec4 steps where the register tile's
    // columns allow (a quarter of the statements).
    let init_vec = if plan.instr.n.is_multiple_of(4) { 4 } else { 1 };
    for (block, vec) in [(init, init_vec), (store, p.supported_vec_size.epilogue)] {
        let (rows, cols) = if k_outside {
            // A block over the workgroup tile: each invocation takes its
            // own register tile, as in the matmul block.
            per_invocation(&mut s, &plan, block)?
        } else {
            let own = own_loops(&s, block)?;
            (own[..own.len() - 1].to_vec(), own[own.len() - 1])
        };
        store_rows(&mut s, &rows, cols, vec)?;
    }
    if let Some(copy) = staged_out {
        cooperative(&mut s, &plan, copy, p.supported_vec_size.epilogue)?;
    }
    for b in later {
        flat(&mut s, &plan, b)?;
    }
    check_limits(&s, p, device)?;
    Ok(s)
}

/// With `splitk_factor` > 1, factors k: partial products per slice of k
/// on workgroup.z, summed by a later stage; else the batch loops are fused
/// onto workgroup.z. Returns the i, j and k loops left to tile and the
/// blocks of the later stages (the sum, then the epilogue).
fn split_k(
    s: &mut Schedule,
    plan: &plan::Plan,
    mm: BlockId,
    epilogue: Option<BlockId>,
) -> Step<([LoopId; 3], Vec<BlockId>)> {
    let loops = s.get_loops(mm)?;
    let nb = loops.len() - 3;
    let (batch, [i, j, k]) = (&loops[..nb], [loops[nb], loops[nb + 1], loops[nb + 2]]);
    if plan.splitk == 1 {
        if let Some(z) = fuse(s, batch)? {
            s.bind(z, ThreadAxis::WorkgroupZ)?;
        }
        return Ok(([i, j, k], Vec::new()));
    }
    let parts = s.split(k, &[Some(plan.splitk), None], None)?;
    s.reorder(&[parts[0], i, j])?;
    let name = s.block_name(mm);
    // rfactor keeps the block id for the partial products.
    s.rfactor(parts[0])?;
    s.bind(parts[0], ThreadAxis::WorkgroupZ)?;
    let mut later = vec![s.get_block(&name)?];
    later.extend(epilogue);
    Ok(([i, j, parts[1]], later))
}

/// The matmul's i, j and k loops split by the cta, warp and instruction
/// tiles, outermost first.
struct Tiles {
    i: Vec<LoopId>,
    j: Vec<LoopId>,
    k: Vec<LoopId>,
}

impl Tiles {
    /// The loops over subgroup tiles and invocations.
    fn invocation_loops(&self) -> [LoopId; 4] {
        [self.i[1], self.i[2], self.j[1], self.j[2]]
    }
}

/// Splits the matmul's loops by the tiles and orders them (module docs);
/// the k step loop goes outside the invocation loops with `k_outside`.
fn tile(
    s: &mut Schedule,
    plan: &plan::Plan,
    [i, j, k]: [LoopId; 3],
    k_outside: bool,
) -> Step<Tiles> {
    let (cta, warp, instr) = (plan.cta, plan.warp, plan.instr);
    let f = |x: u32| Some(u64::from(x));
    let mut split = |l, factors: [Option<u64>; 4]| s.split(l, &factors, None);
    let t = Tiles {
        i: split(
            i,
            [None, f(cta.m / warp.m), f(warp.m / instr.m), f(instr.m)],
        )?,
        j: split(
            j,
            [None, f(cta.n / warp.n), f(warp.n / instr.n), f(instr.n)],
        )?,
        k: split(
            k,
            [None, f(cta.k / warp.k), f(warp.k / instr.k), f(instr.k)],
        )?,
    };
    let mut order = vec![t.i[0], t.j[0]];
    if k_outside {
        order.push(t.k[0]);
        order.extend(t.invocation_loops());
    } else {
        order.extend(t.invocation_loops());
        order.push(t.k[0]);
    }
    order.extend([t.k[1], t.k[2], t.k[3], t.i[3], t.j[3]]);
    s.reorder(&order)?;
    Ok(t)
}

/// The register tile: rows and k unrolled; columns in vec4 steps (the
/// private accumulators then hold vectors), or as one vectorized strip
/// when wide (SIMD lanes on the CPU device).
fn register_tile(s: &mut Schedule, plan: &plan::Plan, t: &Tiles) -> Step<()> {
    let unroll = |s: &mut Schedule, l: LoopId| {
        s.unroll(l)
            .map_err(|e| err("tile_sizes.instruction_tile", e.to_string()))
    };
    unroll(s, t.k[3])?;
    unroll(s, t.i[3])?;
    match plan.instr.n {
        n if n < 4 => unroll(s, t.j[3])?,
        n if n > 4 && n <= 16 && n % 4 == 0 => {
            let parts = s.split(t.j[3], &[None, Some(4)], None)?;
            unroll(s, parts[0])?;
            s.vectorize(parts[1])?;
        }
        _ => s.vectorize(t.j[3])?,
    }
    Ok(())
}

/// The register tile's private accumulators, stored (with the `epilogue`
/// inlined, when it runs in this stage) by the invocation that owns them
/// under `owner`, through workgroup memory under `grid` with
/// `use_smem_epilogue`; placements come before the invocation loops are
/// fused, while every index is still affine. The accumulators start from
/// zero before the k step loop, not at its first iteration. Returns the
/// init block, the store and the workgroup-memory copy.
fn accumulators(
    s: &mut Schedule,
    p: &MatmulParams,
    mm: BlockId,
    epilogue: Option<BlockId>,
    owner: LoopId,
    grid: LoopId,
    k_step: LoopId,
) -> Step<(BlockId, BlockId, Option<BlockId>)> {
    let staged_out = if p.use_smem_epilogue {
        Some(s.cache_write(mm, Scope::Workgroup)?)
    } else {
        None
    };
    let store = s.cache_write(mm, Scope::Private)?;
    if let Some(e) = epilogue {
        s.reverse_compute_inline(e)?;
    }
    s.reverse_compute_at(store, owner)?;
    if let Some(copy) = staged_out {
        s.reverse_compute_at(copy, grid)?;
    }
    let init = s.decompose_reduction(mm, k_step)?;
    Ok((init, store, staged_out))
}

/// The device limits, each failure naming the params field to change.
fn check_limits(s: &Schedule, p: &MatmulParams, device: &DeviceInfo) -> Step<()> {
    let storage = if p.circular_buffer_options.smem_write {
        Fix(
            "circular_buffer_options.stages",
            "each stage holds the staged operand tiles; use fewer stages or smaller workgroup tiles",
        )
    } else {
        Fix(
            "tile_sizes.cta_tile",
            "use smaller workgroup tiles or async_gmem_load_operands = false",
        )
    };
    check_launch_limits(
        s,
        device,
        storage,
        Fix(
            "tile_sizes.instruction_tile",
            "give each invocation fewer k steps (a larger instruction_tile.k, or splitk_factor)",
        ),
        Fix(
            "tile_sizes.instruction_tile",
            "each invocation's register tile is unrolled around the loops inside it; use a \
             smaller instruction_tile.m or .n (or circular_buffer_options.smem_read = false)",
        ),
    )
}
