//! The initial kernel of a verified fusion, what `Schedule::new` starts
//! from: one block per op, each in its own loop nest over its output (plus
//! reduce loops), intermediates in global buffers. Constants become
//! literals; a `mean` becomes a sum block and a scaling block.
//!
//! Half precision (`f16`, `bf16`) is spelled out here, once for every
//! device: buffers hold the half dtype, each op's arithmetic widens its
//! operands to f32 and its result is cast back (a rounding to nearest
//! even), and reductions and matmuls accumulate into f32 buffers whose
//! readers round (`Value::Narrowed`). Backends only load, store and cast
//! halves; they never do arithmetic on them.

use tilefuse_ir::{BinaryOp, DType, Fusion, Op, ReduceOp, Scalar, TensorId, matmul_dims};

use crate::ir::{
    Block, Buffer, BufferId, Expr, Index, IterKind, IterVar, Kernel, Role, Scope, Var,
};

/// Builds the initial kernel of `fusion`.
pub fn initial_kernel(fusion: &Fusion) -> Kernel {
    let mut l = Lowering {
        fusion,
        kernel: Kernel::default(),
        values: Vec::new(),
    };
    for (i, node) in fusion.nodes().iter().enumerate() {
        let value = l.lower_node(TensorId(i), &node.op, &node.args);
        l.values.push(value);
    }
    for (j, &t) in fusion.outputs().iter().enumerate() {
        match l.values[t.0] {
            Value::Buffer(b) if l.kernel.buffer(b).role == Role::Temp => {
                l.kernel.buffers[b.0 as usize].role = Role::Output(j);
            }
            // An input, constant or already-claimed tensor returned as an
            // output gets its own copy.
            _ => {
                let shape = shape_of(fusion, t);
                let dtype = fusion.ty(t).expect("verified").dtype;
                let name = format!("out{j}");
                let buffer = l.add_buffer(&name, dtype, &shape, Role::Output(j));
                let iters = IterVar::spatial(&shape);
                let value = l.operand(t, &shape);
                l.add_block(
                    &name,
                    iters,
                    buffer,
                    identity_indices(shape.len()),
                    value,
                    None,
                );
            }
        }
    }
    l.kernel
}

#[derive(Clone, Copy)]
enum Value {
    Buffer(BufferId),
    Const(f64, DType),
    /// An f32 accumulator holding a half-precision tensor: readers cast
    /// what they load to the dtype.
    Narrowed(BufferId, DType),
}

/// `e` (of `dtype`) as an operand of arithmetic: widened to f32 when half.
fn widen(e: Expr, dtype: DType) -> Expr {
    if dtype.is_half() {
        Expr::Cast(DType::F32, Box::new(e))
    } else {
        e
    }
}

/// An arithmetic result computed in `dtype.compute()`, rounded to `dtype`.
fn narrow(e: Expr, dtype: DType) -> Expr {
    if dtype.is_half() {
        Expr::Cast(dtype, Box::new(e))
    } else {
        e
    }
}

struct Lowering<'f> {
    fusion: &'f Fusion,
    kernel: Kernel,
    values: Vec<Value>,
}

fn shape_of(fusion: &Fusion, t: TensorId) -> Vec<u64> {
    fusion
        .ty(t)
        .expect("verified")
        .shape
        .iter()
        .map(|&d| d as u64)
        .collect()
}

fn identity_indices(rank: usize) -> Vec<Index> {
    (0..rank).map(|i| Index::var(Var::Iter(i as u32))).collect()
}

