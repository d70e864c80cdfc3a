//! Recognizing the GEMM micro-kernel's loop nest in a kernel.

use tilefuse_ir::{DType, ReduceOp};
use tilefuse_sched::ir::{BlockId, BufferId, Expr, Index, Kernel, LoopId, Node, Var, flat_offset};

use super::code::{Counted, Cut, Dim, GemmCode, Operand};
use super::nest::{block_bounds, in_one_thread, is_serial, loop_chain, through_units};

/// The micro-kernel's loop nest under loop `l`: its own (see [`micro`]),
/// or one under a loop over groups of its rows (see [`grouped`]).
pub(super) fn gemm_code(kernel: &Kernel, l: LoopId, body: &[Node]) -> Option<GemmCode> {
    grouped(kernel, l, body).or_else(|| micro(kernel, l, body))
}

/// A loop `g` run in one thread (an invocation loop) around the
/// micro-kernel's nest, when `g` moves C and A on by the nest's rows and
/// leaves B: one call then takes every group's rows, so that it reads
/// each part of B once for all of them (`gemm::update`). The order of the
/// sums into each element of C stays as written: only the groups, which
/// write disjoint rows, run interleaved.
fn grouped(kernel: &Kernel, g: LoopId, body: &[Node]) -> Option<GemmCode> {
    let mut units = Vec::new();
    let Node::Loop(k, k_body) = through_units(kernel, body, &mut units)? else {
        return None;
    };
    if !in_one_thread(kernel, g) {
        return None;
    }
    let mut code = micro(kernel, *k, k_body)?;
    let var = Var::Loop(g);
    let rows = code.rows.extent;
    let per_row = |op: &Operand| {
        let (per_group, _) = op.offset.linear_in(var)?;
        match rows {
            1 => Some(per_group),
            _ => (per_group == rows * op.per_row).then_some(op.per_row),
        }
    };
    (code.c.per_row, code.a.per_row) = (per_row(&code.c)?, per_row(&code.a)?);
    for cut in &code.cuts {
        let per_group = cut.start.linear_in(var)?.0;
        let expected = if cut.dim == Dim::Rows { rows } else { 0 };
        if per_group != expected {
            return None;
        }
    }
    code.rows.extent *= kernel.loop_(g).extent as i64;
    code.units.extend(units);
    code.units.push(g.0 as usize);
    (code.b.offset.linear_in(var)?.0 == 0 && code.rows_apart()).then_some(code)
}

/// The micro-kernel's loop nest under loop `k`, if `body` is one: a serial
/// loop over at most `gemm::MAX_ROWS` rows `r`, then serial loops over lanes `j` with one
/// block that accumulates (without starting itself; its guards and
/// predicates cut the loops short, see `MicroNest::cut`) `C += A * B` in f32, where C moves with `r` and one step per `j` but not with `k`,
/// A with `r` and `k` but not `j`, and B with `k` and one step per `j` but
/// not `r`.
fn micro(kernel: &Kernel, k: LoopId, body: &[Node]) -> Option<GemmCode> {
    (MicroNest::find(kernel, k, body).into_iter()).find_map(|nest| micro_of(kernel, nest))
}

/// The micro-kernel's call for one reading of the nest (see [`micro`]).
fn micro_of(kernel: &Kernel, nest: MicroNest) -> Option<GemmCode> {
    let k = nest.k;
    let block = kernel.block(nest.block);
    let Expr::Binary(tilefuse_ir::BinaryOp::Mul, x, y) = &block.value else {
        return None;
    };
    let (
        Expr::Load {
            buffer: xb,
            indices: xi,
        },
        Expr::Load {
            buffer: yb,
            indices: yi,
        },
    ) = (&**x, &**y)
    else {
        return None;
    };
    let c = nest.operand(kernel, block.buffer, &block.indices)?;
    let (a, b) = match (
        nest.operand(kernel, *xb, xi)?,
        nest.operand(kernel, *yb, yi)?,
    ) {
        (p, q) | (q, p) if p.per_lane == 0 && q.per_lane >= 1 => (p, q),
        _ => return None,
    };
    let (c_id, a_id, b_id) = (block.buffer.0 as usize, a.buffer, b.buffer);
    let f32s = |b: usize| kernel.buffer(BufferId(b as u32)).dtype == DType::F32;
    let distinct = a_id != c_id && b_id != c_id;
    if !(distinct && f32s(a_id) && f32s(b_id) && c.per_lane == 1 && c.per_k == 0 && b.per_row == 0)
    {
        return None;
    }
    if a.per_k < 0 || b.per_k < 0 {
        return None;
    }
    let cuts = block_bounds(kernel, nest.block)
        .map(|(x, bound)| nest.cut(kernel, &x, bound))
        .collect::<Option<Vec<_>>>()?;
    let code = GemmCode {
        cuts,
        k: Counted::of(kernel, k),
        rows: Counted::of(kernel, nest.r),
        lanes: Counted {
            var: nest.lanes[0].0 as usize,
            extent: nest
                .lanes
                .iter()
                .map(|&j| kernel.loop_(j).extent as i64)
                .product(),
        },
        units: nest.units,
        c,
        a,
        b,
    };
    code.rows_apart().then_some(code)
}

