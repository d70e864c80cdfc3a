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
        self.region_over(&self.loops_inside(l), rank, accesses)
    }

    /// The region `accesses` touch as the loops `inner` run (the other
    /// loops fixed).
    pub fn region_over(
        &self,
        inner: &[LoopId],
        rank: usize,
        accesses: &[Vec<Index>],
    ) -> Result<Region, RegionError> {
        let dims = (0..rank)
            .map(|dim| self.dim_region(inner, dim, accesses))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Region::from_dims(dims))
    }

    /// Like [`Kernel::region`], but a dimension whose indices are not
    /// affine in the inner loops (a fused index divided back into
    /// dimensions) spans its whole extent in `shape`.
    pub fn region_or_whole(&self, l: LoopId, shape: &[u64], accesses: &[Vec<Index>]) -> Region {
        let inner = self.loops_inside(l);
        let dims = (0..shape.len())
            .map(|dim| {
                self.dim_region(&inner, dim, accesses)
                    .unwrap_or((Index::Const(0), shape[dim]))
            })
            .collect();
        Region::from_dims(dims)
    }

    /// Start and extent of dimension `dim` over one iteration of the loops
    /// outside `inner`.
    fn dim_region(
        &self,
        inner: &[LoopId],
        dim: usize,
        accesses: &[Vec<Index>],
    ) -> Result<(Index, u64), RegionError> {
        let mut start: Option<Index> = None;
        let (mut lo, mut hi) = (i64::MAX, i64::MIN);
        for access in accesses {
            let mut rest = access[dim].clone();
            let (mut min, mut max) = (0i64, 0i64);
            for &v in inner {
                let (c, r) = rest
                    .linear_in(Var::Loop(v))
                    .ok_or(RegionError::NotAffine { dim, inner: v })?;
                let span = c * (self.loop_(v).extent as i64 - 1);
                min += span.min(0);
                max += span.max(0);
                rest = r;
            }
            if start.as_ref().is_some_and(|s| *s != rest) {
                return Err(RegionError::Diverging);
            }
            start = Some(rest);
            lo = lo.min(min);
            hi = hi.max(max);
        }
        match start {
            Some(s) => Ok((s + Index::Const(lo), (hi - lo + 1) as u64)),
            None => Ok((Index::Const(0), 1)),
        }
    }
}

impl Region {
    fn from_dims(dims: Vec<(Index, u64)>) -> Region {
        let (start, extent) = dims.into_iter().unzip();
        Region { start, extent }
    }
}
