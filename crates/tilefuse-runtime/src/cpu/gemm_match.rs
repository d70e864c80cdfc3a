//! Recognizing the GEMM micro-kernel's loop nest in a kernel.

use tilefuse_ir::{BinaryOp, DType, ReduceOp};
use tilefuse_sched::ir::{BlockId, BufferId, Expr, Index, Kernel, LoopId, Node, Var, flat_offset};

use super::code::{Cut, Dim, GemmCode, Operand};
use super::nest::{block_bounds, in_one_thread, loop_chain};

/// The micro-kernel's call for the loop nest from `node`, if it is one:
/// a chain of loops run in one thread, each the only child of the one
/// before, around one block that accumulates `C += A * B` in f32 (A and B
/// f32, or halves widened to f32: the call widens them) without
/// starting itself (its guards and predicates cut the call short, see
/// [`Nest::cut`]). Each loop of more than one iteration is a k step, a row
/// or a lane loop by what it moves (see [`Role`]); the loops of each role,
/// in any order and split any way, run as one variable would.
///
/// The call runs each element's sums in the nest's order of k, and the
/// elements, which are distinct, in its own order: so the invocation
/// loops of a GPU schedule, which stand outside its k loops, join the
/// call (a workgroup of 8 x 8 invocations of 4 x 4 elements with k steps
/// of 4 ran 64 calls of 4 x 4 a step: 256^3 took 17 ms, 80x the default
/// params' time). A nest does not start at a k loop with another k loop
/// inside: that is the tile's k step, whose blocking keeps the rows of B
/// a call reads in cache (1 x 4096 x 4096 in one call per workgroup took
/// 3.1 ms, in one call per k step of 128 2.7 ms).
pub(super) fn gemm_code(kernel: &Kernel, node: &Node) -> Option<GemmCode> {
    let mut units = Vec::new();
    let (chain, id) = loop_chain(kernel, std::slice::from_ref(node), &mut units)?;
    let all = chain
        .iter()
        .copied()
        .chain(units.iter().map(|&u| LoopId(u as u32)));
    if !all.clone().all(|j| in_one_thread(kernel, j)) || !accumulates(kernel, id) {
        return None;
    }
    let block = kernel.block(id);
    let Expr::Binary(BinaryOp::Mul, x, y) = &block.value else {
        return None;
    };
    let (Some((xb, xi)), Some((yb, yi))) = (load(kernel, x), load(kernel, y)) else {
        return None;
    };
    let loops: Vec<usize> = all.map(|j| j.0 as usize).collect();
    let offset = |buffer: BufferId, indices: &[Index]| {
        let flat = flat_offset(indices, &kernel.buffer(buffer).shape);
        kernel.offset_over_loops(block, &flat)
    };
    let c = offset(block.buffer, &block.indices);
    let (x, y) = ((xb, offset(xb, xi)), (yb, offset(yb, yi)));
    [(&x, &y), (&y, &x)].into_iter().find_map(|(a, b)| {
        let nest = Nest::read(kernel, &chain, id, &c, a, b)?;
        nest.code(kernel, loops.clone())
    })
}

/// Whether block `id` accumulates a sum in f32 without starting it.
fn accumulates(kernel: &Kernel, id: BlockId) -> bool {
    let block = kernel.block(id);
    block.reduce == Some(ReduceOp::Sum)
        && !block.init
        && kernel.buffer(block.buffer).dtype == DType::F32
}

/// A load of an f32 buffer, or of a half one widened to f32.
fn load<'e>(kernel: &Kernel, e: &'e Expr) -> Option<(BufferId, &'e [Index])> {
    let (Expr::Load { buffer, indices }, widened) = (match e {
        Expr::Cast(DType::F32, x) => (&**x, true),
        x => (x, false),
    }) else {
        return None;
    };
    let dtype = kernel.buffer(*buffer).dtype;
    let taken = if widened {
        dtype.is_half()
    } else {
        dtype == DType::F32
    };
    taken.then_some((*buffer, indices))
}

/// What a loop of the nest moves: C and A (a row), C and B (a lane), or
/// A and B (a k step).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Lanes = 0,
    Rows = 1,
    K = 2,
}

/// A reading of the nest with one load as A and the other as B: each
/// loop's role, and its multiplier (what one step of it counts in its
/// role's variable: the extents of the loops of that role inside it).
struct Nest {
    loops: Vec<(LoopId, Role, i64)>,
    extents: [i64; 3],
    block: BlockId,
    c: Index,
    a: (BufferId, Index),
    b: (BufferId, Index),
}

