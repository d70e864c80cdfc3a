//! Kernel IR → WGSL, from a kernel lowered for [`Target::Wgsl`]. Each root
//! loop nest becomes one entry point (`stage0`, `stage1`, ...) dispatched
//! in order; global buffers are storage bindings numbered once for the
//! whole module.
//!
//! Loops bound to `workgroup.*` / `invocation.*` read `workgroup_id` /
//! `local_invocation_id` (guarded when their extent is less than the
//! dispatch or workgroup size); other loops are `for` loops, unrolled ones
//! are repeated. Lowering decided the rest: which loops are `vec4` steps,
//! the launch of each stage and where barriers go.

use tilefuse_ir::{BinaryOp, DType, ReduceOp, Scalar as Value, UnaryOp, reduce_identity};

use super::ast::{Access, EntryPoint, Expr, Module, Scalar, Stmt, StorageBinding, WorkgroupArray};
use crate::ir::{
    self, BlockId, BufferId, CrossInvocation, Index, Kernel, LoopId, LoopKind, Node, Role, Scope,
    Var, flat_offset,
};
use crate::lowering::{Barrier, Launch, LowerError, Lowered, Target, lane_step, lower};

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

/// Lowers a scheduled kernel for WGSL and generates its module.
pub fn generate(kernel: &Kernel) -> Result<WgslKernel, LowerError> {
    Ok(emit(&lower(kernel, Target::Wgsl)?))
}

/// The WGSL module of a kernel lowered for [`Target::Wgsl`].
pub fn emit(lowered: &Lowered) -> WgslKernel {
    assert_eq!(lowered.target, Target::Wgsl, "WGSL needs a WGSL lowering");
    let kernel = &lowered.kernel;
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
    let emitter = Gen {
        l: lowered,
        kernel,
        bindings: &bindings,
    };
    let (entry_points, stages) = kernel
        .body
        .iter()
        .zip(&lowered.launches)
        .enumerate()
        .map(|(i, (root, launch))| emitter.stage(i, root, launch))
        .unzip();
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
                vec4: lowered.vectors.buffers.contains(&b.buffer),
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
    WgslKernel {
        source: module.to_string(),
        bindings,
        stages,
    }
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
    l: &'a Lowered,
    kernel: &'a Kernel,
    bindings: &'a [BindingInfo],
}

fn barrier_stmts(barrier: Barrier) -> Vec<Stmt> {
    let mut out = Vec::new();
    if barrier.storage {
        out.push(Stmt::Call("storageBarrier".into()));
    }
    if barrier.workgroup {
        out.push(Stmt::Call("workgroupBarrier".into()));
    }
    out
}

impl Gen<'_> {
    fn stage(&self, i: usize, root: &Node, launch: &Launch) -> (EntryPoint, StageInfo) {
        let used = &launch.buffers;
        let mut body: Vec<Stmt> = used
            .iter()
            .filter(|&&b| self.kernel.buffer(b).scope == Scope::Private)
            .map(|&b| {
                let buf = self.kernel.buffer(b);
                let (elem, len) = if self.l.vectors.buffers.contains(&b) {
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
        body.extend(self.node(root, launch));
        let bindings: Vec<u32> = self
            .bindings
            .iter()
            .filter(|b| used.contains(&b.buffer))
            .map(|b| b.binding)
            .collect();
        let name = format!("stage{i}");
        super::depth::bound_depth(&mut body);
        // Lowering checked that the launch fits in u32 (`launch`).
        let narrow = |d: [u64; 3]| d.map(|x| x as u32);
        let workgroup_size = narrow(launch.workgroup_size);
        (
            EntryPoint {
                name: name.clone(),
                workgroup_size,
                body,
            },
            StageInfo {
                entry_point: name,
                workgroups: narrow(launch.workgroups),
                workgroup_size,
                bindings,
                loop_iterations: launch.loop_iterations,
                subgroup_lanes: launch.subgroup_lanes,
                workgroup_bytes: launch.workgroup_bytes,
            },
        )
    }

    /// Loop `l`'s body, with the barriers lowering placed between its
    /// children.
    fn nodes(&self, l: LoopId, body: &[Node], launch: &Launch) -> Vec<Stmt> {
        let mut out = Vec::new();
        for (i, n) in body.iter().enumerate() {
            out.extend(barrier_stmts(self.l.barriers.before(l, i)));
            out.extend(self.node(n, launch));
        }
        out
    }

    /// One iteration of loop `l`'s body, with the barrier its end needs.
    fn iteration(&self, l: LoopId, body: &[Node], launch: &Launch) -> Vec<Stmt> {
        let mut stmts = self.nodes(l, body, launch);
        stmts.extend(barrier_stmts(self.l.barriers.end_of_iteration(l)));
        stmts
    }

    fn node(&self, node: &Node, launch: &Launch) -> Vec<Stmt> {
        match node {
            Node::Block(b) => vec![self.block(*b)],
            Node::Loop(l, body) => {
                let lp = self.kernel.loop_(*l);
                let var = loop_ident(*l);
                let end = Expr::raw(format!("{}u", lp.extent));
                match lp.kind {
                    LoopKind::Bound(axis) => {
                        let source = if axis.is_workgroup() { "wg" } else { "lid" };
                        let comp = ["x", "y", "z"][axis.dim()];
                        if let Some((b, how)) = self.kernel.cross_invocation_reduction(*l) {
                            // Lowering checked that the loop spans its
                            // axis (`cross_invocation`).
                            let lane = format!("lid.{comp}");
                            return vec![Stmt::Scope(vec![
                                Stmt::Let(var, Expr::raw(lane.clone())),
                                self.cross_invocation_block(*l, b, how, &lane),
                            ])];
                        }
                        let inner = self.nodes(*l, body, launch);
                        let mut stmts = vec![Stmt::Let(
                            var.clone(),
                            Expr::raw(format!("{source}.{comp}")),
                        )];
                        if lp.extent < launch.extent(axis) {
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
                        stmts.extend(self.nodes(*l, body, launch));
                        vec![Stmt::Scope(stmts)]
                    }
                    LoopKind::Unrolled | LoopKind::Pipelined { unrolled: true, .. } => (0..lp
                        .extent)
                        .map(|k| {
                            let mut stmts =
                                vec![Stmt::Let(var.clone(), Expr::raw(format!("{k}u")))];
                            stmts.extend(self.iteration(*l, body, launch));
                            Stmt::Scope(stmts)
                        })
                        .collect(),
                    LoopKind::Vectorized if self.l.vectors.loops.contains_key(l) => {
                        vec![self.vector_block(*l, self.l.vectors.loops[l])]
                    }
                    LoopKind::Serial
                    | LoopKind::Parallel
                    | LoopKind::Pipelined { .. }
                    | LoopKind::Vectorized => {
                        vec![Stmt::For {
                            var,
                            end,
                            body: self.iteration(*l, body, launch),
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
        if self.l.vectors.buffers.contains(&b) {
            let vec = Expr::index(self.buffer(b), Expr::bin("/", o.clone(), Expr::raw("4u")));
            Expr::index(vec, Expr::bin("%", o, Expr::raw("4u")))
        } else {
            Expr::index(self.buffer(b), o)
        }
    }

    /// A vectorized loop: lane 0's iterators, then all four lanes at once.
    fn vector_block(&self, l: LoopId, id: BlockId) -> Stmt {
        let b = self.kernel.block(id);
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
        let b = self.kernel.block(id);
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
        let b = self.kernel.block(id);
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
