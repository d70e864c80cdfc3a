//! Kernel IR → WGSL. Each root loop nest of the kernel becomes one entry
//! point (`stage0`, `stage1`, ...) dispatched in order; global buffers are
//! storage bindings numbered once for the whole module.
//!
//! Loops bound to `workgroup.*` / `invocation.*` read `workgroup_id` /
//! `local_invocation_id` (guarded when their extent is less than the
//! dispatch or workgroup size); other loops are `for` loops, unrolled ones
//! are repeated. Where sibling subtrees hand data to each other across
//! invocations, a barrier of the memory they share separates them (`sync`).

use std::collections::{HashMap, HashSet};

use tilefuse_ir::{BinaryOp, DType, ReduceOp, Scalar as Value, UnaryOp, reduce_identity};

use super::ast::{Access, EntryPoint, Expr, Module, Scalar, Stmt, StorageBinding, WorkgroupArray};
use super::sync;
use crate::PrivateMemory;
use crate::ir::{
    self, BlockId, BufferId, CrossInvocation, Index, Kernel, LoopId, LoopKind, Node, Role, Scope,
    Var, flat_offset,
};
use crate::schedule::ScheduleError;

const MATH: &str = include_str!("../../../../shaders/math.wgsl");

/// One storage binding of the generated module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindingInfo {
    pub binding: u32,
    pub buffer: BufferId,
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<u64>,
    /// `true` when some stage writes the buffer.
    pub writes: bool,
    pub role: Role,
}

/// One dispatch: an entry point, its grid and the bindings it uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageInfo {
    pub entry_point: String,
    pub workgroups: [u32; 3],
    pub workgroup_size: [u32; 3],
    pub bindings: Vec<u32>,
    /// Most `for`-loop iterations one invocation runs (some drivers cap it).
    pub loop_iterations: u64,
    /// Bytes of `var<workgroup>` arrays the stage uses.
    pub workgroup_bytes: u64,
    /// Lanes (invocation.x) of its widest subgroup reduction (0 for none):
    /// the device needs subgroups at least this large.
    pub subgroup_lanes: u64,
}

/// A kernel as WGSL, with what a WebGPU host needs to run it.
#[derive(Clone, Debug, PartialEq)]
pub struct WgslKernel {
    pub source: String,
    pub bindings: Vec<BindingInfo>,
    pub stages: Vec<StageInfo>,
}

/// Generates the WGSL module of `kernel`.
pub fn generate(kernel: &Kernel) -> Result<WgslKernel, ScheduleError> {
    emit(kernel, true)
}

/// What each dispatch of `kernel` needs (grid, workgroup size, loop
/// iterations, workgroup memory) without writing the WGSL: for limit checks
/// before a kernel is built.
pub fn stages(kernel: &Kernel) -> Result<Vec<StageInfo>, ScheduleError> {
    emit(kernel, false).map(|k| k.stages)
}

/// The module, or with `bodies` off only its bindings and stage infos.
fn emit(kernel: &Kernel, bodies: bool) -> Result<WgslKernel, ScheduleError> {
    let kernel = &crate::realize(kernel, PrivateMemory::PerInvocation)?;
    let live = kernel.live_buffers();
    let globals: Vec<BufferId> = live
        .iter()
        .copied()
        .filter(|&b| kernel.buffer(b).scope == Scope::Global)
        .collect();
    let written: Vec<BufferId> = kernel
        .blocks_in_order()
        .iter()
        .map(|&b| kernel.block(b).buffer)
        .collect();
    let bindings: Vec<BindingInfo> = globals
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            let buf = kernel.buffer(b);
            BindingInfo {
                binding: i as u32,
                buffer: b,
                name: buf.name.clone(),
                dtype: buf.dtype,
                shape: buf.shape.clone(),
                writes: written.contains(&b),
                role: buf.role,
            }
        })
        .collect();
    let (vec_loops, vec_buffers) = vectorized_loops(kernel);
    let emitter = Gen {
        kernel,
        bindings: &bindings,
        vec_loops,
        vec_buffers,
    };
    let mut entry_points = Vec::new();
    let mut stages = Vec::new();
    for (i, root) in kernel.body.iter().enumerate() {
        let (entry, stage) = emitter.stage(i, root, bodies)?;
        entry_points.push(entry);
        stages.push(stage);
    }
    let module = Module {
        prelude: vec![MATH],
        bindings: bindings
            .iter()
            .map(|b| StorageBinding {
                binding: b.binding,
                name: buffer_ident(&b.name, b.buffer),
                access: if b.writes {
                    Access::ReadWrite
                } else {
                    Access::Read
                },
                elem: storage_scalar(b.dtype),
                vec4: emitter.vec_buffers.contains(&b.buffer),
            })
            .collect(),
        workgroup_arrays: live
            .iter()
            .filter(|&&b| kernel.buffer(b).scope == Scope::Workgroup)
            .map(|&b| WorkgroupArray {
                name: buffer_ident(&kernel.buffer(b).name, b),
                elem: storage_scalar(kernel.buffer(b).dtype),
                len: kernel.buffer(b).numel().max(1),
            })
            .collect(),
        entry_points,
    };
    Ok(WgslKernel {
        source: if bodies {
            module.to_string()
        } else {
            String::new()
        },
        bindings,
        stages,
    })
}

