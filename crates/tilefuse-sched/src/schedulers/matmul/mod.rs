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
//! `stages` and `prefetch_gap` are ignored without `smem_write`.
//!
//! Not implemented, and rejected: subgroup operations
//! (`compile.use_subgroups`). Ignored: `promote_prologue_smem_reuse` (WGSL
//! declares each workgroup array on its own) and `compile.fast_math`.

mod scheduler;

pub use scheduler::Matmul;

use tilefuse_ir::{Fusion, Op, matmul_dims};
use tilefuse_params::{CtaOrder, GemmTile, MatmulParams, ParamsError, TilingStrategy};

use super::launch::{
    Fix, bind_capped, check_index_type, check_launch_limits, check_workgroup, err, fuse,
};
use crate::ir::{BlockId, Buffer, IterKind, LoopId, Role, Scope, ThreadAxis};
use crate::{DeviceInfo, Schedule, ScheduleError};

/// `Ok` when `fusion` is one matmul with a pointwise prologue / epilogue
/// and a single output of the matmul's shape.
pub(super) fn accepts(fusion: &Fusion) -> Result<(), String> {
    let mut matmuls = fusion
        .nodes()
        .iter()
        .enumerate()
        .filter(|(_, n)| matches!(n.op, Op::Matmul { .. }));
    let Some((mm, _)) = matmuls.next() else {
        return Err("the fusion has no matmul".into());
    };
    if matmuls.next().is_some() {
        return Err("the fusion has several matmuls; segment it".into());
    }
    if fusion
        .nodes()
        .iter()
        .any(|n| matches!(n.op, Op::Reduce { .. }))
    {
        return Err("the fusion also reduces; segment it".into());
    }
    let shape = &fusion
        .ty(tilefuse_ir::TensorId(mm))
        .expect("verified")
        .shape;
    match fusion.outputs() {
        [out] if fusion.ty(*out).expect("verified").shape == *shape => Ok(()),
        [_] => Err(format!(
            "its output is not of the matmul's shape {shape:?} (an epilogue must be pointwise)"
        )),
        _ => Err("a matmul fusion returns one tensor; segment it".into()),
    }
}

/// `(m, n, k)` of the fusion's matmul.
fn problem(fusion: &Fusion) -> (u64, u64, u64) {
    let node = fusion
        .nodes()
        .iter()
        .find(|n| matches!(n.op, Op::Matmul { .. }))
        .expect("accepts checked");
    let Op::Matmul {
        transpose_a,
        transpose_b,
    } = node.op
    else {
        unreachable!("a matmul")
    };
    let ty = |i: usize| fusion.ty(node.args[i]).expect("verified");
    let d = matmul_dims(ty(0), ty(1), transpose_a, transpose_b).expect("verified");
    (d.m as u64, d.n as u64, d.k as u64)
}

