//! Known values: a load of a buffer that holds one literal everywhere (an
//! empty reduction's result, a copy of one) becomes that literal. A GPU
//! compiler finds such values on its own when the buffer is private, then
//! folds the arithmetic around them as if values were finite (lavapipe gave
//! `3 / (a @ b)` with k = 0 as 0, not inf); as a literal, codegen spells
//! out the IEEE result as it does for every literal zero.

use std::collections::HashMap;

use tilefuse_ir::{DType, ReduceOp, Scalar, reduce_identity};

use super::{LowerError, Lowered};
use crate::ir::{Block, BufferId, Expr, Kernel, Role};

pub(super) fn run(l: &mut Lowered) -> Result<(), LowerError> {
    let known = known_buffers(&l.kernel);
    if known.is_empty() {
        return Ok(());
    }
    for b in l.kernel.blocks_in_order() {
        let block = l.kernel.block_mut(b);
        block.value = block
            .value
            .map_loads(&mut |buffer, indices| match known.get(&buffer) {
                Some(&(value, dtype)) => Expr::Const { value, dtype },
                None => Expr::Load {
                    buffer,
                    indices: indices.to_vec(),
                },
            });
    }
    Ok(())
}

/// A literal: its value, as converted to its dtype, and the dtype.
type Literal = (f64, DType);

/// The buffers every write of which stores one literal, to a fixpoint (a
/// copy of a known buffer is known).
fn known_buffers(k: &Kernel) -> HashMap<BufferId, Literal> {
    let blocks = k.blocks_in_order();
    let mut known = HashMap::new();
    loop {
        let before = known.len();
        for (i, buffer) in k.buffers.iter().enumerate() {
            let id = BufferId(i as u32);
            if matches!(buffer.role, Role::Input(_)) || known.contains_key(&id) {
                continue;
            }
            let writers: Vec<&Block> = blocks
                .iter()
                .map(|&b| k.block(b))
                .filter(|b| b.buffer == id)
                .collect();
            if let Some(value) = one_value(&writers, &known) {
                known.insert(id, value);
            }
        }
        if known.len() == before {
            return known;
        }
    }
}

/// The one literal that `writers` leave in their buffer, if they agree on
/// one. A reduction's init (a plain write of its identity) is overwritten
/// by its terms, of which there is at least one per element (an empty
/// domain is lowered as one term).
fn one_value(writers: &[&Block], known: &HashMap<BufferId, Literal>) -> Option<Literal> {
    let reductions: Vec<ReduceOp> = writers.iter().filter_map(|b| b.reduce).collect();
    let is_init = |b: &Block, value: Literal| {
        b.reduce.is_none()
            && reductions
                .iter()
                .any(|&op| same(value, literal(reduce_identity(op, value.1), value.1)))
    };
    let mut result: Option<Literal> = None;
    for b in writers {
        let value = known_value(&b.value, known)?;
        if is_init(b, value) {
            continue;
        }
        let stored = match b.reduce {
            None | Some(ReduceOp::Max | ReduceOp::Min) => value,
            // A sum of +0 terms from -0 is +0; of anything else, it depends
            // on how many terms there are.
            Some(ReduceOp::Sum | ReduceOp::Mean) if same(value, (0.0, value.1)) => value,
            Some(_) => return None,
        };
        match result {
            Some(r) if !same(r, stored) => return None,
            _ => result = Some(stored),
        }
    }
    result
}

fn known_value(e: &Expr, known: &HashMap<BufferId, Literal>) -> Option<Literal> {
    match e {
        Expr::Const { value, dtype } => Some((*value, *dtype)),
        Expr::Load { buffer, .. } => known.get(buffer).copied(),
        _ => None,
    }
}

fn literal(s: Scalar, dtype: DType) -> Literal {
    (s.as_f64(), dtype)
}

/// The same literal, bit for bit (NaN equals NaN, -0 does not equal +0).
fn same(a: Literal, b: Literal) -> bool {
    a.1 == b.1 && a.0.to_bits() == b.0.to_bits()
}