impl Lowering<'_> {
    fn block_name(&self, t: TensorId) -> String {
        match &self.fusion.node(t).name {
            Some(name) => name.clone(),
            None => format!("op_{}", t.0),
        }
    }

    fn add_buffer(&mut self, name: &str, dtype: DType, shape: &[u64], role: Role) -> BufferId {
        self.kernel.buffers.push(Buffer {
            name: name.to_owned(),
            dtype,
            shape: shape.to_vec(),
            scope: Scope::Global,
            role,
            stages: None,
        });
        BufferId(self.kernel.buffers.len() as u32 - 1)
    }

    /// Adds a block in a fresh loop nest, one loop per iterator.
    fn add_block(
        &mut self,
        name: &str,
        iters: Vec<IterVar>,
        buffer: BufferId,
        indices: Vec<Index>,
        value: Expr,
        reduce: Option<ReduceOp>,
    ) {
        let node = self.kernel.add_nest(Block {
            name: name.to_owned(),
            iters,
            bindings: Vec::new(),
            buffer,
            indices,
            value,
            reduce,
            init: true,
            predicates: Vec::new(),
        });
        self.kernel.body.push(node);
    }

    /// Reads tensor `t` inside a block over `out_shape` whose iterators are
    /// the output axes, with numpy broadcasting (size-1 axes read index 0,
    /// missing leading axes are dropped).
    fn operand(&self, t: TensorId, out_shape: &[u64]) -> Expr {
        let shape = shape_of(self.fusion, t);
        let pad = out_shape.len() - shape.len();
        let indices = shape
            .iter()
            .enumerate()
            .map(|(a, &d)| {
                if d == 1 && out_shape[a + pad] != 1 {
                    Index::Const(0)
                } else {
                    Index::var(Var::Iter((a + pad) as u32))
                }
            })
            .collect();
        self.load(t, indices)
    }

    fn load(&self, t: TensorId, indices: Vec<Index>) -> Expr {
        match self.values[t.0] {
            Value::Buffer(buffer) => Expr::Load { buffer, indices },
            Value::Const(value, dtype) => Expr::Const { value, dtype },
            Value::Narrowed(buffer, dtype) => narrow(Expr::Load { buffer, indices }, dtype),
        }
    }

    fn dtype(&self, t: TensorId) -> DType {
        self.fusion.ty(t).expect("verified").dtype
    }

    /// Operand `t` of arithmetic at the output axes of `out_shape`.
    fn wide_operand(&self, t: TensorId, out_shape: &[u64]) -> Expr {
        widen(self.operand(t, out_shape), self.dtype(t))
    }

    fn lower_node(&mut self, t: TensorId, op: &Op, args: &[TensorId]) -> Value {
        let ty = self.fusion.ty(t).expect("verified").clone();
        let shape = shape_of(self.fusion, t);
        let name = self.block_name(t);
        match op {
            Op::Input { .. } => Value::Buffer(self.input_buffer(t, ty.dtype, &shape)),
            Op::Constant { value, dtype } => {
                Value::Const(Scalar::F(value.0).to(*dtype).as_f64(), *dtype)
            }
            Op::Reduce {
                func,
                axes,
                keepdims,
            } => self.lower_reduce(&name, t, *func, args[0], axes, *keepdims),
            Op::Matmul {
                transpose_a,
                transpose_b,
                ..
            } => {
                let (mut iters, mut value) =
                    self.matmul_body(args[0], args[1], *transpose_a, *transpose_b);
                let acc = ty.dtype.compute();
                let op = over_one_identity_if_empty(&mut iters, &mut value, ReduceOp::Sum, acc);
                let product = self.store(&name, acc, &shape, iters, value, Some(op));
                narrowed(product, ty.dtype)
            }
            _ => {
                let value = self.elementwise(op, args, &shape);
                self.store(
                    &name,
                    ty.dtype,
                    &shape,
                    IterVar::spatial(&shape),
                    value,
                    None,
                )
            }
        }
    }

    /// The buffer of input `t`, named after it.
    fn input_buffer(&mut self, t: TensorId, dtype: DType, shape: &[u64]) -> BufferId {
        let inputs = self.fusion.inputs();
        let index = inputs.iter().position(|&i| i == t).expect("input");
        let name = (self.fusion.node(t).name.clone()).unwrap_or(format!("input{index}"));
        self.add_buffer(&name, dtype, shape, Role::Input(index))
    }

    /// A block over `iters` storing `value` into a new intermediate of
    /// `shape` at the output axes.
    fn store(
        &mut self,
        name: &str,
        dtype: DType,
        shape: &[u64],
        iters: Vec<IterVar>,
        value: Expr,
        reduce: Option<ReduceOp>,
    ) -> Value {
        let buffer = self.add_buffer(name, dtype, shape, Role::Temp);
        let indices = identity_indices(shape.len());
        self.add_block(name, iters, buffer, indices, value, reduce);
        Value::Buffer(buffer)
    }

    /// The value of an elementwise (or data movement) `op` at one element
    /// of its output of `shape`.
    fn elementwise(&self, op: &Op, args: &[TensorId], shape: &[u64]) -> Expr {
        let operand = |i: usize| Box::new(self.operand(args[i], shape));
        let wide = |i: usize| Box::new(self.wide_operand(args[i], shape));
        let dtype = self.dtype(args[0]);
        match op {
            Op::Unary { func } => narrow(Expr::Unary(*func, wide(0)), dtype),
            Op::Binary { func } if func.is_comparison() => Expr::Binary(*func, wide(0), wide(1)),
            Op::Binary { func } => narrow(Expr::Binary(*func, wide(0), wide(1)), dtype),
            Op::Where => Expr::Select(operand(0), operand(1), operand(2)),
            Op::Cast { dtype } => Expr::Cast(*dtype, operand(0)),
            Op::Broadcast { .. } => *operand(0),
            Op::Permute { perm } => {
                let mut indices = vec![Index::Const(0); perm.len()];
                for (i, &p) in perm.iter().enumerate() {
                    indices[p] = Index::var(Var::Iter(i as u32));
                }
                self.load(args[0], indices)
            }
            Op::Reshape { .. } => {
                let from = shape_of(self.fusion, args[0]);
                self.load(args[0], reshape_indices(shape, &from))
            }
            Op::Input { .. } | Op::Constant { .. } | Op::Reduce { .. } | Op::Matmul { .. } => {
                unreachable!("lower_node lowers {} itself", op.name())
            }
        }
    }

    fn lower_reduce(
        &mut self,
        name: &str,
        t: TensorId,
        func: ReduceOp,
        x: TensorId,
        axes: &[usize],
        keepdims: bool,
    ) -> Value {
        let in_shape = shape_of(self.fusion, x);
        let out_shape = shape_of(self.fusion, t);
        let dtype = self.fusion.ty(t).expect("verified").dtype;
        let iters: Vec<IterVar> = in_shape
            .iter()
            .enumerate()
            .map(|(a, &extent)| IterVar {
                name: format!("v{a}"),
                extent,
                kind: if axes.contains(&a) {
                    IterKind::Reduce
                } else {
                    IterKind::Spatial
                },
            })
            .collect();
        let store: Vec<Index> = (0..in_shape.len())
            .filter_map(|a| match (axes.contains(&a), keepdims) {
                (false, _) => Some(Index::var(Var::Iter(a as u32))),
                (true, true) => Some(Index::Const(0)),
                (true, false) => None,
            })
            .collect();
        let mut iters = iters;
        let mut value = widen(
            self.load(x, identity_indices(in_shape.len())),
            self.dtype(x),
        );
        // Halves accumulate in f32 (`Value::Narrowed`).
        let (half, dtype) = (dtype, dtype.compute());
        // A mean is a sum, then a division below.
        let summed = if func == ReduceOp::Mean {
            ReduceOp::Sum
        } else {
            func
        };
        let op = over_one_identity_if_empty(&mut iters, &mut value, summed, dtype);
        if func != ReduceOp::Mean {
            let buffer = self.add_buffer(name, dtype, &out_shape, Role::Temp);
            self.add_block(name, iters, buffer, store, value, Some(op));
            return narrowed(Value::Buffer(buffer), half);
        }
        let sum_name = format!("{name}_sum");
        let sum = self.add_buffer(&sum_name, dtype, &out_shape, Role::Temp);
        self.add_block(&sum_name, iters, sum, store, value, Some(op));
        let count: u64 = axes.iter().map(|&a| in_shape[a]).product();
        let rank = out_shape.len();
        // The mean of nothing is NaN (0 / 0), not what a device's division
        // by a constant 0 happens to give.
        let scaled = if count == 0 {
            Expr::Const {
                value: f64::NAN,
                dtype,
            }
        } else {
            Expr::Binary(
                BinaryOp::Div,
                Box::new(Expr::Load {
                    buffer: sum,
                    indices: identity_indices(rank),
                }),
                Box::new(Expr::Const {
                    value: count as f64,
                    dtype,
                }),
            )
        };
        let buffer = self.add_buffer(name, half, &out_shape, Role::Temp);
        self.add_block(
            name,
            IterVar::spatial(&out_shape),
            buffer,
            identity_indices(rank),
            narrow(scaled, half),
            None,
        );
        Value::Buffer(buffer)
    }

    fn matmul_body(&self, a: TensorId, b: TensorId, ta: bool, tb: bool) -> (Vec<IterVar>, Expr) {
        let (at, bt) = (
            self.fusion.ty(a).expect("verified"),
            self.fusion.ty(b).expect("verified"),
        );
        let dims = matmul_dims(at, bt, ta, tb).expect("verified");
        let nb = dims.batch.len();
        let mut iters = IterVar::spatial(&dims.batch.iter().map(|&d| d as u64).collect::<Vec<_>>());
        for (name, extent, kind) in [
            ("m", dims.m, IterKind::Spatial),
            ("n", dims.n, IterKind::Spatial),
            ("k", dims.k, IterKind::Reduce),
        ] {
            iters.push(IterVar {
                name: format!("v{name}"),
                extent: extent as u64,
                kind,
            });
        }
        let [m, n, k] = [nb, nb + 1, nb + 2].map(|i| Index::var(Var::Iter(i as u32)));
        let operand = |t: TensorId, row: Index, col: Index, transpose: bool| {
            let shape = shape_of(self.fusion, t);
            let batch = &shape[..shape.len() - 2];
            let pad = nb - batch.len();
            let mut indices: Vec<Index> = batch
                .iter()
                .enumerate()
                .map(|(i, &d)| {
                    if d == 1 && dims.batch[i + pad] != 1 {
                        Index::Const(0)
                    } else {
                        Index::var(Var::Iter((i + pad) as u32))
                    }
                })
                .collect();
            if transpose {
                indices.extend([col, row])
            } else {
                indices.extend([row, col])
            }
            self.load(t, indices)
        };
        let value = Expr::Binary(
            BinaryOp::Mul,
            Box::new(widen(operand(a, m, k.clone(), ta), self.dtype(a))),
            Box::new(widen(operand(b, k, n, tb), self.dtype(b))),
        );
        (iters, value)
    }
}

