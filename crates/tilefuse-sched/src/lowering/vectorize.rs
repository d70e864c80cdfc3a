//! Vec4 legality: which vectorized loops run as one `vec4<f32>` step, and
//! which buffers their contiguous accesses need declared as
//! `array<vec4<f32>>`. A vectorized loop that does not qualify stays a
//! loop.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Display};

use tilefuse_ir::DType;

use super::{LowerError, Lowered};
use crate::ir::{self, BlockId, BufferId, Index, Kernel, LoopId, LoopKind, Node, Scope, Var};

/// The vectorized loops run as one `vec4` step and the buffers declared as
/// `vec4` arrays.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Vectors {
    pub loops: BTreeMap<LoopId, VecStep>,
    pub buffers: BTreeSet<BufferId>,
}

/// A loop run as one `vec4` step: its one block, and for each of the
/// block's loads (in `Expr::loads` order) whether it reads four
/// contiguous elements (`true`) or one element for all lanes (`false`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VecStep {
    pub block: BlockId,
    pub contiguous: Vec<bool>,
}

pub(super) fn run(l: &mut Lowered) -> Result<(), LowerError> {
    let mut v = Vectors::default();
    walk(&l.kernel, &l.kernel.body, &mut v);
    l.vectors = v;
    Ok(())
}

/// Vectorized loops of extent 4 over a single f32 block that can run as
/// one `vec4<f32>` step: contiguous aligned or uniform loads, a contiguous
/// aligned store or accumulation into global or private memory, no guard,
/// no first-iteration start, no cast.
fn walk(k: &Kernel, nodes: &[Node], v: &mut Vectors) {
    for n in nodes {
        let Node::Loop(l, body) = n else { continue };
        walk(k, body, v);
        let lp = k.loop_(*l);
        let [Node::Block(b)] = body.as_slice() else {
            continue;
        };
        if lp.kind != LoopKind::Vectorized || lp.extent != 4 {
            continue;
        }
        let block = k.block(*b);
        let vec_buffer = |buf: BufferId| {
            let x = k.buffer(buf);
            x.dtype == DType::F32 && x.scope != Scope::Workgroup && x.numel().is_multiple_of(4)
        };
        let mut found = Found {
            contiguous: vec![block.buffer],
            steps: Vec::new(),
        };
        // A reduction's lanes accumulate independently once it no longer
        // starts itself (decompose_reduction).
        let ok = (block.reduce.is_none() || !block.init)
            && k.needs_guard(*b).is_empty()
            && k.live_predicates(*b).is_empty()
            && vec_buffer(block.buffer)
            && lane_step(k, block, block.buffer, &block.indices, *l) == Some(1)
            && vector_ok(k, block, &block.value, *l, false, &mut found)
            && found.contiguous.iter().all(|&buf| vec_buffer(buf));
        if ok {
            let step = VecStep {
                block: *b,
                contiguous: found.steps,
            };
            v.loops.insert(*l, step);
            v.buffers.extend(found.contiguous);
        }
    }
}

/// What [`vector_ok`] found: the buffers accessed contiguously, and each
/// load's step so far.
struct Found {
    contiguous: Vec<BufferId>,
    steps: Vec<bool>,
}

/// Whether `e` has a `vec4` form (`cond`: it is a `select` condition, the
/// only place a comparison may appear). Visits loads in `Expr::loads`
/// order.
fn vector_ok(
    k: &Kernel,
    b: &ir::Block,
    e: &ir::Expr,
    l: LoopId,
    cond: bool,
    found: &mut Found,
) -> bool {
    let mut ok = |x: &ir::Expr, cond: bool| vector_ok(k, b, x, l, cond, found);
    match e {
        ir::Expr::Const { dtype, .. } => *dtype == DType::F32 && !cond,
        ir::Expr::Load { buffer, indices } => {
            let step = lane_step(k, b, *buffer, indices, l);
            if step == Some(1) {
                found.contiguous.push(*buffer);
            }
            found.steps.push(step == Some(1));
            !cond && k.buffer(*buffer).dtype == DType::F32 && step.is_some()
        }
        ir::Expr::Unary(_, a) => !cond && ok(a, false),
        ir::Expr::Binary(op, x, y) => cond == op.is_comparison() && ok(x, false) && ok(y, false),
        ir::Expr::Select(c, x, y) => !cond && ok(c, true) && ok(x, false) && ok(y, false),
        ir::Expr::Cast(..) => false,
    }
}

/// How an access's element offset moves with loop `l`: `Some(c)` when it
/// is `c * l + rest`, where for `c == 1` `rest` is provably a multiple of 4
/// (lane 0 starts a `vec4`); `None` otherwise.
fn lane_step(
    kernel: &Kernel,
    block: &ir::Block,
    buffer: BufferId,
    indices: &[Index],
    l: LoopId,
) -> Option<i64> {
    let offset = ir::flat_offset(indices, &kernel.buffer(buffer).shape);
    let offset = kernel.offset_over_loops(block, &offset);
    let (c, rest) = offset.linear_in(Var::Loop(l))?;
    (c == 0 || (c == 1 && multiple_of_4(&rest))).then_some(c)
}

fn multiple_of_4(ix: &Index) -> bool {
    match ix {
        Index::Const(c) => c % 4 == 0,
        Index::Add(a, b) => multiple_of_4(a) && multiple_of_4(b),
        Index::Mul(a, c) => c % 4 == 0 || multiple_of_4(a),
        Index::Var(_) | Index::Div(..) | Index::Mod(..) => false,
    }
}

impl Vectors {
    /// `# vec4: ...` lines naming the loops and buffers (none when empty).
    pub fn display<'a>(&'a self, k: &'a Kernel) -> impl Display + 'a {
        struct Show<'a>(&'a Vectors, &'a Kernel);
        impl Display for Show<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let Show(v, k) = self;
                for (l, step) in &v.loops {
                    let (lp, block) = (k.loop_(*l), k.block(step.block));
                    writeln!(f, "# vec4: loop {} (block {})", lp.name, block.name)?;
                }
                if !v.buffers.is_empty() {
                    let names: Vec<&str> = v
                        .buffers
                        .iter()
                        .map(|&b| k.buffer(b).name.as_str())
                        .collect();
                    writeln!(f, "# vec4 buffers: {}", names.join(", "))?;
                }
                Ok(())
            }
        }
        Show(self, k)
    }
}
