//! Index localization: accesses to workgroup and private buffers are
//! written over loop variables and simplified. Realization rebased them to
//! their region, and `(start + i) - start` should read `i`, which lets
//! private arrays stay in registers.

use super::{LowerError, Lowered};
use crate::ir::{self, BufferId, Index, Kernel, Scope};

pub(super) fn run(l: &mut Lowered) -> Result<(), LowerError> {
    for b in l.kernel.blocks_in_order() {
        let localized = localized(&l.kernel, l.kernel.block(b));
        *l.kernel.block_mut(b) = localized;
    }
    Ok(())
}

fn localized(k: &Kernel, original: &ir::Block) -> ir::Block {
    let local = |buf: BufferId| k.buffer(buf).scope != Scope::Global;
    let over = |ix: &[Index]| -> Vec<Index> {
        original
            .over_loops(ix)
            .iter()
            .map(Index::simplified)
            .collect()
    };
    let mut b = original.clone();
    b.value = b.value.map_loads(&mut |buffer, indices| ir::Expr::Load {
        buffer,
        indices: if local(buffer) {
            over(indices)
        } else {
            indices.to_vec()
        },
    });
    if local(b.buffer) {
        b.indices = over(&original.indices);
    }
    b
}
