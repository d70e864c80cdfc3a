//! Kernel IR → WGSL. Each root loop nest of the kernel becomes one entry
//! point (`stage0`, `stage1`, ...) dispatched in order; global buffers are
//! storage bindings numbered once for the whole module.
//!
//! Loops bound to `workgroup.*` / `invocation.*` read `workgroup_id` /
//! `local_invocation_id` (guarded when their extent is less than the
//! dispatch or workgroup size); other loops are `for` loops, unrolled ones
//! are repeated. Between sibling subtrees that run on different invocations
//! a barrier makes the first's writes visible to the second.

use tilefuse_ir::{BinaryOp, DType, ReduceOp, Scalar as Value, UnaryOp, reduce_identity};

use super::ast::{Access, EntryPoint, Expr, Module, Scalar, Stmt, StorageBinding, WorkgroupArray};
use crate::ir::{self, BlockId, BufferId, Index, Kernel, LoopKind, Node, Role, Scope, Var};
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
    let kernel = &crate::realize(kernel)?;
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
        kernel,
        bindings: &bindings,
    };
    let mut entry_points = Vec::new();
    let mut stages = Vec::new();
    for (i, root) in kernel.body.iter().enumerate() {
        let (entry, stage) = emitter.stage(i, root)?;
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
        source: module.to_string(),
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

fn loop_ident(l: ir::LoopId) -> String {
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
}

impl Gen<'_> {
    fn stage(&self, i: usize, root: &Node) -> Result<(EntryPoint, StageInfo), ScheduleError> {
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
        let mut used = Vec::new();
        self.buffers_in(root, &mut used);
        used.sort_unstable();
        used.dedup();
        let mut body: Vec<Stmt> = used
            .iter()
            .filter(|&&b| self.kernel.buffer(b).scope == Scope::Private)
            .map(|&b| {
                let buf = self.kernel.buffer(b);
                Stmt::VarArray(
                    buffer_ident(&buf.name, b),
                    storage_scalar(buf.dtype),
                    buf.numel().max(1),
                )
            })
            .collect();
        body.extend(self.node(root, &sizes));
        let mut bindings: Vec<u32> = self
            .bindings
            .iter()
            .filter(|b| used.contains(&b.buffer))
            .map(|b| b.binding)
            .collect();
        bindings.sort_unstable();
        let name = format!("stage{i}");
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
    /// run one iteration per invocation, unrolled ones are not loops.
    fn loop_iterations(&self, node: &Node) -> u64 {
        let Node::Loop(l, body) = node else { return 0 };
        let inner: u64 = body.iter().map(|n| self.loop_iterations(n)).sum();
        let lp = self.kernel.loop_(*l);
        match lp.kind {
            LoopKind::Bound(_) => inner,
            LoopKind::Unrolled => lp.extent.saturating_mul(inner),
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

    fn has_invocation_loop(&self, node: &Node) -> bool {
        match node {
            Node::Block(_) => false,
            Node::Loop(l, body) => {
                matches!(self.kernel.loop_(*l).kind, LoopKind::Bound(a) if !a.is_workgroup())
                    || body.iter().any(|n| self.has_invocation_loop(n))
            }
        }
    }

    /// Siblings, with a barrier wherever invocations hand data to each other.
    fn nodes(&self, nodes: &[Node], sizes: &[u64; 6]) -> Vec<Stmt> {
        let mut out = Vec::new();
        for (i, n) in nodes.iter().enumerate() {
            if i > 0 && (self.has_invocation_loop(&nodes[i - 1]) || self.has_invocation_loop(n)) {
                out.push(Stmt::Call("storageBarrier".into()));
                out.push(Stmt::Call("workgroupBarrier".into()));
            }
            out.extend(self.node(n, sizes));
        }
        out
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
                    LoopKind::Unrolled => (0..lp.extent)
                        .map(|k| {
                            let mut stmts =
                                vec![Stmt::Let(var.clone(), Expr::raw(format!("{k}u")))];
                            stmts.extend(self.nodes(body, sizes));
                            Stmt::Scope(stmts)
                        })
                        .collect(),
                    LoopKind::Serial | LoopKind::Parallel | LoopKind::Vectorized => {
                        vec![Stmt::For {
                            var,
                            end,
                            body: self.nodes(body, sizes),
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
        let shape = &self.kernel.buffer(b).shape;
        let mut offset = Index::Const(0);
        let mut stride = 1i64;
        for (idx, &extent) in indices.iter().zip(shape).rev() {
            offset = idx.clone() * stride + offset;
            stride *= extent as i64;
        }
        index_expr(&offset)
    }

    fn block(&self, id: BlockId) -> Stmt {
        let b = self.kernel.block(id);
        let mut stmts = vec![Stmt::Comment(format!("block {}", b.name))];
        for (i, binding) in b.bindings.iter().enumerate() {
            stmts.push(Stmt::Let(format!("it{i}"), index_expr(binding)));
        }
        let dtype = self.kernel.buffer(b.buffer).dtype;
        let target = Expr::index(self.buffer(b.buffer), self.offset(b.buffer, &b.indices));
        let value = self.value(&b.value);
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
                let combined = match op {
                    ReduceOp::Sum | ReduceOp::Mean => Expr::bin("+", target.clone(), value),
                    ReduceOp::Max => Expr::call("max", vec![target.clone(), value]),
                    ReduceOp::Min => Expr::call("min", vec![target.clone(), value]),
                };
                body.push(Stmt::Assign(target, combined));
            }
        }
        let guards: Vec<usize> = self.kernel.needs_guard(id);
        if guards.is_empty() {
            stmts.extend(body);
        } else {
            let cond = guards
                .iter()
                .map(|&g| {
                    Expr::bin(
                        "<",
                        Expr::raw(format!("it{g}")),
                        Expr::raw(format!("{}u", b.iters[g].extent)),
                    )
                })
                .reduce(|a, c| Expr::bin("&&", a, c))
                .expect("non-empty");
            stmts.push(Stmt::If(cond, body));
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
                let load = Expr::index(self.buffer(*buffer), self.offset(*buffer, indices));
                if self.kernel.buffer(*buffer).dtype == DType::Bool {
                    Expr::bin("!=", load, Expr::raw("0u"))
                } else {
                    load
                }
            }
            ir::Expr::Unary(op, a) => {
                let dtype = self.dtype(a);
                let x = self.value(a);
                match op {
                    UnaryOp::Neg => Expr::Unary("-", Box::new(x)),
                    UnaryOp::Abs => Expr::call("abs", vec![x]),
                    UnaryOp::Exp => Expr::call("exp", vec![x]),
                    UnaryOp::Log => Expr::call("log", vec![x]),
                    UnaryOp::Sqrt => Expr::call("sqrt", vec![x]),
                    UnaryOp::Rsqrt => Expr::call("inverseSqrt", vec![x]),
                    UnaryOp::Tanh => Expr::call("tf_tanh", vec![x]),
                    UnaryOp::Sigmoid => Expr::call("tf_sigmoid", vec![x]),
                    UnaryOp::Relu if dtype == DType::I32 => Expr::call("tf_relu_i32", vec![x]),
                    UnaryOp::Relu => Expr::call("tf_relu_f32", vec![x]),
                    UnaryOp::Gelu => Expr::call("tf_gelu", vec![x]),
                    UnaryOp::Sin => Expr::call("sin", vec![x]),
                    UnaryOp::Cos => Expr::call("cos", vec![x]),
                    UnaryOp::Reciprocal => Expr::bin("/", Expr::raw("1.0f"), x),
                }
            }
            ir::Expr::Binary(op, a, b) => {
                let (x, y) = (self.value(a), self.value(b));
                match op {
                    BinaryOp::Add => Expr::bin("+", x, y),
                    BinaryOp::Sub => Expr::bin("-", x, y),
                    BinaryOp::Mul => Expr::bin("*", x, y),
                    BinaryOp::Div => Expr::bin("/", x, y),
                    BinaryOp::Max => Expr::call("max", vec![x, y]),
                    BinaryOp::Min => Expr::call("min", vec![x, y]),
                    BinaryOp::Pow => Expr::call("pow", vec![x, y]),
                    BinaryOp::Eq => Expr::bin("==", x, y),
                    BinaryOp::Ne => Expr::bin("!=", x, y),
                    BinaryOp::Lt => Expr::bin("<", x, y),
                    BinaryOp::Le => Expr::bin("<=", x, y),
                    BinaryOp::Gt => Expr::bin(">", x, y),
                    BinaryOp::Ge => Expr::bin(">=", x, y),
                }
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
                    (_, t) => Expr::call(scalar_of(*t).to_string(), vec![x]),
                }
            }
        }
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