/// Default params. The CPU device: invocations of 8 whole rows (the
/// executor's register-blocked micro-kernel), up to 64 rows a workgroup
/// that share each k step's rows of B from cache, workgroups in parallel
/// on threads (at least two per core). A CPU
/// Vulkan (lavapipe): 8×16 register tiles read straight from global memory,
/// no workgroup memory (its barriers are costly). Other GPUs: 4×4 register
/// tiles in a 64×128 workgroup tile, operands read from global memory too:
/// on an H100, 1024³ took 0.18 ms so and 1.5 ms with this scheduler's
/// workgroup-memory staging (scalar copies, a barrier pair per k step).
/// `launch.workgroup_size` stays null: the scheduler derives it from the
/// tiles, so editing them keeps the params valid.
pub fn matmul_heuristics(fusion: &Fusion, device: &DeviceInfo) -> MatmulParams {
    let (m, n, k) = problem(fusion);
    let mut p = MatmulParams::default();
    let pow2_at_most = |x: u64, cap: u64| (1u64 << (63 - x.max(1).leading_zeros())).min(cap) as u32;
    let (cta, warp, instr) = if !device.is_gpu() {
        // k in steps of 64, whose rows of B stay in L2 while every
        // invocation uses them (1024^3 on a 2-core AVX-512 Xeon, 64 rows a
        // workgroup: 10.0 ms at 64, 10.7 at 32, 11.4 at 128; 8 rows a
        // workgroup, each streaming all of B: 12.5 ms at 32).
        let strip = u32::try_from(n.max(1)).unwrap_or(u32::MAX).min(4096);
        let rows = pow2_at_most(m, 8);
        let per_core = m.div_ceil(2 * device.cores.max(1) as u64);
        let tile_rows = rows.max(pow2_at_most(per_core, 64));
        let kk = pow2_at_most(k, 64);
        (
            GemmTile::new(tile_rows, strip, kk),
            GemmTile::new(tile_rows, strip, kk),
            GemmTile::new(rows, strip, 1),
        )
    } else {
        let max = device.limits.max_invocations_per_workgroup;
        let cpu_vulkan = device.adapter_type == "cpu";
        // lavapipe: 8x16 register tiles (four vec4 accumulators a row) run
        // 1024^3 in 0.35x the time of the hand-written 4x4 kernel
        // (BENCHMARKS.md); discrete GPUs keep 4x4 (registers are scarcer).
        let (ri, rj) = if cpu_vulkan {
            (pow2_at_most(m, 8), pow2_at_most(n, 16))
        } else {
            (pow2_at_most(m, 4), pow2_at_most(n, 4))
        };
        let (side_m, side_n) = match (cpu_vulkan, max) {
            (true, _) | (_, ..=255) => (8, 8),
            (_, 256..=511) => (16, 16),
            _ => (16, 32),
        };
        let (tm, tn) = (
            ri * pow2_at_most(m.div_ceil(u64::from(ri)), side_m),
            rj * pow2_at_most(n.div_ceil(u64::from(rj)), side_n),
        );
        let kk = pow2_at_most(k, if cpu_vulkan { 16 } else { 32 });
        let ik = pow2_at_most(k, if cpu_vulkan { 2 } else { 4 });
        (
            GemmTile::new(tm, tn, kk),
            GemmTile::new((tm / 2).max(ri), (tn / 2).max(rj), kk),
            GemmTile::new(ri, rj, ik),
        )
    };
    p.tile_sizes.cta_tile = cta;
    p.tile_sizes.warp_tile = warp;
    p.tile_sizes.instruction_tile = instr;
    p.supported_vec_size.epilogue = [4u32, 2, 1]
        .into_iter()
        .find(|&v| instr.n.is_multiple_of(v) && n.is_multiple_of(u64::from(v)))
        .unwrap_or(1);
    p
}

struct Plan {
    cta: GemmTile,
    warp: GemmTile,
    instr: GemmTile,
    invocations: [u64; 2],
    splitk: u64,
    /// Invocations of the later, flat stages.
    flat_invocations: u64,
    grid_cap: u64,
}

