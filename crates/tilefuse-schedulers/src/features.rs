//! What a fusion looks like to a heuristic: the scheduler that takes it and
//! the sizes its decisions turn on (the matmul's problem, the reduction's
//! rows and reduced extent, how many ops a kernel computes). Seed
//! heuristics read it to decide whether they apply.

use serde::Serialize;
use tilefuse_ir::Fusion;
use tilefuse_params::SchedulerKind;

use super::{accepted, matmul, reduction};

/// The shape of a fusion's reduction: `outer × reduced × inner` over the
/// reference shape, `inner == 1` for a reduction along the fastest axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ReductionShape {
    pub outer: u64,
    pub reduced: u64,
    pub inner: u64,
}

/// The facts seed heuristics decide on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Features {
    pub scheduler: SchedulerKind,
    /// Ops that compute something (not inputs, constants or layout).
    pub compute_ops: usize,
    /// `[m, n, k]` of the matmul.
    pub matmul: Option<[u64; 3]>,
    pub reduction: Option<ReductionShape>,
}

/// The features of `fusion` as the scheduler that takes it sees them.
pub fn features(fusion: &Fusion) -> Result<Features, String> {
    let (kind, canon) = accepted(fusion, None).map_err(|e| e.message)?;
    let compute_ops = canon.nodes().iter().filter(|n| n.op.computes()).count();
    let matmul = (kind == SchedulerKind::Matmul).then(|| {
        let (m, n, k) = matmul::problem(&canon);
        [m, n, k]
    });
    let reduction = match kind {
        SchedulerKind::Reduction => Some(reduction::shape(&canon)?),
        _ => None,
    };
    Ok(Features {
        scheduler: kind,
        compute_ops,
        matmul,
        reduction,
    })
}