fn buffer_ident(name: &str, id: BufferId) -> String {
    format!("b{}_{name}", id.0)
}

/// WGSL storage has no `bool`: masks are stored as `u32` 0 / 1.
fn storage_scalar(dtype: DType) -> Scalar {
    match dtype {
        DType::F32 => Scalar::F32,
        DType::I32 => Scalar::I32,
        DType::U32 | DType::Bool => Scalar::U32,
    }
}

fn scalar_of(dtype: DType) -> Scalar {
    match dtype {
        DType::F32 => Scalar::F32,
        DType::I32 => Scalar::I32,
        DType::U32 => Scalar::U32,
        DType::Bool => Scalar::Bool,
    }
}

/// A WGSL literal of `dtype`; non-finite floats and `i32::MIN` have no
/// literal spelling and are written as bit patterns.
fn literal(v: Value, dtype: DType) -> Expr {
    match v.to(dtype) {
        Value::F(x) => {
            let x = x as f32;
            if x.is_finite() {
                Expr::raw(format!("{x:?}f"))
            } else {
                Expr::raw(format!("bitcast<f32>({:#010x}u)", x.to_bits()))
            }
        }
        Value::I(i32::MIN) => Expr::raw("bitcast<i32>(0x80000000u)"),
        Value::I(x) => Expr::raw(format!("{x}i")),
        Value::U(x) => Expr::raw(format!("{x}u")),
        Value::B(x) => Expr::raw(x.to_string()),
    }
}

fn loop_ident(l: LoopId) -> String {
    format!("l{}", l.0)
}

fn index_expr(ix: &Index) -> Expr {
    match ix {
        Index::Const(c) if *c < 0 => Expr::bin("-", Expr::raw("0u"), Expr::raw(format!("{}u", -c))),
        Index::Const(c) => Expr::raw(format!("{c}u")),
        Index::Var(Var::Loop(l)) => Expr::raw(loop_ident(*l)),
        Index::Var(Var::Iter(i)) => Expr::raw(format!("it{i}")),
        // Rebased indices subtract: `a + b * -c` prints as `a - b * c`
        // (u32 arithmetic wraps, and the final index is non-negative).
        Index::Add(a, b) => match &**b {
            Index::Mul(x, c) if *c < 0 => {
                Expr::bin("-", index_expr(a), index_expr(&(*x.clone() * -c)))
            }
            Index::Const(c) if *c < 0 => {
                Expr::bin("-", index_expr(a), Expr::raw(format!("{}u", -c)))
            }
            _ => Expr::bin("+", index_expr(a), index_expr(b)),
        },
        Index::Mul(a, c) if *c < 0 => Expr::bin(
            "-",
            Expr::raw("0u"),
            Expr::bin("*", index_expr(a), Expr::raw(format!("{}u", -c))),
        ),
        Index::Mul(a, c) => Expr::bin("*", index_expr(a), Expr::raw(format!("{c}u"))),
        Index::Div(a, c) => Expr::bin("/", index_expr(a), Expr::raw(format!("{c}u"))),
        Index::Mod(a, c) => Expr::bin("%", index_expr(a), Expr::raw(format!("{c}u"))),
    }
}

struct Gen<'a> {
    kernel: &'a Kernel,
    bindings: &'a [BindingInfo],
    /// Vectorized loops emitted as one `vec4<f32>` step, with their block.
    vec_loops: HashMap<LoopId, BlockId>,
    /// Buffers declared `array<vec4<f32>>`; their scalar accesses pick a
    /// component.
    vec_buffers: HashSet<BufferId>,
}

