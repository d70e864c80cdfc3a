//! The nest's parts: per-invocation tiles, binding, operands staged
//! through workgroup memory (cooperative copies, circular buffers) and the
//! epilogue's stores.

use tilefuse_params::{CtaOrder, MatmulParams, TilingStrategy};

use super::plan::Plan;
use crate::launch::{bind_capped, err, fuse, reduce_outside};
use crate::step::Step;
use tilefuse_sched::ir::{BlockId, Buffer, IterKind, LoopId, Role, Scope, ThreadAxis};

use tilefuse_sched::{DeviceInfo, Schedule};

/// Splits, fuses and binds a block over the workgroup tile as the matmul
/// block's invocations are (warp tile, then register tile); returns the
/// register tile's row and column loops.
pub(super) fn per_invocation(
    s: &mut Schedule,
    plan: &Plan,
    block: BlockId,
) -> Step<(Vec<LoopId>, LoopId)> {
    let (cta, warp, instr) = (plan.cta, plan.warp, plan.instr);
    let f = |x: u32| Some(u64::from(x));
    let own = own_loops(s, block)?;
    let [.., rows, cols] = own[..] else {
        unreachable!("a matmul output has two axes or more")
    };
    let a = s.split(
        rows,
        &[f(cta.m / warp.m), f(warp.m / instr.m), f(instr.m)],
        None,
    )?;
    let b = s.split(
        cols,
        &[f(cta.n / warp.n), f(warp.n / instr.n), f(instr.n)],
        None,
    )?;
    s.reorder(&[a[0], a[1], b[0], b[1], a[2], b[2]])?;
    bind_invocations(s, [a[0], a[1], b[0], b[1]])?;
    Ok((vec![a[2]], b[2]))
}

/// Fuses the (warp, invocation) loops of each axis and binds them to
/// invocation.y (rows) and invocation.x (columns).
pub(super) fn bind_invocations(s: &mut Schedule, [a1, a2, b1, b2]: [LoopId; 4]) -> Step<()> {
    let ty = s.fuse(&[a1, a2])?;
    let tx = s.fuse(&[b1, b2])?;
    s.bind(ty, ThreadAxis::InvocationY)?;
    s.bind(tx, ThreadAxis::InvocationX)?;
    Ok(())
}

/// The block's own loops (one per iterator, as `compute_at` leaves them).
pub(super) fn own_loops(s: &Schedule, b: BlockId) -> Step<Vec<LoopId>> {
    let loops = s.get_loops(b)?;
    Ok(loops[loops.len() - s.kernel().block(b).iters.len()..].to_vec())
}

/// Binds the tile loops to workgroups (see the module docs); returns the
/// innermost grid loop, under which a workgroup's tile is computed.
pub(super) fn bind_tiles(
    s: &mut Schedule,
    p: &MatmulParams,
    ti: LoopId,
    tj: LoopId,
    device: &DeviceInfo,
) -> Step<LoopId> {
    let (fast, slow) = match p.cta_order {
        CtaOrder::RowMajor => (tj, ti),
        CtaOrder::ColumnMajor => (ti, tj),
    };
    let cap = u64::from(device.limits.max_workgroups_per_dimension);
    // Swizzle: consecutive workgroups walk `g` tiles along the slow axis
    // before moving along the fast one. Past the tiles there are, that is
    // the same walk with idle workgroups between (7 of 8 for one row of
    // tiles swizzled by 8): `g` stops at the tiles.
    let g = u64::from(p.grid_swizzle_factor).min(s.kernel().loop_(slow).extent);
    let (x, y) = if g > 1 {
        let sp = s.split(slow, &[None, Some(g)], None)?;
        s.reorder(&[sp[0], fast, sp[1]])?;
        (s.fuse(&[fast, sp[1]])?, sp[0])
    } else {
        if slow != ti {
            s.reorder(&[tj, ti])?;
        }
        (fast, slow)
    };
    Ok(match p.tiling_strategy {
        TilingStrategy::OneTilePerWorkgroup => {
            let fixed = p.launch.grid.map(|g| (u64::from(g[0]), u64::from(g[1])));
            bind_capped(
                s,
                y,
                ThreadAxis::WorkgroupY,
                Some(fixed.map_or(cap, |f| f.1)),
            )?;
            bind_capped(
                s,
                x,
                ThreadAxis::WorkgroupX,
                Some(fixed.map_or(cap, |f| f.0)),
            )?
        }
        TilingStrategy::DistributeTilesAcrossWorkgroups => {
            // A persistent grid: each workgroup loops over its share of tiles.
            let tiles = s.fuse(&[y, x])?;
            let n = s.kernel().loop_(tiles).extent;
            let workgroups = p
                .launch
                .grid
                .map_or(u64::from(device.cores.max(1) as u32) * 4, |g| {
                    u64::from(g[0])
                })
                .min(n)
                .min(cap);
            let parts = s.split(tiles, &[None, Some(workgroups)], None)?;
            s.reorder(&[parts[1], parts[0]])?;
            s.bind(parts[1], ThreadAxis::WorkgroupX)?;
            parts[0]
        }
    })
}