impl GemmCode {
    /// Rows of C that do not overlap (each is held in registers on its
    /// own), and rows of A and C in ascending order.
    fn rows_apart(&self) -> bool {
        let (c, a) = (&self.c, &self.a);
        c.per_row >= 0
            && a.per_row >= 0
            && (self.rows.extent == 1 || c.per_row >= self.lanes.extent)
    }
}

/// The micro-kernel's loops: `k`, then rows `r`, then lanes around one
/// accumulating block; `units` are the loops of one iteration between and
/// the lane loops but the outermost (whose variable counts the lanes).
struct MicroNest {
    k: LoopId,
    r: LoopId,
    /// A chain of loops, outermost first, that every access runs through
    /// as one (a GPU schedule's columns, split into unrolled vec4s).
    lanes: Vec<LoopId>,
    block: BlockId,
    units: Vec<usize>,
}

impl MicroNest {
    /// The readings of the nest under `k` as the micro-kernel's, when its
    /// loops are serial, it has at most `gemm::MAX_ROWS` rows, and its
    /// block accumulates a product in f32 without starting itself or split
    /// predicates. Rows are the first loop under `k` of more than one
    /// iteration, the lanes the chain under it; or, for rows of one (an
    /// instruction tile of one row), rows are one of the loops of one
    /// iteration before the lanes, the lanes the chain from that first
    /// loop (they were interpreted: a 128 x 256 x 256 matmul in
    /// invocations of one row and 16 columns took 320 ms, not 0.2).
    fn find(kernel: &Kernel, k: LoopId, body: &[Node]) -> Vec<MicroNest> {
        let mut found = Vec::new();
        if !is_serial(kernel, k) {
            return found;
        }
        let mut before = Vec::new();
        let Some(Node::Loop(r, r_body)) = through_units(kernel, body, &mut before) else {
            return found;
        };
        let mut units = before.clone();
        if let Some((lanes, id)) = loop_chain(kernel, r_body, &mut units) {
            found.extend(MicroNest::new(kernel, k, *r, lanes, id, units));
        }
        let mut units = Vec::new();
        if let Some((lanes, id)) = loop_chain(kernel, body, &mut units) {
            for &one in &before {
                let others = units.iter().copied().filter(|&u| u != one).collect();
                let r = LoopId(one as u32);
                found.extend(MicroNest::new(kernel, k, r, lanes.clone(), id, others));
            }
        }
        found
    }

    /// The nest of rows `r` and `lanes` around block `id` under `k`, if
    /// the micro-kernel can run it.
    fn new(
        kernel: &Kernel,
        k: LoopId,
        r: LoopId,
        lanes: Vec<LoopId>,
        id: BlockId,
        mut units: Vec<usize>,
    ) -> Option<MicroNest> {
        let serial = |l| is_serial(kernel, l);
        if lanes.is_empty() {
            return None;
        }
        units.extend(lanes[1..].iter().map(|j| j.0 as usize));
        let rows = kernel.loop_(r).extent;
        if !serial(r) || !lanes.iter().all(|&j| serial(j)) || rows > super::gemm::MAX_ROWS as u64 {
            return None;
        }
        let block = kernel.block(id);
        if block.reduce != Some(ReduceOp::Sum)
            || block.init
            || kernel.buffer(block.buffer).dtype != DType::F32
        {
            return None;
        }
        Some(MicroNest {
            k,
            r,
            lanes,
            block: id,
            units,
        })
    }