fn plan(fusion: &Fusion, p: &MatmulParams, device: &DeviceInfo) -> Result<Plan, ParamsError> {
    accepts(fusion).map_err(|e| err("scheduler", e))?;
    check_index_type(p.compile.index_type)?;
    if p.compile.use_subgroups {
        return Err(err(
            "compile.use_subgroups",
            "the matmul scheduler has no subgroup variant yet",
        ));
    }
    let cb = &p.circular_buffer_options;
    for (field, on) in [("smem_write", cb.smem_write), ("smem_read", cb.smem_read)] {
        if on && !p.async_gmem_load_operands {
            return Err(err(
                &format!("circular_buffer_options.{field}"),
                "circular buffering pipelines the operands staged in workgroup memory; \
                 set async_gmem_load_operands",
            ));
        }
    }
    if cb.smem_write && cb.stages < 2 {
        return Err(err(
            "circular_buffer_options.stages",
            format!(
                "a circular buffer needs at least 2 stages, got {}",
                cb.stages
            ),
        ));
    }
    let t = &p.tile_sizes;
    let (cta, warp, instr) = (t.cta_tile, t.warp_tile, t.instruction_tile);
    let invocations = [u64::from(cta.n / instr.n), u64::from(cta.m / instr.m)];
    let n_inv = invocations[0] * invocations[1];
    // Derived (not given): the tiles' invocations, n along x and m along y.
    let size = (p.launch).workgroup_size_or(|| [cta.n / instr.n, cta.m / instr.m, 1]);
    let given: u64 = size.iter().map(|&d| u64::from(d)).product();
    if n_inv != given {
        return Err(err(
            "launch.workgroup_size",
            format!(
                "the tiles give (cta_tile.n / instruction_tile.n) × (cta_tile.m / instruction_tile.m) \
                 = {} × {} = {n_inv} invocations per workgroup, got {given}; leave it null to \
                 derive it",
                invocations[0], invocations[1],
            ),
        ));
    }
    for (d, &count) in invocations.iter().enumerate() {
        let max = u64::from(device.limits.max_workgroup_size[d]);
        if count > max {
            return Err(err(
                "tile_sizes.instruction_tile",
                format!(
                    "the tiles put {count} invocations along {}, over the device's \
                     max_compute_workgroup_size_{} ({max})",
                    ["x (n)", "y (m)"][d],
                    ["x", "y"][d]
                ),
            ));
        }
    }
    check_workgroup(size, &device.limits)?;
    let (_, _, k) = problem(fusion);
    let splitk = u64::from(p.splitk_factor);
    if !k.is_multiple_of(splitk) {
        return Err(err(
            "splitk_factor",
            format!("{splitk} does not divide k ({k})"),
        ));
    }
    if splitk > 1 && fusion_has_batch(fusion) {
        return Err(err(
            "splitk_factor",
            "batched matmuls keep workgroup.z for the batch; split-k needs it",
        ));
    }
    Ok(Plan {
        cta,
        warp,
        instr,
        invocations,
        splitk,
        flat_invocations: n_inv.min(u64::from(device.limits.max_workgroup_size[0])),
        grid_cap: u64::from(device.limits.max_workgroups_per_dimension),
    })
}

fn fusion_has_batch(fusion: &Fusion) -> bool {
    fusion
        .outputs()
        .first()
        .is_some_and(|&o| fusion.ty(o).expect("verified").shape.len() > 2)
}

fn internal(e: &ScheduleError) -> ParamsError {
    err("scheduler", format!("the matmul scheduler failed: {e}"))
}

