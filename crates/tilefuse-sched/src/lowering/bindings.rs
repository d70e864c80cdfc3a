//! Binding simplification: each block iterator's binding is rewritten
//! within its loops' ranges ([`Index::within`]). Fusing axes and splitting
//! the fused loop binds an iterator to `(f0 * 128 + f1) / 128`, which is
//! `f0` while `f1 < 128`; the region and lane analyses after this pass see
//! a quotient or remainder of a fused loop only where one is really taken,
//! and codegen emits no division where none is needed.

use super::{LowerError, Lowered};
use crate::ir::Index;

pub(super) fn run(l: &mut Lowered) -> Result<(), LowerError> {
    for b in l.kernel.blocks_in_order() {
        let simplified: Vec<Index> = (l.kernel.block(b).bindings.iter())
            .map(|x| l.kernel.within_loops(x))
            .collect();
        l.kernel.block_mut(b).bindings = simplified;
    }
    Ok(())
}