/// Stages each cta-tile step of the operands in workgroup memory, copied
/// by the whole workgroup.
pub(super) fn stage_operands(
    s: &mut Schedule,
    p: &MatmulParams,
    plan: &Plan,
    block: BlockId,
    step: LoopId,
) -> Step<()> {
    let operands = buffers_read(s, block, |b| matches!(b.role, Role::Input(_)));
    for (name, vec) in operands
        .iter()
        .zip([p.supported_vec_size.a, p.supported_vec_size.b])
    {
        let copy = s.cache_read(block, name, Scope::Workgroup)?;
        s.compute_at(copy, step)?;
        cooperative(s, plan, copy, vec)?;
    }
    Ok(())
}

/// Circular buffering of the staged operands (see the module docs): the
/// workgroup-memory copies over the k steps (`smem_write`), fragments
/// copied into registers over the instruction-tile k steps (`smem_read`,
/// on GPUs).
pub(super) fn pipeline_operands(
    s: &mut Schedule,
    p: &MatmulParams,
    plan: &Plan,
    block: BlockId,
    step: LoopId,
    fragment_step: LoopId,
) -> Step<()> {
    let cb = &p.circular_buffer_options;
    if cb.smem_read && !plan.simd_lanes {
        for name in buffers_read(s, block, |b| b.scope == Scope::Workgroup) {
            let copy = s.cache_read(block, &name, Scope::Private)?;
            s.compute_at(copy, fragment_step)?;
            for l in own_loops(s, copy)? {
                s.unroll(l)?;
            }
        }
        s.pipeline(fragment_step, 2, 1)?;
        // Unrolled, each step's register buffer is a constant index: a
        // GPU compiler keeps the fragments in registers, not local memory.
        if s.kernel().loop_(fragment_step).extent <= MAX_UNROLLED_FRAGMENT_STEPS {
            s.unroll(fragment_step)?;
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
pub(super) const MAX_UNROLLED_FRAGMENT_STEPS: u64 = 16;

/// The names of the buffers `block` reads that `keep` selects, in order
/// of first read.
pub(super) fn buffers_read(
    s: &Schedule,
    block: BlockId,
    keep: impl Fn(&Buffer) -> bool,
) -> Vec<String> {
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
/// contiguous elements each where the innermost extent allows; with SIMD
/// lanes, a whole row of the tile each (vec4 steps of a tile whose rows
/// are apart in memory took a 256^3 matmul 38 ms with B transposed).
pub(super) fn cooperative(s: &mut Schedule, plan: &Plan, copy: BlockId, vec: u32) -> Step<()> {
    let own = own_loops(s, copy)?;
    let inner = s
        .kernel()
        .loop_(*own.last().expect("a copy has loops"))
        .extent;
    let v = if plan.simd_lanes {
        inner.max(1)
    } else {
        [u64::from(vec), 2, 1]
            .into_iter()
            .find(|&v| v <= u64::from(vec) && inner.is_multiple_of(v))
            .unwrap_or(1)
    };
    let flat = fuse(s, &own)?.expect("loops");
    // As many invocations as there are vectors to copy, no more: a split
    // that overshoots only adds guarded-off work.
    let vectors = s.kernel().loop_(flat).extent.div_ceil(v);
    let x = plan.invocations[0].min(vectors);
    let y = plan.invocations[1].min(vectors.div_ceil(x));
    let parts = s.split(flat, &[None, Some(y), Some(x), Some(v)], None)?;
    s.bind(parts[1], ThreadAxis::InvocationY)?;
    s.bind(parts[2], ThreadAxis::InvocationX)?;
    s.vectorize(parts[3])?;
    Ok(())
}

/// A register tile's block (the accumulators' start, or the store with the
/// epilogue): its rows unrolled, its columns in vectors of `vec` (a few
/// unrolled, or one strip when there are many: SIMD lanes on the CPU).
pub(super) fn store_rows(s: &mut Schedule, rows: &[LoopId], cols: LoopId, vec: u32) -> Step<()> {
    for &r in rows {
        s.unroll(r)?;
    }
    let n = s.kernel().loop_(cols).extent;
    let v = u64::from(vec);
    if v > 1 && n > v && n.is_multiple_of(v) && n / v <= 16 {
        let parts = s.split(cols, &[None, Some(v)], None)?;
        s.unroll(parts[0])?;
        s.vectorize(parts[1])?;
    } else if n <= 16 && v == 1 {
        s.unroll(cols)?;
    } else {
        s.vectorize(cols)?;
    }
    Ok(())
}

/// A later stage (split-k's sum, then the epilogue): flat over the
/// workgroup's invocations; on the CPU device the sum's loop over the
/// slices of k runs outside them, each slice added to a row of lanes.
pub(super) fn flat(s: &mut Schedule, plan: &Plan, b: BlockId) -> Step<()> {
    let block = s.kernel().block(b).clone();
    let loops = s.get_loops(b)?;
    let spatial: Vec<LoopId> = loops
        .iter()
        .zip(&block.iters)
        .filter(|(_, it)| it.kind == IterKind::Spatial)
        .map(|(l, _)| *l)
        .collect();
    let flat = fuse(s, &spatial)?.expect("spatial loops");
    let parts = s.split(flat, &[None, Some(plan.flat_invocations)], None)?;
    bind_capped(s, parts[0], ThreadAxis::WorkgroupX, Some(plan.grid_cap))?;
    s.bind(parts[1], ThreadAxis::InvocationX)?;
    if plan.simd_lanes {
        reduce_outside(s, b, parts[1])?;
    }
    Ok(())
}