impl Gen<'_> {
    fn stage(
        &self,
        i: usize,
        root: &Node,
        body_too: bool,
    ) -> Result<(EntryPoint, StageInfo), ScheduleError> {
        let mut sizes = [1u64; 6];
        self.bound_extents(root, &mut sizes);
        self.check_spine(root, true)?;
        let narrow = |d: u64, what: &str| {
            u32::try_from(d).map_err(|_| {
                ScheduleError::Codegen(format!("stage{i}: {what} extent {d} does not fit in u32"))
            })
        };
        let workgroups = [
            narrow(sizes[0], "workgroup")?,
            narrow(sizes[1], "workgroup")?,
            narrow(sizes[2], "workgroup")?,
        ];
        let workgroup_size = [
            narrow(sizes[3], "invocation")?,
            narrow(sizes[4], "invocation")?,
            narrow(sizes[5], "invocation")?,
        ];
        let subgroup_lanes = self.subgroup_lanes(root, &sizes)?;
        let mut used = Vec::new();
        self.buffers_in(root, &mut used);
        used.sort_unstable();
        used.dedup();
        let mut body: Vec<Stmt> = used
            .iter()
            .filter(|&&b| self.kernel.buffer(b).scope == Scope::Private)
            .map(|&b| {
                let buf = self.kernel.buffer(b);
                let (elem, len) = if self.vec_buffers.contains(&b) {
                    (
                        format!("vec4<{}>", storage_scalar(buf.dtype)),
                        buf.numel() / 4,
                    )
                } else {
                    (storage_scalar(buf.dtype).to_string(), buf.numel().max(1))
                };
                Stmt::VarArray(buffer_ident(&buf.name, b), elem, len)
            })
            .collect();
        if body_too {
            body.extend(self.node(root, &sizes));
        }
        let mut bindings: Vec<u32> = self
            .bindings
            .iter()
            .filter(|b| used.contains(&b.buffer))
            .map(|b| b.binding)
            .collect();
        bindings.sort_unstable();
        let name = format!("stage{i}");
        super::depth::bound_depth(&mut body);
        Ok((
            EntryPoint {
                name: name.clone(),
                workgroup_size,
                body,
            },
            StageInfo {
                entry_point: name,
                workgroups,
                workgroup_size,
                bindings,
                loop_iterations: self.loop_iterations(root),
                subgroup_lanes,
                workgroup_bytes: used
                    .iter()
                    .filter(|&&b| self.kernel.buffer(b).scope == Scope::Workgroup)
                    .map(|&b| 4 * self.kernel.buffer(b).numel().max(1))
                    .sum(),
            },
        ))
    }

    /// Largest extent bound to each axis: workgroup x, y, z, invocation x, y, z.
    fn bound_extents(&self, node: &Node, sizes: &mut [u64; 6]) {
        if let Node::Loop(l, body) = node {
            let lp = self.kernel.loop_(*l);
            if let LoopKind::Bound(axis) = lp.kind {
                let slot = axis.dim() + if axis.is_workgroup() { 0 } else { 3 };
                sizes[slot] = sizes[slot].max(lp.extent);
            }
            body.iter().for_each(|n| self.bound_extents(n, sizes));
        }
    }

    /// The lanes of the widest subgroup reduction in `node` (0 for none).
    /// Every cross-invocation reduction must span its axis (invocation.x
    /// for shuffles), since every lane takes part.
    fn subgroup_lanes(&self, node: &Node, sizes: &[u64; 6]) -> Result<u64, ScheduleError> {
        let Node::Loop(l, body) = node else {
            return Ok(0);
        };
        let mut lanes = 0;
        for n in body {
            lanes = lanes.max(self.subgroup_lanes(n, sizes)?);
        }
        let lp = self.kernel.loop_(*l);
        if let (Some((b, how)), LoopKind::Bound(axis)) =
            (self.kernel.cross_invocation_reduction(*l), lp.kind)
        {
            let size = sizes[3 + axis.dim()];
            if lp.extent != size {
                return Err(ScheduleError::Codegen(format!(
                    "loop {} reduces across {} invocations of {}, but the workgroup has {size} \
                     along that axis; every invocation of the axis must take part",
                    lp.name,
                    lp.extent,
                    axis.name()
                )));
            }
            match how {
                CrossInvocation::Shuffles => lanes = lanes.max(lp.extent),
                // The tree folds every lane's term; none may be missing
                // (guards of the rows are kept by the update).
                CrossInvocation::Tree if self.lane_guarded(*l, b) => {
                    return Err(ScheduleError::Codegen(format!(
                        "loop {} folds block {} in a tree, whose terms must all exist (a guard \
                         depends on the lane)",
                        lp.name,
                        self.kernel.block(b).name
                    )));
                }
                CrossInvocation::Tree => {}
            }
        }
        Ok(lanes)
    }

    /// Workgroups cannot wait for each other inside one dispatch, so every
    /// loop above a workgroup-bound loop must have that loop's subtree as
    /// its only child.
    fn check_spine(&self, node: &Node, on_spine: bool) -> Result<(), ScheduleError> {
        let Node::Loop(l, body) = node else {
            return Ok(());
        };
        if let LoopKind::Bound(axis) = self.kernel.loop_(*l).kind
            && axis.is_workgroup()
            && !on_spine
        {
            return Err(ScheduleError::Codegen(format!(
                "loop {} is bound to {} below a loop with several children; workgroups cannot \
                 synchronize within one kernel (give each such nest its own root loop)",
                self.kernel.loop_(*l).name,
                axis.name()
            )));
        }
        let single = body.len() == 1;
        body.iter()
            .try_for_each(|n| self.check_spine(n, on_spine && single))
    }

    /// `for`-loop iterations one invocation runs in `node`: bound loops
    /// run one iteration per invocation; unrolled ones, loops of one
    /// iteration and `vec4` steps are not loops.
    fn loop_iterations(&self, node: &Node) -> u64 {
        let Node::Loop(l, body) = node else { return 0 };
        let inner: u64 = body.iter().map(|n| self.loop_iterations(n)).sum();
        let lp = self.kernel.loop_(*l);
        match lp.kind {
            LoopKind::Bound(_) => inner,
            LoopKind::Vectorized if self.vec_loops.contains_key(l) => 0,
            LoopKind::Unrolled | LoopKind::Pipelined { unrolled: true, .. } => {
                lp.extent.saturating_mul(inner)
            }
            _ if lp.extent == 1 => inner,
            _ => lp.extent.saturating_mul(1 + inner),
        }
    }

    fn buffers_in(&self, node: &Node, out: &mut Vec<BufferId>) {
        match node {
            Node::Block(b) => {
                let block = self.kernel.block(*b);
                out.push(block.buffer);
                let mut loads = Vec::new();
                block.value.loads(&mut loads);
                out.extend(loads.into_iter().map(|(buf, _)| buf));
            }
            Node::Loop(_, body) => body.iter().for_each(|n| self.buffers_in(n, out)),
        }
    }

    /// Siblings, with a barrier wherever invocations hand data to each other.
    fn nodes(&self, nodes: &[Node], sizes: &[u64; 6]) -> Vec<Stmt> {
        let mut out = Vec::new();
        for (n, barrier) in nodes.iter().zip(sync::before_each(self.kernel, nodes)) {
            out.extend(barrier.stmts());
            out.extend(self.node(n, sizes));
        }
        out
    }

    /// One iteration of loop `l`'s body, with the barrier its end needs
    /// when it holds one at any depth, or when `l` is pipelined (its
    /// copies hand data to later iterations) (`sync::wrap_around`).
    fn iteration(&self, l: LoopId, body: &[Node], sizes: &[u64; 6]) -> Vec<Stmt> {
        let mut stmts = self.nodes(body, sizes);
        let pipelined = matches!(self.kernel.loop_(l).kind, LoopKind::Pipelined { .. });
        if pipelined || sync::holds_barrier(&stmts) {
            stmts.extend(sync::wrap_around(self.kernel, l, body).stmts());
        }
        stmts
    }

    fn node(&self, node: &Node, sizes: &[u64; 6]) -> Vec<Stmt> {
        match node {
            Node::Block(b) => vec![self.block(*b)],
            Node::Loop(l, body) => {
                let lp = self.kernel.loop_(*l);
                let var = loop_ident(*l);
                let end = Expr::raw(format!("{}u", lp.extent));
                match lp.kind {
                    LoopKind::Bound(axis) => {
                        let slot = axis.dim() + if axis.is_workgroup() { 0 } else { 3 };
                        let source = if axis.is_workgroup() { "wg" } else { "lid" };
                        let comp = ["x", "y", "z"][axis.dim()];
                        if let Some((b, how)) = self.kernel.cross_invocation_reduction(*l) {
                            // `subgroup_lanes` checked that the loop spans
                            // its axis (invocation.x for shuffles, `bind`).
                            let lane = format!("lid.{comp}");
                            return vec![Stmt::Scope(vec![
                                Stmt::Let(var, Expr::raw(lane.clone())),
                                self.cross_invocation_block(*l, b, how, &lane),
                            ])];
                        }
                        let inner = self.nodes(body, sizes);
                        let mut stmts = vec![Stmt::Let(
                            var.clone(),
                            Expr::raw(format!("{source}.{comp}")),
                        )];
                        if lp.extent < sizes[slot] {
                            stmts.push(Stmt::If(Expr::bin("<", Expr::raw(var), end), inner));
                        } else {
                            stmts.extend(inner);
                        }
                        vec![Stmt::Scope(stmts)]
                    }
                    // A loop of one iteration needs no loop (nor a barrier
                    // between iterations).
                    LoopKind::Serial | LoopKind::Parallel | LoopKind::Pipelined { .. }
                        if lp.extent == 1 =>
                    {
                        let mut stmts = vec![Stmt::Let(var, Expr::raw("0u"))];
                        stmts.extend(self.nodes(body, sizes));
                        vec![Stmt::Scope(stmts)]
                    }
                    LoopKind::Unrolled | LoopKind::Pipelined { unrolled: true, .. } => (0..lp
                        .extent)
                        .map(|k| {
                            let mut stmts =
                                vec![Stmt::Let(var.clone(), Expr::raw(format!("{k}u")))];
                            stmts.extend(self.iteration(*l, body, sizes));
                            Stmt::Scope(stmts)
                        })
                        .collect(),
                    LoopKind::Vectorized if self.vec_loops.contains_key(l) => {
                        vec![self.vector_block(*l, self.vec_loops[l])]
                    }
                    LoopKind::Serial
                    | LoopKind::Parallel
                    | LoopKind::Pipelined { .. }
                    | LoopKind::Vectorized => {
                        vec![Stmt::For {
                            var,
                            end,
                            body: self.iteration(*l, body, sizes),
                        }]
                    }
                }
            }
        }
    }

    fn buffer(&self, b: BufferId) -> Expr {
        Expr::raw(buffer_ident(&self.kernel.buffer(b).name, b))
    }

    fn offset(&self, b: BufferId, indices: &[Index]) -> Expr {
        index_expr(&flat_offset(indices, &self.kernel.buffer(b).shape))
    }

    /// One element: `b[o]`, or `b[o / 4u][o % 4u]` in a vec4 buffer.
    fn element(&self, b: BufferId, indices: &[Index]) -> Expr {
        let o = self.offset(b, indices);
        if self.vec_buffers.contains(&b) {
            let vec = Expr::index(self.buffer(b), Expr::bin("/", o.clone(), Expr::raw("4u")));
            Expr::index(vec, Expr::bin("%", o, Expr::raw("4u")))
        } else {
            Expr::index(self.buffer(b), o)
        }
    }

    /// A vectorized loop: lane 0's iterators, then all four lanes at once.
    fn vector_block(&self, l: LoopId, id: BlockId) -> Stmt {
        let b = &self.localized(id);
        let mut stmts = vec![
            Stmt::Comment(format!(
                "block {}, 4 lanes of loop {} at once",
                b.name,
                self.kernel.loop_(l).name
            )),
            Stmt::Let(loop_ident(l), Expr::raw("0u")),
        ];
        for (i, binding) in b.bindings.iter().enumerate() {
            stmts.push(Stmt::Let(format!("it{i}"), index_expr(binding)));
        }
        let target = Expr::index(
            self.buffer(b.buffer),
            Expr::bin("/", self.offset(b.buffer, &b.indices), Expr::raw("4u")),
        );
        let value = self.vector_value(&b.value, b, l);
        let value = match b.reduce {
            None => value,
            Some(op) => combine(op, target.clone(), value, DType::F32, true),
        };
        stmts.push(Stmt::Assign(target, value));
        Stmt::Scope(stmts)
    }

    fn vector_value(&self, e: &ir::Expr, b: &ir::Block, l: LoopId) -> Expr {
        let v = |x: &ir::Expr| self.vector_value(x, b, l);
        let splat = |x: Expr| Expr::call("vec4<f32>", vec![x]);
        match e {
            ir::Expr::Const { value, dtype } => splat(literal(Value::F(*value), *dtype)),
            ir::Expr::Load { buffer, indices } => {
                match lane_step(self.kernel, b, *buffer, indices, l) {
                    Some(1) => Expr::index(
                        self.buffer(*buffer),
                        Expr::bin("/", self.offset(*buffer, indices), Expr::raw("4u")),
                    ),
                    _ => splat(self.element(*buffer, indices)),
                }
            }
            ir::Expr::Unary(op, a) => unary(*op, v(a), DType::F32, true),
            ir::Expr::Binary(op, x, y) => binary(*op, v(x), v(y), DType::F32, true),
            ir::Expr::Select(c, x, y) => Expr::call("select", vec![v(y), v(x), v(c)]),
            ir::Expr::Cast(..) => unreachable!("vectorized_loops admits no casts"),
        }
    }

    fn block(&self, id: BlockId) -> Stmt {
        let b = &self.localized(id);
        let mut stmts = vec![Stmt::Comment(format!("block {}", b.name))];
        stmts.extend(iter_lets(b));
        stmts.extend(self.update(id, b, self.value(&b.value)));
        Stmt::Scope(stmts)
    }

    /// The block's store (or its reduction step) of `value`, under its
    /// guards, its iterators already bound.
    fn update(&self, id: BlockId, b: &ir::Block, value: Expr) -> Vec<Stmt> {
        let dtype = self.kernel.buffer(b.buffer).dtype;
        let target = self.element(b.buffer, &b.indices);
        let mut body = Vec::new();
        match b.reduce {
            None => body.push(Stmt::Assign(target, to_storage(value, dtype))),
            Some(op) => {
                let first = b
                    .iters
                    .iter()
                    .enumerate()
                    .filter(|(_, it)| it.kind == ir::IterKind::Reduce)
                    .map(|(i, _)| Expr::bin("==", Expr::raw(format!("it{i}")), Expr::raw("0u")))
                    .reduce(|a, c| Expr::bin("&&", a, c))
                    .unwrap_or(Expr::raw("true"));
                if b.init {
                    body.push(Stmt::If(
                        first,
                        vec![Stmt::Assign(
                            target.clone(),
                            literal(reduce_identity(op, dtype), dtype),
                        )],
                    ));
                }
                body.push(Stmt::Assign(
                    target.clone(),
                    combine(op, target, value, dtype, false),
                ));
            }
        }
        match self.guard(id, b) {
            None => body,
            Some(cond) => vec![Stmt::If(cond, body)],
        }
    }

    /// Whether some guard of block `b` depends on loop `l`.
    fn lane_guarded(&self, l: LoopId, b: BlockId) -> bool {
        let lane = Var::Loop(l);
        let block = self.kernel.block(b);
        self.kernel
            .needs_guard(b)
            .iter()
            .any(|&g| block.bindings[g].mentions(lane))
            || self
                .kernel
                .live_predicates(b)
                .iter()
                .any(|(e, _)| e.mentions(lane))
    }

    /// Whether the block's iteration exists: tails of uneven splits and
    /// predicates; `None` when it always does.
    fn guard(&self, id: BlockId, b: &ir::Block) -> Option<Expr> {
        let mut conds: Vec<Expr> = self
            .kernel
            .needs_guard(id)
            .iter()
            .map(|&g| {
                Expr::bin(
                    "<",
                    Expr::raw(format!("it{g}")),
                    Expr::raw(format!("{}u", b.iters[g].extent)),
                )
            })
            .collect();
        conds.extend(
            self.kernel
                .live_predicates(id)
                .iter()
                .map(|(e, bound)| Expr::bin("<", index_expr(e), Expr::raw(format!("{bound}u")))),
        );
        conds.into_iter().reduce(|a, c| Expr::bin("&&", a, c))
    }

    /// A reduction that loop `l`, bound to `invocation.x`, spreads over its
    /// invocations. With shuffles, every lane evaluates its term (the
    /// identity where the block's guards fail) and a butterfly of
    /// `subgroupShuffleXor`s leaves the combined value in every lane. In a
    /// tree, lanes below each half fold the term of the lane a half above
    /// into theirs, in the workgroup buffer that holds them, a barrier per
    /// step, until lane 0's term holds all. The update then runs as lane
    /// 0's (the iterators rebound with the loop at 0) — by lane 0 alone when
    /// other invocations share the target.
    fn cross_invocation_block(
        &self,
        l: LoopId,
        id: BlockId,
        how: CrossInvocation,
        lane: &str,
    ) -> Stmt {
        let b = &self.localized(id);
        let op = b.reduce.expect("a reducing block");
        let dtype = self.kernel.buffer(b.buffer).dtype;
        let extent = self.kernel.loop_(l).extent;
        let halves =
            std::iter::successors(Some(extent / 2), |h| Some(h / 2)).take_while(|&h| h > 0);
        let mut stmts = vec![Stmt::Comment(format!(
            "block {}, reduced across {extent} invocations {}",
            b.name,
            match how {
                CrossInvocation::Shuffles => "with subgroup shuffles",
                CrossInvocation::Tree => "in a tree through workgroup memory",
            }
        ))];
        let result = match (how, &b.value) {
            (CrossInvocation::Tree, ir::Expr::Load { buffer, indices }) => {
                let lane_var = Var::Loop(l);
                for half in halves {
                    let above: Vec<Index> = indices
                        .iter()
                        .map(|ix| {
                            ix.subst(&|v| {
                                (v == lane_var)
                                    .then(|| Index::var(lane_var) + Index::Const(half as i64))
                            })
                        })
                        .collect();
                    let mine = self.element(*buffer, indices);
                    let theirs = self.element(*buffer, &above);
                    stmts.push(Stmt::If(
                        Expr::bin("<", Expr::raw(lane), Expr::raw(format!("{half}u"))),
                        vec![Stmt::Assign(
                            mine.clone(),
                            combine(op, mine, theirs, dtype, false),
                        )],
                    ));
                    stmts.push(Stmt::Call("workgroupBarrier".into()));
                }
                // Read as lane 0's, below.
                self.value(&b.value)
            }
            _ => {
                stmts.extend(iter_lets(b));
                let term = self.value(&b.value);
                let term = match self.guard(id, b) {
                    None => term,
                    Some(cond) => Expr::call(
                        "select",
                        vec![literal(reduce_identity(op, dtype), dtype), term, cond],
                    ),
                };
                stmts.push(Stmt::Var("tf_sg".into(), term));
                for half in halves {
                    let other = Expr::call(
                        "subgroupShuffleXor",
                        vec![Expr::raw("tf_sg"), Expr::raw(format!("{half}u"))],
                    );
                    stmts.push(Stmt::Assign(
                        Expr::raw("tf_sg"),
                        combine(op, Expr::raw("tf_sg"), other, dtype, false),
                    ));
                }
                Expr::raw("tf_sg")
            }
        };
        let mut first_lane = vec![Stmt::Let(loop_ident(l), Expr::raw("0u"))];
        first_lane.extend(iter_lets(b));
        first_lane.extend(self.update(id, b, result));
        if self.kernel.buffer(b.buffer).scope == Scope::Private {
            stmts.push(Stmt::Scope(first_lane));
        } else {
            stmts.push(Stmt::If(
                Expr::bin("==", Expr::raw(lane), Expr::raw("0u")),
                first_lane,
            ));
        }
        Stmt::Scope(stmts)
    }

    /// The block with its accesses to workgroup and private buffers
    /// written over loop variables and simplified: realization rebased them
    /// to their region, and `(start + i) - start` should read `i`, which
    /// lets private arrays stay in registers.
    fn localized(&self, id: BlockId) -> ir::Block {
        let mut b = self.kernel.block(id).clone();
        let local = |buf: BufferId| self.kernel.buffer(buf).scope != Scope::Global;
        let over = |b: &ir::Block, ix: &[Index]| -> Vec<Index> {
            b.over_loops(ix).iter().map(Index::simplified).collect()
        };
        let original = b.clone();
        b.value = b.value.map_loads(&mut |buffer, indices| ir::Expr::Load {
            buffer,
            indices: if local(buffer) {
                over(&original, indices)
            } else {
                indices.to_vec()
            },
        });
        if local(b.buffer) {
            b.indices = over(&original, &original.indices);
        }
        b
    }

    fn dtype(&self, e: &ir::Expr) -> DType {
        e.dtype(&self.kernel.buffer_dtype())
    }

    fn value(&self, e: &ir::Expr) -> Expr {
        match e {
            ir::Expr::Const { value, dtype } => literal(Value::F(*value), *dtype),
            ir::Expr::Load { buffer, indices } => {
                let load = self.element(*buffer, indices);
                if self.kernel.buffer(*buffer).dtype == DType::Bool {
                    Expr::bin("!=", load, Expr::raw("0u"))
                } else {
                    load
                }
            }
            ir::Expr::Unary(op, a) => unary(*op, self.value(a), self.dtype(a), false),
            ir::Expr::Binary(op, a, b) => {
                binary(*op, self.value(a), self.value(b), self.dtype(a), false)
            }
            ir::Expr::Select(c, a, b) => {
                Expr::call("select", vec![self.value(b), self.value(a), self.value(c)])
            }
            ir::Expr::Cast(to, a) => {
                let from = self.dtype(a);
                let x = self.value(a);
                match (from, to) {
                    (f, t) if f == *t => x,
                    (_, DType::Bool) => Expr::bin("!=", x, literal(Value::I(0), from)),
                    // Saturating, NaN to 0 (WGSL leaves both to the driver).
                    (DType::F32, DType::I32) => Expr::call("tf_f32_to_i32", vec![x]),
                    (DType::F32, DType::U32) => Expr::call("tf_f32_to_u32", vec![x]),
                    (_, t) => Expr::call(scalar_of(*t).to_string(), vec![x]),
                }
            }
        }
    }
}