    /// `offset`'s stride per lane and the rest of it, when the lane loops
    /// move it as one loop would: each outer loop's stride is the next
    /// inner one's times that loop's extent.
    fn lane_stride(&self, kernel: &Kernel, offset: Index) -> Option<(i64, Index)> {
        let (mut per_lane, mut next, mut rest) = (None, 0, offset);
        for &j in self.lanes.iter().rev() {
            let (s, r) = rest.linear_in(Var::Loop(j))?;
            if per_lane.is_some() && s != next {
                return None;
            }
            per_lane.get_or_insert(s);
            (next, rest) = (s * kernel.loop_(j).extent as i64, r);
        }
        Some((per_lane?, rest))
    }

    /// How the block's guard or predicate `x < bound` cuts the nest
    /// short: when `x` moves with one of its loops alone, one a step (a
    /// ragged edge: `m` not a multiple of the rows, `k` of the k step), or
    /// with none (a workgroup past the edge, as swizzled grids have).
    fn cut(&self, kernel: &Kernel, x: &Index, bound: i64) -> Option<Cut> {
        let (strides, start) = self.strides(kernel, x)?;
        let dim = match strides {
            [1, 0, 0] => Dim::Lanes,
            [0, 1, 0] => Dim::Rows,
            [0, 0, 1] => Dim::K,
            [0, 0, 0] => Dim::Whole,
            _ => return None,
        };
        Some(Cut { dim, start, bound })
    }

    /// `x`'s strides per lane, per row and per `k`, and its value with
    /// those loops and the units at 0.
    fn strides(&self, kernel: &Kernel, x: &Index) -> Option<([i64; 3], Index)> {
        let x = kernel.within_loops(x);
        let (sj, rest) = self.lane_stride(kernel, x)?;
        let (sr, rest) = rest.linear_in(Var::Loop(self.r))?;
        let (sk, rest) = rest.linear_in(Var::Loop(self.k))?;
        let rest = rest.subst(&|v| match v {
            Var::Loop(l) if self.units.contains(&(l.0 as usize)) => Some(Index::Const(0)),
            _ => None,
        });
        Some(([sj, sr, sk], rest))
    }

    /// An access's strides per row, per `k` and per lane, and its offset
    /// with those loops at 0.
    fn operand(&self, kernel: &Kernel, buffer: BufferId, indices: &[Index]) -> Option<Operand> {
        let offset = (kernel.block(self.block))
            .over_loops(&[flat_offset(indices, &kernel.buffer(buffer).shape)])
            .remove(0);
        let ([sj, sr, sk], rest) = self.strides(kernel, &offset)?;
        Some(Operand {
            buffer: buffer.0 as usize,
            offset: rest,
            per_row: sr,
            per_k: sk,
            per_lane: sj,
        })
    }
}

#[cfg(test)]
mod tests {
    use tilefuse_params::HeuristicParams;
    use tilefuse_schedulers::{heuristics, schedule};

    use super::super::code::Step;
    use super::super::compile::compiled;

    /// Rows of each micro-kernel call in the steps.
    fn gemm_rows(steps: &[Step], out: &mut Vec<i64>) {
        for step in steps {
            match step {
                Step::Gemm(g) => out.push(g.rows.extent),
                Step::Loop { body, .. } => gemm_rows(body, out),
                _ => {}
            }
        }
    }

    /// Rows of each micro-kernel call `schedule` makes on the CPU.
    fn gemm_rows_of(schedule: &tilefuse_sched::Schedule) -> Vec<i64> {
        let mut rows = Vec::new();
        gemm_rows(&compiled(schedule), &mut rows);
        rows
    }

    /// On two cores the default matmul params give workgroups of 64 rows,
    /// invocations of 8: one call takes all 64 for each k step, so that
    /// B's rows of the step are read once a workgroup.
    #[test]
    fn a_call_takes_every_invocation_of_a_workgroup() {
        let f = tilefuse_testing::matmul(256, 256, 256);
        let mut info = crate::Device::cpu().info();
        info.cores = 2;
        let params = heuristics(&f, None, &info).unwrap();
        let rows = gemm_rows_of(&schedule(&f, &params, &info).unwrap());
        assert_eq!(rows, [64]);
    }