/// Builds the matmul schedule of `fusion` from `p` (see the module docs).
pub fn schedule_matmul(
    fusion: &Fusion,
    p: &MatmulParams,
    device: &DeviceInfo,
) -> Result<Schedule, ParamsError> {
    let plan = plan(fusion, p, device)?;
    let mut s = Schedule::new(fusion);
    s.compute_inline_all(&[]); // the matmul and the output stay
    let blocks = s.get_blocks();
    let mm = *blocks
        .iter()
        .find(|&&b| s.kernel().block(b).reduce.is_some())
        .expect("a matmul block");
    let epilogue = blocks.iter().copied().find(|&b| b != mm);
    let loops = s.get_loops(mm).expect("live");
    let nb = loops.len() - 3;
    let (batch, [i, j, mut k]) = (
        loops[..nb].to_vec(),
        [loops[nb], loops[nb + 1], loops[nb + 2]],
    );
    // rfactor keeps the block id for the partial products.
    let tiled = mm;
    let mut later = Vec::new();
    if plan.splitk > 1 {
        // Partial products per slice of k, summed by the next stage.
        let parts = s.split(k, &[Some(plan.splitk), None], None).expect("valid");
        s.reorder(&[parts[0], i, j]).expect("one chain");
        let name = s.block_name(mm);
        s.rfactor(parts[0]).map_err(|e| internal(&e))?;
        s.bind(parts[0], ThreadAxis::WorkgroupZ)
            .expect("a spatial loop");
        later.push(s.get_block(&name).expect("rfactor's combining block"));
        later.extend(epilogue);
        k = parts[1];
    } else if let Some(z) = fuse(&mut s, &batch) {
        s.bind(z, ThreadAxis::WorkgroupZ).expect("a spatial loop");
    }
    let (cta, warp, instr) = (plan.cta, plan.warp, plan.instr);
    let f = |x: u32| Some(u64::from(x));
    let ip = s
        .split(
            i,
            &[None, f(cta.m / warp.m), f(warp.m / instr.m), f(instr.m)],
            None,
        )
        .expect("valid");
    let jp = s
        .split(
            j,
            &[None, f(cta.n / warp.n), f(warp.n / instr.n), f(instr.n)],
            None,
        )
        .expect("valid");
    let kp = s
        .split(
            k,
            &[None, f(cta.k / warp.k), f(warp.k / instr.k), f(instr.k)],
            None,
        )
        .expect("valid");
    // Staged operands are copied once per k step by the whole workgroup,
    // so the k step loop goes outside the invocation loops.
    let staged = p.async_gmem_load_operands;
    // The CPU device runs a workgroup's invocations in turn: with the k
    // step outside them, each step's rows of B are reused from cache by
    // every invocation's rows.
    let k_outside = staged || !device.is_gpu();
    let invocation_loops = [ip[1], ip[2], jp[1], jp[2]];
    let mut order = vec![ip[0], jp[0]];
    if k_outside {
        order.push(kp[0]);
        order.extend(invocation_loops);
    } else {
        order.extend(invocation_loops);
        order.push(kp[0]);
    }
    order.extend([kp[1], kp[2], kp[3], ip[3], jp[3]]);
    s.reorder(&order).expect("one chain");
    let grid = bind_tiles(&mut s, p, ip[0], jp[0], device);
    // The register tile: rows and k unrolled; columns in vec4 steps (the
    // private accumulators then hold vectors), or as one vectorized strip
    // when wide (SIMD lanes on the CPU device).
    let unroll = |s: &mut Schedule, l: LoopId| {
        s.unroll(l)
            .map_err(|e| err("tile_sizes.instruction_tile", e.to_string()))
    };
    unroll(&mut s, kp[3])?;
    unroll(&mut s, ip[3])?;
    match instr.n {
        n if n < 4 => unroll(&mut s, jp[3])?,
        n if n > 4 && n <= 16 && n % 4 == 0 => {
            let parts = s.split(jp[3], &[None, Some(4)], None).expect("valid");
            unroll(&mut s, parts[0])?;
            s.vectorize(parts[1]).expect("the innermost spatial loop");
        }
        _ => s.vectorize(jp[3]).expect("the innermost spatial loop"),
    }
    if staged {
        stage_operands(&mut s, p, &plan, tiled, kp[0])?;
        pipeline_operands(&mut s, p, tiled, kp[0], kp[2])?;
    }
    // Register tile: private accumulators, stored (with the epilogue) by
    // the invocation that owns them; placements come before the
    // invocation loops are fused, while every index is still affine.
    let staged_out = if p.use_smem_epilogue {
        Some(
            s.cache_write(tiled, Scope::Workgroup)
                .map_err(|e| internal(&e))?,
        )
    } else {
        None
    };
    let store = s
        .cache_write(tiled, Scope::Private)
        .map_err(|e| internal(&e))?;
    if let (Some(e), true) = (epilogue, later.is_empty()) {
        s.reverse_compute_inline(e).map_err(|e| internal(&e))?;
    }
    let owner = if k_outside { grid } else { jp[2] };
    s.reverse_compute_at(store, owner)
        .map_err(|e| internal(&e))?;
    if let Some(copy) = staged_out {
        s.reverse_compute_at(copy, grid).map_err(|e| internal(&e))?;
    }
    // The accumulators start from zero before the k loop, not at its
    // first iteration.
    let init = s
        .decompose_reduction(tiled, kp[0])
        .map_err(|e| internal(&e))?;
    bind_invocations(&mut s, invocation_loops);
    // The accumulators start in vec4 steps where the register tile's
    // columns allow (a quarter of the statements).
    let init_vec = if instr.n.is_multiple_of(4) { 4 } else { 1 };
    for (block, vec) in [(init, init_vec), (store, p.supported_vec_size.epilogue)] {
        let (rows, cols) = if k_outside {
            // A block over the workgroup tile: each invocation takes its
            // own register tile, as in the matmul block.
            per_invocation(&mut s, &plan, block)
        } else {
            let own = own_loops(&s, block);
            (own[..own.len() - 1].to_vec(), own[own.len() - 1])
        };
        store_rows(&mut s, &rows, cols, vec);
    }
    if let Some(copy) = staged_out {
        cooperative(&mut s, &plan, copy, p.supported_vec_size.epilogue);
    }
    for b in later {
        flat(&mut s, &plan, b);
    }
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
        &s,
        device,
        storage,
        Fix(
            "tile_sizes.instruction_tile",
            "give each invocation fewer k steps (a larger instruction_tile.k, or splitk_factor)",
        ),
    )?;
    Ok(s)
}