/// A unary op on a scalar of `dtype`, or on a `vec4<f32>` with `vec4`
/// (the helpers of `shaders/math.wgsl` have a `4` form for vectors).
fn unary(op: UnaryOp, x: Expr, dtype: DType, vec4: bool) -> Expr {
    let helper = |name: &str| {
        Expr::call(
            if vec4 {
                format!("tf_{name}4")
            } else {
                format!("tf_{name}")
            },
            vec![x.clone()],
        )
    };
    let builtin = |name: &str| Expr::call(name, vec![x.clone()]);
    match op {
        UnaryOp::Neg => Expr::Unary("-", Box::new(x)),
        UnaryOp::Abs => builtin("abs"),
        UnaryOp::Exp => builtin("exp"),
        UnaryOp::Log => builtin("log"),
        UnaryOp::Sqrt => builtin("sqrt"),
        UnaryOp::Rsqrt => builtin("inverseSqrt"),
        UnaryOp::Sin => builtin("sin"),
        UnaryOp::Cos => builtin("cos"),
        UnaryOp::Tanh => helper("tanh"),
        UnaryOp::Sigmoid => helper("sigmoid"),
        UnaryOp::Gelu => helper("gelu"),
        UnaryOp::Relu if vec4 => helper("relu"),
        UnaryOp::Relu if dtype == DType::I32 => helper("relu_i32"),
        UnaryOp::Relu => helper("relu_f32"),
        UnaryOp::Reciprocal => {
            let one = if vec4 {
                Expr::call("vec4<f32>", vec![Expr::raw("1.0f")])
            } else {
                Expr::raw("1.0f")
            };
            Expr::bin("/", one, x)
        }
    }
}

