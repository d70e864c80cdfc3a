//! What a fusion computes and costs, read from its ops alone (no schedule):
//! the work and compulsory memory traffic that throughput is reported
//! against, and the shape of every matmul and reduction. Workloads,
//! `Engine.inspect` and the benches all count with these rules, so every
//! device reports the same GFLOP/s for the same fusion.

use serde::Serialize;

use crate::fusion::{Fusion, TensorId};
use crate::infer::matmul_dims;
use crate::op::{Op, ReduceOp};
use crate::shape::{Shape, numel};

/// Work and compulsory traffic of a fusion.
///
/// Counting rules, one per op:
/// - a unary, binary or `where` op: one flop per output element,
///   transcendental functions included (as Triton's and nvFuser's reports
///   count them);
/// - a reduction: one flop per element reduced, and `mean` one more per
///   result (its division);
/// - a matmul: `2·m·n·k` per batch element;
/// - inputs, constants, casts and layout ops (broadcast, permute, reshape):
///   none.
///
/// Bytes are what an ideal fused kernel must move: every input read once and
/// every output written once, in the host's element sizes (`bool` is one
/// byte, as numpy stores it); intermediates are assumed to stay on chip.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Complexity {
    pub flops: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
}

/// One matmul of a fusion, after its transposes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MatmulSummary {
    /// The broadcast batch shape (empty for a plain 2-D matmul).
    pub batch: Shape,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub transpose_a: bool,
    pub transpose_b: bool,
}

/// One reduction of a fusion.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReductionSummary {
    /// `sum`, `max`, `min` or `mean`.
    pub op: &'static str,
    /// The shape of the tensor reduced.
    pub shape: Shape,
    pub axes: Vec<usize>,
}

/// Everything [`summarize`] reads from a fusion.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub complexity: Complexity,
    pub matmuls: Vec<MatmulSummary>,
    pub reductions: Vec<ReductionSummary>,
}

/// The work, traffic, matmuls and reductions of `fusion`.
pub fn summarize(fusion: &Fusion) -> Summary {
    let mut summary = Summary {
        complexity: Complexity {
            flops: 0,
            bytes_read: traffic(fusion, fusion.inputs()),
            bytes_written: traffic(fusion, fusion.outputs()),
        },
        matmuls: Vec::new(),
        reductions: Vec::new(),
    };
    for (i, node) in fusion.nodes().iter().enumerate() {
        let ty = |n: usize| &fusion.types()[node.args[n].0];
        let out = numel(&fusion.types()[i].shape) as u64;
        summary.complexity.flops += match &node.op {
            Op::Unary { .. } | Op::Binary { .. } | Op::Where => out,
            Op::Reduce { func, axes, .. } => {
                let input = &ty(0).shape;
                summary.reductions.push(ReductionSummary {
                    op: func.name(),
                    shape: input.clone(),
                    axes: axes.clone(),
                });
                numel(input) as u64 + if *func == ReduceOp::Mean { out } else { 0 }
            }
            Op::Matmul {
                transpose_a,
                transpose_b,
                ..
            } => {
                let dims = matmul_dims(ty(0), ty(1), *transpose_a, *transpose_b)
                    .expect("a verified fusion's matmul operands fit");
                let flops = 2 * (numel(&dims.batch) * dims.m * dims.n * dims.k) as u64;
                summary.matmuls.push(MatmulSummary {
                    batch: dims.batch,
                    m: dims.m,
                    n: dims.n,
                    k: dims.k,
                    transpose_a: *transpose_a,
                    transpose_b: *transpose_b,
                });
                flops
            }
            Op::Input { .. }
            | Op::Constant { .. }
            | Op::Cast { .. }
            | Op::Broadcast { .. }
            | Op::Permute { .. }
            | Op::Reshape { .. } => 0,
        };
    }
    summary
}