/// Splits, fuses and binds a block over the workgroup tile as the matmul
/// block's invocations are (warp tile, then register tile); returns the
/// register tile's row and column loops.
fn per_invocation(s: &mut Schedule, plan: &Plan, block: BlockId) -> (Vec<LoopId>, LoopId) {
    let (cta, warp, instr) = (plan.cta, plan.warp, plan.instr);
    let f = |x: u32| Some(u64::from(x));
    let own = own_loops(s, block);
    let [.., rows, cols] = own[..] else {
        unreachable!("a matmul output has two axes or more")
    };
    let a = s
        .split(
            rows,
            &[f(cta.m / warp.m), f(warp.m / instr.m), f(instr.m)],
            None,
        )
        .expect("valid");
    let b = s
        .split(
            cols,
            &[f(cta.n / warp.n), f(warp.n / instr.n), f(instr.n)],
            None,
        )
        .expect("valid");
    s.reorder(&[a[0], a[1], b[0], b[1], a[2], b[2]])
        .expect("one chain");
    bind_invocations(s, [a[0], a[1], b[0], b[1]]);
    (vec![a[2]], b[2])
}

/// Fuses the (warp, invocation) loops of each axis and binds them to
/// invocation.y (rows) and invocation.x (columns).
fn bind_invocations(s: &mut Schedule, [a1, a2, b1, b2]: [LoopId; 4]) {
    let ty = s.fuse(&[a1, a2]).expect("adjacent");
    let tx = s.fuse(&[b1, b2]).expect("adjacent");
    s.bind(ty, ThreadAxis::InvocationY).expect("a spatial loop");
    s.bind(tx, ThreadAxis::InvocationX).expect("a spatial loop");
}

/// The block's own loops (one per iterator, as `compute_at` leaves them).
fn own_loops(s: &Schedule, b: BlockId) -> Vec<LoopId> {
    let loops = s.get_loops(b).expect("live");
    loops[loops.len() - s.kernel().block(b).iters.len()..].to_vec()
}