impl Nest {
    /// The nest of `chain` around block `id`, reading A and B at
    /// `a` and `b` (buffers and offsets over loops) and C at `c`.
    fn read(
        kernel: &Kernel,
        chain: &[LoopId],
        id: BlockId,
        c: &Index,
        a: &(BufferId, Index),
        b: &(BufferId, Index),
    ) -> Option<Nest> {
        let (a_at, b_at) = (&a.1, &b.1);
        let mut roles = Vec::new();
        for &j in chain {
            let moves = |x: &Index| x.linear_in(Var::Loop(j)).map(|(s, _)| s != 0);
            roles.push(match (moves(c)?, moves(a_at)?, moves(b_at)?) {
                (true, true, false) => Role::Rows,
                (true, false, true) => Role::Lanes,
                (false, true, true) => Role::K,
                _ => return None,
            });
        }
        // Of two k loops, the outer is the tile's k step when it is the
        // nest's outermost loop: the nest starts further in.
        if roles.first() == Some(&Role::K) && roles[1..].contains(&Role::K) {
            return None;
        }
        let mut extents = [1i64; 3];
        let mut loops = vec![(LoopId(0), Role::K, 0); chain.len()];
        for (i, (&j, &role)) in chain.iter().zip(&roles).enumerate().rev() {
            loops[i] = (j, role, extents[role as usize]);
            extents[role as usize] *= kernel.loop_(j).extent as i64;
        }
        Some(Nest {
            loops,
            extents,
            block: id,
            c: c.clone(),
            a: a.clone(),
            b: b.clone(),
        })
    }

    /// The call, when the operands are distinct matrices that move as the
    /// micro-kernel reads them and every bound cuts one of its loops.
    fn code(self, kernel: &Kernel, loops: Vec<usize>) -> Option<GemmCode> {
        let [lanes, rows, k] = self.extents;
        let c_id = kernel.block(self.block).buffer;
        let operand = |buffer: BufferId, x: &Index| {
            let ([per_lane, per_row, per_k], offset) = self.strides(x, &loops)?;
            Some(Operand {
                buffer: buffer.0 as usize,
                offset,
                per_row,
                per_k,
                per_lane,
            })
        };
        let (c, a, b) = (
            operand(c_id, &self.c)?,
            operand(self.a.0, &self.a.1)?,
            operand(self.b.0, &self.b.1)?,
        );
        let distinct = self.a.0 != c_id && self.b.0 != c_id;
        let forward = a.per_k >= 0 && b.per_k >= 0 && a.per_row >= 0 && b.per_lane >= 1;
        // Rows of C that do not overlap (each is held in registers on its
        // own).
        let apart = c.per_row >= 0 && (rows == 1 || c.per_row >= lanes);
        if !(distinct && c.per_lane == 1 && forward && apart) {
            return None;
        }
        let cuts = block_bounds(kernel, self.block)
            .map(|(x, bound)| self.cut(kernel, &x, bound, &loops))
            .collect::<Option<Vec<_>>>()?;
        Some(GemmCode {
            cuts,
            k,
            rows,
            lanes,
            loops,
            c,
            a,
            b,
        })
    }

    /// How the block's guard or predicate `x < bound` cuts the call short:
    /// when `x` moves one a step with one of its variables alone (a ragged
    /// edge: `m` not a multiple of the rows, `k` of the k step), or with
    /// none (a workgroup past the edge, as swizzled grids have).
    fn cut(&self, kernel: &Kernel, x: &Index, bound: i64, loops: &[usize]) -> Option<Cut> {
        let (strides, start) = self.strides(&kernel.within_loops(x), loops)?;
        let dim = match strides {
            [1, 0, 0] => Dim::Lanes,
            [0, 1, 0] => Dim::Rows,
            [0, 0, 1] => Dim::K,
            [0, 0, 0] => Dim::Whole,
            _ => return None,
        };
        Some(Cut { dim, start, bound })
    }

    /// `x`'s strides per lane, row and k step, when the loops of each role
    /// move it as one variable would, and its value with the nest's
    /// `loops` at 0.
    fn strides(&self, x: &Index, loops: &[usize]) -> Option<([i64; 3], Index)> {
        let mut unit: [Option<i64>; 3] = [None; 3];
        let mut rest = x.clone();
        for &(j, role, multiplier) in self.loops.iter().rev() {
            let (s, r) = rest.linear_in(Var::Loop(j))?;
            let per = *unit[role as usize].get_or_insert(s);
            if s != per * multiplier {
                return None;
            }
            rest = r;
        }
        let rest = rest.subst(&|v| match v {
            Var::Loop(l) if loops.contains(&(l.0 as usize)) => Some(Index::Const(0)),
            _ => None,
        });
        Some((unit.map(|u| u.unwrap_or(0)), rest))
    }
}