/// A binary op on operands of `dtype`, scalars or `vec4<f32>` with `vec4`.
fn binary(op: BinaryOp, x: Expr, y: Expr, dtype: DType, vec4: bool) -> Expr {
    match op {
        BinaryOp::Add => Expr::bin("+", x, y),
        BinaryOp::Sub => Expr::bin("-", x, y),
        BinaryOp::Mul => Expr::bin("*", x, y),
        BinaryOp::Div => Expr::bin("/", x, y),
        BinaryOp::Max => extreme("max", x, y, dtype, vec4),
        BinaryOp::Min => extreme("min", x, y, dtype, vec4),
        BinaryOp::Pow => Expr::call(if vec4 { "tf_pow4" } else { "tf_pow" }, vec![x, y]),
        BinaryOp::Eq => Expr::bin("==", x, y),
        BinaryOp::Ne => Expr::bin("!=", x, y),
        BinaryOp::Lt => Expr::bin("<", x, y),
        BinaryOp::Le => Expr::bin("<=", x, y),
        BinaryOp::Gt => Expr::bin(">", x, y),
        BinaryOp::Ge => Expr::bin(">=", x, y),
    }
}

/// `max` / `min`: on floats NaN wins, as in numpy (WGSL's builtins may
/// return either operand), so floats go through `shaders/math.wgsl`.
fn extreme(name: &str, x: Expr, y: Expr, dtype: DType, vec4: bool) -> Expr {
    match (dtype, vec4) {
        (_, true) => Expr::call(format!("tf_{name}4"), vec![x, y]),
        (DType::F32, false) => Expr::call(format!("tf_{name}"), vec![x, y]),
        _ => Expr::call(name, vec![x, y]),
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
    let offset = block
        .over_loops(&[flat_offset(indices, &kernel.buffer(buffer).shape)])
        .remove(0)
        .simplified();
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

/// Vectorized loops of extent 4 over a single f32 block that can run as
/// one `vec4<f32>` step (contiguous aligned or uniform loads, a contiguous
/// aligned store or accumulation into global or private memory, no guard,
/// no first-iteration start, no cast), and the buffers whose contiguous
/// accesses need `array<vec4<f32>>`.
fn vectorized_loops(kernel: &Kernel) -> (HashMap<LoopId, BlockId>, HashSet<BufferId>) {
    fn walk(
        k: &Kernel,
        nodes: &[Node],
        loops: &mut HashMap<LoopId, BlockId>,
        buffers: &mut HashSet<BufferId>,
    ) {
        for n in nodes {
            let Node::Loop(l, body) = n else { continue };
            walk(k, body, loops, buffers);
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
            let mut contiguous = vec![block.buffer];
            // A reduction's lanes accumulate independently once it no
            // longer starts itself (decompose_reduction).
            let ok = (block.reduce.is_none() || !block.init)
                && k.needs_guard(*b).is_empty()
                && k.live_predicates(*b).is_empty()
                && vec_buffer(block.buffer)
                && lane_step(k, block, block.buffer, &block.indices, *l) == Some(1)
                && vector_ok(k, block, &block.value, *l, false, &mut contiguous)
                && contiguous.iter().all(|&buf| vec_buffer(buf));
            if ok {
                loops.insert(*l, *b);
                buffers.extend(contiguous);
            }
        }
    }
    /// Whether `e` has a `vec4` form (`cond`: it is a `select` condition,
    /// the only place a comparison may appear).
    fn vector_ok(
        k: &Kernel,
        b: &ir::Block,
        e: &ir::Expr,
        l: LoopId,
        cond: bool,
        contiguous: &mut Vec<BufferId>,
    ) -> bool {
        match e {
            ir::Expr::Const { dtype, .. } => *dtype == DType::F32 && !cond,
            ir::Expr::Load { buffer, indices } => {
                let step = lane_step(k, b, *buffer, indices, l);
                if step == Some(1) {
                    contiguous.push(*buffer);
                }
                !cond && k.buffer(*buffer).dtype == DType::F32 && step.is_some()
            }
            ir::Expr::Unary(_, a) => !cond && vector_ok(k, b, a, l, false, contiguous),
            ir::Expr::Binary(op, x, y) => {
                cond == op.is_comparison()
                    && vector_ok(k, b, x, l, false, contiguous)
                    && vector_ok(k, b, y, l, false, contiguous)
            }
            ir::Expr::Select(c, x, y) => {
                !cond
                    && vector_ok(k, b, c, l, true, contiguous)
                    && vector_ok(k, b, x, l, false, contiguous)
                    && vector_ok(k, b, y, l, false, contiguous)
            }
            ir::Expr::Cast(..) => false,
        }
    }
    let (mut loops, mut buffers) = (HashMap::new(), HashSet::new());
    walk(kernel, &kernel.body, &mut loops, &mut buffers);
    (loops, buffers)
}

/// `let itN = ...;` for each of the block's iterators.
fn iter_lets(b: &ir::Block) -> Vec<Stmt> {
    b.bindings
        .iter()
        .enumerate()
        .map(|(i, binding)| Stmt::Let(format!("it{i}"), index_expr(binding)))
        .collect()
}

/// One reduction step: `acc` combined with `value` (of `dtype`, or
/// `vec4<f32>` with `vec4`).
fn combine(op: ReduceOp, acc: Expr, value: Expr, dtype: DType, vec4: bool) -> Expr {
    match op {
        ReduceOp::Sum | ReduceOp::Mean => Expr::bin("+", acc, value),
        ReduceOp::Max => extreme("max", acc, value, dtype, vec4),
        ReduceOp::Min => extreme("min", acc, value, dtype, vec4),
    }
}

/// Converts a value for storing into a buffer of `dtype`.
fn to_storage(value: Expr, dtype: DType) -> Expr {
    if dtype == DType::Bool {
        Expr::call("select", vec![Expr::raw("0u"), Expr::raw("1u"), value])
    } else {
        value
    }
}