/// Binds the tile loops to workgroups (see the module docs); returns the
/// innermost grid loop, under which a workgroup's tile is computed.
fn bind_tiles(
    s: &mut Schedule,
    p: &MatmulParams,
    ti: LoopId,
    tj: LoopId,
    device: &DeviceInfo,
) -> LoopId {
    let (fast, slow) = match p.cta_order {
        CtaOrder::RowMajor => (tj, ti),
        CtaOrder::ColumnMajor => (ti, tj),
    };
    let cap = u64::from(device.limits.max_workgroups_per_dimension);
    let g = u64::from(p.grid_swizzle_factor);
    // Swizzle: consecutive workgroups walk `g` tiles along the slow axis
    // before moving along the fast one.
    let (x, y) = if g > 1 {
        let sp = s.split(slow, &[None, Some(g)], None).expect("valid");
        s.reorder(&[sp[0], fast, sp[1]]).expect("one chain");
        (s.fuse(&[fast, sp[1]]).expect("adjacent"), sp[0])
    } else {
        if slow != ti {
            s.reorder(&[tj, ti]).expect("one chain");
        }
        (fast, slow)
    };
    match p.tiling_strategy {
        TilingStrategy::OneTilePerWorkgroup => {
            let fixed = p.launch.grid.map(|g| (u64::from(g[0]), u64::from(g[1])));
            bind_capped(
                s,
                y,
                ThreadAxis::WorkgroupY,
                Some(fixed.map_or(cap, |f| f.1)),
            );
            bind_capped(
                s,
                x,
                ThreadAxis::WorkgroupX,
                Some(fixed.map_or(cap, |f| f.0)),
            )
        }
        TilingStrategy::DistributeTilesAcrossWorkgroups => {
            // A persistent grid: each workgroup loops over its share of tiles.
            let tiles = s.fuse(&[y, x]).expect("adjacent");
            let n = s.kernel().loop_(tiles).extent;
            let workgroups = p
                .launch
                .grid
                .map_or(u64::from(device.cores.max(1) as u32) * 4, |g| {
                    u64::from(g[0])
                })
                .min(n)
                .min(cap);
            let parts = s
                .split(tiles, &[None, Some(workgroups)], None)
                .expect("valid");
            s.reorder(&[parts[1], parts[0]]).expect("one chain");
            s.bind(parts[1], ThreadAxis::WorkgroupX)
                .expect("a spatial loop");
            parts[0]
        }
    }
}

/// Stages each cta-tile step of the operands in workgroup memory, copied
/// by the whole workgroup.
fn stage_operands(
    s: &mut Schedule,
    p: &MatmulParams,
    plan: &Plan,
    block: BlockId,
    step: LoopId,
) -> Result<(), ParamsError> {
    let operands = buffers_read(s, block, |b| matches!(b.role, Role::Input(_)));
    for (name, vec) in operands
        .iter()
        .zip([p.supported_vec_size.a, p.supported_vec_size.b])
    {
        let copy = s
            .cache_read(block, name, Scope::Workgroup)
            .map_err(|e| internal(&e))?;
        s.compute_at(copy, step).map_err(|e| internal(&e))?;
        cooperative(s, plan, copy, vec);
    }
    Ok(())
}

/// Circular buffering of the staged operands (see the module docs): the
/// workgroup-memory copies over the k steps (`smem_write`), fragments
/// copied into registers over the instruction-tile k steps (`smem_read`).
fn pipeline_operands(
    s: &mut Schedule,
    p: &MatmulParams,
    block: BlockId,
    step: LoopId,
    fragment_step: LoopId,
) -> Result<(), ParamsError> {
    let cb = &p.circular_buffer_options;
    if cb.smem_read {
        for name in buffers_read(s, block, |b| b.scope == Scope::Workgroup) {
            let copy = s
                .cache_read(block, &name, Scope::Private)
                .map_err(|e| internal(&e))?;
            s.compute_at(copy, fragment_step)
                .map_err(|e| internal(&e))?;
            for l in own_loops(s, copy) {
                s.unroll(l).map_err(|e| internal(&e))?;
            }
        }
        s.pipeline(fragment_step, 2, 1).map_err(|e| internal(&e))?;
        // Unrolled, each step's register buffer is a constant index: a
        // GPU compiler keeps the fragments in registers, not local memory.
        if s.kernel().loop_(fragment_step).extent <= MAX_UNROLLED_FRAGMENT_STEPS {
            s.unroll(fragment_step).map_err(|e| internal(&e))?;
        }
    }
    if cb.smem_write {
        s.pipeline(step, cb.stages, cb.prefetch_gap)
            .map_err(|e| err("circular_buffer_options", e.to_string()))?;
    }
    Ok(())
}