#[cfg(test)]
pub(super) mod tests {
    use tilefuse_params::HeuristicParams;
    use tilefuse_schedulers::{heuristics, schedule};

    use super::super::code::Step;
    use super::super::compile::compiled;

    /// Rows, lanes and k steps of each micro-kernel call in the steps.
    fn gemm_calls(steps: &[Step], out: &mut Vec<[i64; 3]>) {
        for step in steps {
            match step {
                Step::Gemm(g) => out.push([g.rows, g.lanes, g.k]),
                Step::Loop { body, .. } => gemm_calls(body, out),
                _ => {}
            }
        }
    }

    /// Rows, lanes and k steps of each micro-kernel call `schedule` makes
    /// on the CPU.
    fn gemm_calls_of(schedule: &tilefuse_sched::Schedule) -> Vec<[i64; 3]> {
        let mut calls = Vec::new();
        gemm_calls(&compiled(schedule), &mut calls);
        calls
    }

    /// Rows of each micro-kernel call `schedule` makes on the CPU.
    fn gemm_rows_of(schedule: &tilefuse_sched::Schedule) -> Vec<i64> {
        gemm_calls_of(schedule).iter().map(|c| c[0]).collect()
    }

    /// On two cores the default matmul params give workgroups of 128 rows
    /// (and 128 columns), invocations of 8: one call takes all 128 for
    /// each k step, so that B's rows of the step are read once a workgroup.
    #[test]
    fn a_call_takes_every_invocation_of_a_workgroup() {
        let f = tilefuse_testing::matmul(256, 256, 256);
        let mut info = crate::Device::cpu().info();
        info.cores = 2;
        let params = heuristics(&f, None, &info).unwrap();
        let rows = gemm_rows_of(&schedule(&f, &params, &info).unwrap());
        assert_eq!(rows, [128]);
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

    /// Workgroups of 8 x 8 invocations of 4 x 4 elements, k steps of 16
    /// split by 4 within an invocation: the invocations and the split k
    /// run as one call of the tile's 32 rows, 32 lanes and 16 k steps (64
    /// calls of 4 x 4 x 4 a step took 17 ms for 256^3). The tile's k step
    /// stays outside the call.
    #[test]
    fn invocations_outside_the_k_loops_join_the_call() {
        let f = tilefuse_testing::matmul(64, 96, 80);
        let params = defaults(&f)
            .with("tile_sizes", invocations_of_4x4())
            .unwrap();
        let s = schedule(&f, &params, &crate::Device::cpu().info()).unwrap();
        assert_eq!(gemm_calls_of(&s), [[32, 32, 16]]);
        takes_the_micro_kernel(&f, &params, "4 x 4 invocations");
    }

    /// Tiles of 32 x 32 x 16 in invocations of 4 x 4 x 4.
    pub(in super::super) fn invocations_of_4x4() -> serde_json::Value {
        let tile = |m, n, k| serde_json::json!({"m": m, "n": n, "k": k});
        serde_json::json!({
            "cta_tile": tile(32, 32, 16),
            "warp_tile": tile(32, 32, 16),
            "instruction_tile": tile(4, 4, 4),
        })
    }

    /// `q @ k.T`: B moves 64 elements a lane, and still runs through the
    /// micro-kernel (packed first).
    #[test]
    fn a_transposed_b_takes_the_micro_kernel() {
        let f = tilefuse_testing::matmul_transposed(96, 80, 64, false, true);
        takes_the_micro_kernel(&f, &defaults(&f), "q @ k.T");
    }

    /// f16 and bf16 operands (plain, transposed either way, ragged) run
    /// through the micro-kernel, widened a call at a time (the tape path
    /// took 660 ms for a 1024^3 bf16 matmul, 30x the f32 time).
    #[test]
    fn half_operands_take_the_micro_kernel() {
        use tilefuse_ir::DType;
        use tilefuse_testing::{in_dtype, matmul, matmul_transposed};
        for dtype in [DType::F16, DType::BF16] {
            for (what, f) in [
                ("plain", matmul(61, 48, 37)),
                ("a.T", matmul_transposed(40, 33, 24, true, false)),
                ("b.T", matmul_transposed(96, 80, 64, false, true)),
            ] {
                let f = in_dtype(&f, dtype);
                takes_the_micro_kernel(&f, &defaults(&f), &format!("{what} {dtype}"));
            }
        }
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
