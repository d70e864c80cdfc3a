//! Regions: the part of a buffer that one iteration of a loop touches,
//! derived from index expressions whose terms each depend on the loops
//! outside (the start) or inside (the extent, from the term's range, so a
//! quotient or remainder of a fused loop counts) but not both. `compute_at`
//! places blocks with them and buffer realization sizes workgroup /
//! private buffers with them.

use super::index::{BufferId, Index, LoopId, Var};
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

    /// This block's accesses to `buffer` over loop variables, its store
    /// first: whether each writes, and its indices.
    pub fn accesses(&self, buffer: BufferId) -> Vec<(bool, Vec<Index>)> {
        let mut loads = Vec::new();
        self.value.loads(&mut loads);
        let store = (self.buffer == buffer).then(|| (true, self.over_loops(&self.indices)));
        (store.into_iter())
            .chain(
                (loads.into_iter().filter(|(from, _)| *from == buffer))
                    .map(|(_, indices)| (false, self.over_loops(indices))),
            )
            .collect()
    }
}

impl Kernel {
    /// `offset` (an access of `block`) over loop variables, simplified
    /// within the loops' ranges: how an access moves with each loop, for
    /// the vectorizers.
    pub fn offset_over_loops(&self, block: &Block, offset: &Index) -> Index {
        self.within_loops(&block.over_loops(std::slice::from_ref(offset))[0])
    }

    /// `x`, over loop variables, simplified within the loops' ranges (see
    /// [`Index::within`]), then again once its sum has recombined: a
    /// flattened NHWC offset whose (N, H, W) loop is split over workgroups
    /// (`w * 49 + f`) recombines into `(w * 49 + f) % 784`, which is
    /// linear in `f` within its range.
    pub fn within_loops(&self, x: &Index) -> Index {
        let range = |v| self.loop_range(v);
        x.within(&range).simplified().within(&range).simplified()
    }

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

    /// Like [`Kernel::region`], but a dimension whose indices mix inner and
    /// outer loops in one term, or whose region would be no smaller than
    /// the buffer, spans its whole extent in `shape`.
    pub fn region_or_whole(&self, l: LoopId, shape: &[u64], accesses: &[Vec<Index>]) -> Region {
        let inner = self.loops_inside(l);
        let dims = (0..shape.len())
            .map(|dim| match self.dim_region(&inner, dim, accesses) {
                Ok((start, extent)) if extent < shape[dim] => (start, extent),
                _ => (Index::Const(0), shape[dim]),
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
            // Terms over outer loops only make the start; terms over inner
            // loops only add their range (a quotient or remainder of a
            // fused loop included); a term mixing both has no region.
            let mut rest = Index::Const(0);
            let (mut min, mut max) = (0i64, 0i64);
            for term in access[dim].sum_terms() {
                let mut vars = Vec::new();
                term.vars(&mut vars);
                let is_inner = |v: &Var| matches!(v, Var::Loop(l) if inner.contains(l));
                match (vars.iter().any(is_inner), vars.iter().all(is_inner)) {
                    (false, _) => rest = rest + term,
                    (true, true) => {
                        let (a, b) = term.bounds(&|v| self.loop_range(v));
                        min += a;
                        max += b;
                    }
                    (true, false) => {
                        let Some(Var::Loop(v)) = vars.into_iter().find(is_inner) else {
                            unreachable!("an inner loop")
                        };
                        return Err(RegionError::NotAffine { dim, inner: v });
                    }
                }
            }
            if start.as_ref().is_some_and(|s| !s.same_sum(&rest)) {
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