/// The value of a `dtype` tensor held in accumulator `acc`.
fn narrowed(acc: Value, dtype: DType) -> Value {
    match acc {
        Value::Buffer(b) if dtype.is_half() => Value::Narrowed(b, dtype),
        other => other,
    }
}

/// A reduction over an empty domain (an axis of extent 0, a matmul with
/// k = 0) becomes one over a single term, the identity: every device then
/// gives the identity (sum 0, max -inf, min +inf; a mean's 0 / 0 is NaN)
/// with the same loops, instead of never initializing its output. Returns
/// the reduction to use (a sum becomes a max, see below).
fn over_one_identity_if_empty(
    iters: &mut [IterVar],
    value: &mut Expr,
    func: ReduceOp,
    dtype: DType,
) -> ReduceOp {
    let reduce = |it: &IterVar| it.kind == IterKind::Reduce;
    if !iters.iter().any(|it| reduce(it) && it.extent == 0) {
        return func;
    }
    for it in iters.iter_mut().filter(|it| reduce(it)) {
        it.extent = 1;
    }
    // A sum of nothing is +0, but -0 (the identity) + +0 may be compiled
    // as -0 (a compiler may fold x + 0 into x): the max of one +0 is +0
    // whatever a compiler assumes.
    let (term, op) = match func {
        ReduceOp::Sum | ReduceOp::Mean => (0.0, ReduceOp::Max),
        _ => (tilefuse_ir::reduce_identity(func, dtype).as_f64(), func),
    };
    *value = Expr::Const { value: term, dtype };
    op
}

/// Indices into a `from`-shaped tensor for the element at the output
/// iterators of a reshape to `to` (both row-major).
fn reshape_indices(to: &[u64], from: &[u64]) -> Vec<Index> {
    let mut flat = Index::Const(0);
    let mut stride = 1i64;
    for a in (0..to.len()).rev() {
        flat = Index::var(Var::Iter(a as u32)) * stride + flat;
        stride *= to[a] as i64;
    }
    let mut stride = 1i64;
    let mut out = vec![Index::Const(0); from.len()];
    for a in (0..from.len()).rev() {
        let extent = from[a] as i64;
        out[a] = if a == 0 {
            flat.clone() / stride
        } else {
            flat.clone() / stride % extent
        };
        stride *= extent;
    }
    out
}
