//! What every reduction of a fusion shares: the reference shape and the
//! reduced axes (the analysis the plan and the nest read).

use tilefuse_ir::{Fusion, Op};

/// The reference shape and reduced axes every reduction shares.
#[derive(Clone, Debug)]
pub(super) struct Topology {
    pub(super) shape: Vec<u64>,
    pub(super) axes: Vec<usize>,
}

impl Topology {
    pub(super) fn product(&self, dims: std::ops::Range<usize>) -> u64 {
        self.shape[dims].iter().product()
    }

    pub(super) fn outer(&self) -> u64 {
        self.product(0..self.axes[0])
    }

    pub(super) fn reduced(&self) -> u64 {
        self.product(self.axes[0]..self.axes[self.axes.len() - 1] + 1)
    }

    pub(super) fn inner(&self) -> u64 {
        self.product(self.axes[self.axes.len() - 1] + 1..self.shape.len())
    }

    /// Rows both outside and inside the reduced axes (`schedule_3d`).
    pub(super) fn three_d(&self) -> bool {
        self.outer() > 1 && self.inner() > 1
    }
}

/// The shared reduction domain of `fusion`, or why there is none.
pub(super) fn topology(fusion: &Fusion) -> Result<Topology, String> {
    let mut found: Option<Topology> = None;
    for node in fusion.nodes() {
        let Op::Reduce { axes, .. } = &node.op else {
            continue;
        };
        let shape: Vec<u64> = fusion
            .ty(node.args[0])
            .expect("a verified fusion")
            .shape
            .iter()
            .map(|&d| d as u64)
            .collect();
        match &found {
            None => {
                found = Some(Topology {
                    shape,
                    axes: axes.clone(),
                })
            }
            Some(t) if t.shape == shape && t.axes == *axes => {}
            Some(t) => {
                return Err(format!(
                    "its reductions differ ({:?} over axes {:?}, {shape:?} over axes {axes:?}); \
                     segment the fusion",
                    t.shape, t.axes
                ));
            }
        }
    }
    let t = found.ok_or("the fusion has no reduction")?;
    if t.axes.is_empty() {
        return Err("a reduction reduces no axis".into());
    }
    if t.axes.windows(2).any(|w| w[1] != w[0] + 1) {
        return Err(format!(
            "it reduces non-adjacent axes {:?}; permute them together first",
            t.axes
        ));
    }
    Ok(t)
}
