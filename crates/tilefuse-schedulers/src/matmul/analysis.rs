//! What the matmul scheduler reads off a fusion: whether it takes it
//! (one matmul, pointwise around it), the problem size, batching.

use tilefuse_ir::{Fusion, Op, matmul_dims};

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
pub(crate) fn problem(fusion: &Fusion) -> (u64, u64, u64) {
    let node = fusion
        .nodes()
        .iter()
        .find(|n| matches!(n.op, Op::Matmul { .. }))
        .expect("accepts checked");
    let Op::Matmul {
        transpose_a,
        transpose_b,
        ..
    } = node.op
    else {
        unreachable!("a matmul")
    };
    let ty = |i: usize| fusion.ty(node.args[i]).expect("verified");
    let d = matmul_dims(ty(0), ty(1), transpose_a, transpose_b).expect("verified");
    (d.m as u64, d.n as u64, d.k as u64)
}

/// Matrices the fusion's output holds: the product of its dims but the
/// last two (1 for a matrix).
pub(super) fn batches(fusion: &Fusion) -> u64 {
    let shape = fusion
        .outputs()
        .first()
        .map(|&o| &fusion.ty(o).expect("verified").shape);
    let dims = shape.map_or(&[][..], |s| &s[..s.len().saturating_sub(2)]);
    dims.iter().map(|&d| d as u64).product()
}

pub(super) fn fusion_has_batch(fusion: &Fusion) -> bool {
    fusion
        .outputs()
        .first()
        .is_some_and(|&o| fusion.ty(o).expect("verified").shape.len() > 2)
}
