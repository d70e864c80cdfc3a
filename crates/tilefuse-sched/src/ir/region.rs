//! Regions: the part of a buffer that one iteration of a loop touches,
//! derived from affine index expressions. `compute_at` places blocks with
//! them and buffer realization sizes workgroup / private buffers with them.

use super::index::{Index, LoopId, Var};
use super::kernel::{Block, Kernel, Node};

/// Per dimension: a start (a function of the loop and the loops around
/// it) and an extent.
pub struct Region {
    pub start: Vec<Index>,
    pub extent: Vec<u64>,
}

/// Why no region could be derived.
pub enum RegionError {
    /// Index `dim` is not affine in the inner loop.
    NotAffine { dim: usize, inner: LoopId },
    /// Two accesses' starts move differently with the outer loops.
    Diverging,
}

impl Block {
    /// Index expressions over this block's iterators, with the iterators
    /// replaced by their bindings: functions of loop variables.
    pub fn over_loops(&self, indices: &[Index]) -> Vec<Index> {
        indices
            .iter()
            .map(|ix| {
                ix.subst(&|v| match v {
                    Var::Iter(i) => Some(self.bindings[i as usize].clone()),
                    Var::Loop(_) => None,
                })
            })
            .collect()
    }
}

impl Kernel {
    /// Loops strictly inside loop `l`, outermost first.
    pub fn loops_inside(&self, l: LoopId) -> Vec<LoopId> {
        fn walk(nodes: &[Node], out: &mut Vec<LoopId>) {
            for n in nodes {
                if let Node::Loop(id, body) = n {
                    out.push(*id);
                    walk(body, out);
                }
            }
        }
        let mut out = Vec::new();
        if let Some(Node::Loop(_, body)) = self.loop_node(l) {
            walk(body, &mut out);
        }
        out
    }

    /// The region of a `rank`-dimensional buffer that `accesses` (index
    /// expressions over loop variables) touch in one iteration of `l`.
    pub fn region(
        &self,
        l: LoopId,
        rank: usize,
        accesses: &[Vec<Index>],
    ) -> Result<Region, RegionError> {
        let inner = self.loops_inside(l);
        let mut start: Vec<Option<Index>> = vec![None; rank];
        let mut lo = vec![i64::MAX; rank];
        let mut hi = vec![i64::MIN; rank];
        for access in accesses {
            for (dim, ix) in access.iter().enumerate() {
                let mut rest = ix.clone();
                let (mut min, mut max) = (0i64, 0i64);
                for &v in &inner {
                    let (c, r) = rest
                        .linear_in(Var::Loop(v))
                        .ok_or(RegionError::NotAffine { dim, inner: v })?;
                    let span = c * (self.loop_(v).extent as i64 - 1);
                    min += span.min(0);
                    max += span.max(0);
                    rest = r;
                }
                if start[dim].as_ref().is_some_and(|s| *s != rest) {
                    return Err(RegionError::Diverging);
                }
                start[dim] = Some(rest);
                lo[dim] = lo[dim].min(min);
                hi[dim] = hi[dim].max(max);
            }
        }
        Ok(Region {
            start: start
                .into_iter()
                .zip(&lo)
                .map(|(s, &m)| s.unwrap_or(Index::Const(0)) + Index::Const(m))
                .collect(),
            extent: lo
                .iter()
                .zip(&hi)
                .map(|(&a, &b)| (b - a + 1) as u64)
                .collect(),
        })
    }
}