    /// Asserts that `f` scheduled with `params` on the CPU runs through the
    /// micro-kernel and gives the reference's result.
    fn takes_the_micro_kernel(f: &tilefuse_ir::Fusion, params: &HeuristicParams, what: &str) {
        use tilefuse_ir::evaluate;
        use tilefuse_testing::{compare, inputs};
        let device = crate::Device::cpu();
        let schedule = schedule(f, params, &device.info()).unwrap();
        assert!(
            !gemm_rows_of(&schedule).is_empty(),
            "{what}: no micro-kernel call"
        );
        let x = inputs(f, 9);
        let got = device.build(&schedule).unwrap().run(&x).unwrap();
        compare(&evaluate(f, &x).unwrap(), &got, 1e-5).unwrap();
    }

    /// Default params on this machine's CPU device.
    fn defaults(f: &tilefuse_ir::Fusion) -> HeuristicParams {
        heuristics(f, None, &crate::Device::cpu().info()).unwrap()
    }

    /// Ragged edges (`m` not a multiple of an invocation's 8 rows, `k` not
    /// one of the k step) cut the micro-kernel's loops short instead of
    /// leaving the nest to the interpreter (256 x 256 x 1000 took 440 ms,
    /// 700x numpy's time).
    #[test]
    fn ragged_edges_take_the_micro_kernel() {
        for (m, n, k) in [(250, 256, 1000), (61, 48, 37), (9, 33, 130), (3, 5, 7)] {
            let f = tilefuse_testing::matmul(m, n, k);
            takes_the_micro_kernel(&f, &defaults(&f), &format!("{m}x{n}x{k}"));
        }
    }

    /// Invocations of 16 columns: the scheduler splits them into unrolled
    /// vec4s, and the two loops still run as one call's lanes (they were
    /// interpreted: 3.9 s at 512^3, now 7 ms).
    #[test]
    fn columns_split_into_vectors_take_the_micro_kernel() {
        let f = tilefuse_testing::matmul(48, 64, 32);
        let params = defaults(&f)
            .with("tile_sizes.instruction_tile.n", 16.into())
            .unwrap();
        takes_the_micro_kernel(&f, &params, "16 columns");
    }

    /// Invocations of one row (the rows loop has one iteration), alone and
    /// with columns split into vectors, with a ragged `m` and `k`.
    #[test]
    fn rows_of_one_take_the_micro_kernel() {
        let f = tilefuse_testing::matmul(37, 48, 40);
        for n in [None, Some(16)] {
            let mut params = defaults(&f)
                .with("tile_sizes.instruction_tile.m", 1.into())
                .unwrap();
            if let Some(n) = n {
                params = params
                    .with("tile_sizes.instruction_tile.n", n.into())
                    .unwrap();
            }
            takes_the_micro_kernel(&f, &params, &format!("one row, {n:?} columns"));
        }
    }

    /// `q @ k.T`: B moves 64 elements a lane, and still runs through the
    /// micro-kernel (packed first).
    #[test]
    fn a_transposed_b_takes_the_micro_kernel() {
        use tilefuse_ir::{DType, Fusion};
        let mut f = Fusion::new();
        let q = f.input(&[96, 64], DType::F32, Some("q")).unwrap();
        let k = f.input(&[80, 64], DType::F32, Some("k")).unwrap();
        let s = f.matmul(q, k, false, true).unwrap();
        f.output(s).unwrap();
        takes_the_micro_kernel(&f, &defaults(&f), "q @ k.T");
    }

    /// A swizzled grid over more rows of tiles than there are
    /// (`grid_swizzle_factor` 4 over 2): the workgroups past the edge fail
    /// a predicate that none of the nest's loops move, and skip the call
    /// (the nest was interpreted: a 16 x 513 x 513 matmul took 3.3 s).
    #[test]
    fn a_swizzled_grid_takes_the_micro_kernel() {
        let f = tilefuse_testing::matmul(16, 100, 40);
        let params = defaults(&f).with("grid_swizzle_factor", 4.into()).unwrap();
        takes_the_micro_kernel(&f, &params, "swizzled");
    }
}