/// The most instruction-tile k steps a workgroup k step unrolls with
/// `smem_read` (each holds a fragment copy and a register tile's FMAs).
const MAX_UNROLLED_FRAGMENT_STEPS: u64 = 16;

/// The names of the buffers `block` reads that `keep` selects, in order
/// of first read.
fn buffers_read(s: &Schedule, block: BlockId, keep: impl Fn(&Buffer) -> bool) -> Vec<String> {
    let k = s.kernel();
    let mut loads = Vec::new();
    k.block(block).value.loads(&mut loads);
    let mut names: Vec<String> = Vec::new();
    for (buf, _) in loads {
        let b = k.buffer(buf);
        if keep(b) && !names.contains(&b.name) {
            names.push(b.name.clone());
        }
    }
    names
}

/// Spreads a copy block's loops over the workgroup's invocations, `vec`
/// contiguous elements each where the innermost extent allows.
fn cooperative(s: &mut Schedule, plan: &Plan, copy: BlockId, vec: u32) {
    let own = own_loops(s, copy);
    let inner = s
        .kernel()
        .loop_(*own.last().expect("a copy has loops"))
        .extent;
    let v = [u64::from(vec), 2, 1]
        .into_iter()
        .find(|&v| v <= u64::from(vec) && inner.is_multiple_of(v))
        .unwrap_or(1);
    let flat = fuse(s, &own).expect("loops");
    // As many invocations as there are vectors to copy, no more: a split
    // that overshoots only adds guarded-off work.
    let vectors = s.kernel().loop_(flat).extent.div_ceil(v);
    let x = plan.invocations[0].min(vectors);
    let y = plan.invocations[1].min(vectors.div_ceil(x));
    let parts = s
        .split(flat, &[None, Some(y), Some(x), Some(v)], None)
        .expect("valid");
    s.bind(parts[1], ThreadAxis::InvocationY)
        .expect("a spatial loop");
    s.bind(parts[2], ThreadAxis::InvocationX)
        .expect("a spatial loop");
    s.vectorize(parts[3]).expect("the innermost loop");
}

/// A register tile's block (the accumulators' start, or the store with the
/// epilogue): its rows unrolled, its columns in vectors of `vec` (a few
/// unrolled, or one strip when there are many: SIMD lanes on the CPU).
fn store_rows(s: &mut Schedule, rows: &[LoopId], cols: LoopId, vec: u32) {
    for &r in rows {
        s.unroll(r)
            .expect("as many rows as the matmul block unrolled");
    }
    let n = s.kernel().loop_(cols).extent;
    let v = u64::from(vec);
    if v > 1 && n > v && n.is_multiple_of(v) && n / v <= 16 {
        let parts = s.split(cols, &[None, Some(v)], None).expect("valid");
        s.unroll(parts[0]).expect("at most 16 iterations");
        s.vectorize(parts[1]).expect("the innermost loop");
    } else if n <= 16 && v == 1 {
        s.unroll(cols).expect("at most 16 iterations");
    } else {
        s.vectorize(cols).expect("the innermost loop");
    }
}

/// A later stage (split-k's sum, then the epilogue): flat over the
/// workgroup's invocations.
fn flat(s: &mut Schedule, plan: &Plan, b: BlockId) {
    let block = s.kernel().block(b).clone();
    let loops = s.get_loops(b).expect("live");
    let spatial: Vec<LoopId> = loops
        .iter()
        .zip(&block.iters)
        .filter(|(_, it)| it.kind == IterKind::Spatial)
        .map(|(l, _)| *l)
        .collect();
    let flat = fuse(s, &spatial).expect("spatial loops");
    let parts = s
        .split(flat, &[None, Some(plan.flat_invocations)], None)
        .expect("valid");
    bind_capped(s, parts[0], ThreadAxis::WorkgroupX, Some(plan.grid_cap));
    s.bind(parts[1], ThreadAxis::InvocationX)
        .expect("a spatial loop");
}