fn traffic(fusion: &Fusion, tensors: &[TensorId]) -> u64 {
    tensors
        .iter()
        .map(|&t| {
            let ty = &fusion.types()[t.0];
            numel(&ty.shape) as u64 * ty.dtype.size_bytes() as u64
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::op::{BinaryOp, UnaryOp};

    /// `x @ w + bias`, relu: the hand count is 2·m·n·k for the matmul and
    /// one flop per output element for the add and the relu.
    #[test]
    fn matmul_with_an_epilogue_counts_2mnk_plus_one_per_output_per_op() {
        let (m, n, k) = (64, 32, 16);
        let mut f = Fusion::new();
        let x = f.input(&[m, k], DType::F32, Some("x")).unwrap();
        let w = f.input(&[n, k], DType::F32, Some("w")).unwrap();
        let bias = f.input(&[n], DType::F32, Some("bias")).unwrap();
        let y = f.matmul(x, w, false, true).unwrap();
        let y = f.binary(BinaryOp::Add, y, bias).unwrap();
        let y = f.unary(UnaryOp::Relu, y).unwrap();
        f.output(y).unwrap();
        let s = summarize(&f);
        let (m, n, k) = (m as u64, n as u64, k as u64);
        assert_eq!(s.complexity.flops, 2 * m * n * k + 2 * m * n);
        assert_eq!(s.complexity.bytes_read, 4 * (m * k + n * k + n));
        assert_eq!(s.complexity.bytes_written, 4 * m * n);
        assert_eq!(
            s.matmuls,
            [MatmulSummary {
                batch: vec![],
                m: 64,
                n: 32,
                k: 16,
                transpose_a: false,
                transpose_b: true
            }]
        );
        assert!(s.reductions.is_empty());
    }

    /// Softmax over rows: max, subtract, exp, sum, divide = 5 per element.
    #[test]
    fn softmax_counts_five_flops_per_element() {
        let (rows, cols) = (8, 128);
        let mut f = Fusion::new();
        let x = f.input(&[rows, cols], DType::F32, None).unwrap();
        let mx = f.reduce(ReduceOp::Max, x, Some(&[1]), true).unwrap();
        let e = f.binary(BinaryOp::Sub, x, mx).unwrap();
        let e = f.unary(UnaryOp::Exp, e).unwrap();
        let s = f.reduce(ReduceOp::Sum, e, Some(&[-1]), true).unwrap();
        let y = f.binary(BinaryOp::Div, e, s).unwrap();
        f.output(y).unwrap();
        let s = summarize(&f);
        let elems = (rows * cols) as u64;
        assert_eq!(s.complexity.flops, 5 * elems);
        assert_eq!(s.complexity.bytes_read, 4 * elems);
        assert_eq!(s.complexity.bytes_written, 4 * elems);
        let ops: Vec<_> = s
            .reductions
            .iter()
            .map(|r| (r.op, r.axes.clone()))
            .collect();
        assert_eq!(ops, [("max", vec![1]), ("sum", vec![1])]);
    }

    /// Batched matmul: 2·m·n·k per batch element; `mean` adds its division;
    /// casts and layout ops are free; a bool output is one byte per element.
    #[test]
    fn batch_mean_layout_ops_and_bool_outputs_follow_the_rules() {
        let mut f = Fusion::new();
        let a = f.input(&[3, 4, 5], DType::F32, None).unwrap();
        let b = f.input(&[5, 6], DType::F32, None).unwrap();
        let c = f.matmul(a, b, false, false).unwrap();
        let t = f.permute(c, &[0, 2, 1]).unwrap();
        let mean = f.reduce(ReduceOp::Mean, t, Some(&[2]), false).unwrap();
        let zero = f.constant(0.0, DType::F32).unwrap();
        let mask = f.binary(BinaryOp::Gt, mean, zero).unwrap();
        f.output(mask).unwrap();
        let s = summarize(&f);
        let matmul = 2 * 3 * 4 * 6 * 5;
        let (reduced, means) = (3 * 6 * 4, 3 * 6);
        assert_eq!(s.complexity.flops, matmul + reduced + means + 3 * 6);
        assert_eq!(s.complexity.bytes_read, 4 * (3 * 4 * 5 + 5 * 6));
        assert_eq!(s.complexity.bytes_written, 3 * 6);
        assert_eq!(s.matmuls[0].batch, vec![3]);
    }
}
