//! Fused loops split back for the CPU device: a serial loop whose blocks
//! read its variable only as the quotient and remainder of one divisor
//! (`f / 256`, `f % 256`: axes fused into one loop) becomes two loops, the
//! remainder's inside. The CPU device runs an innermost loop as one lane
//! step where its accesses move linearly with it; over a fused loop whose
//! axes are not adjacent in memory they do not, and each lane evaluated
//! its own quotient and remainder (a sum over axes 0 and 2 of 64 x 512 x
//! 256 took 34 ms, numpy 1.9). GPUs keep the loop as scheduled.
//!
//! The inner loop takes the most fused axes it can while its accesses
//! still move linearly: over NCHW's (N, H, W) the split is at H x W, not at
//! W alone, whose lane steps of 32 took a 16 x 64 x 32 x 32 channel sum
//! 10x the time of one over (N, H x W).

use super::{LowerError, Lowered};
use crate::ir::{Block, Index, Kernel, LoopId, LoopKind, Node, Var, flat_offset};

pub(super) fn run(l: &mut Lowered) -> Result<(), LowerError> {
    let k = &mut l.kernel;
    for id in serial_loops(k, &k.body) {
        if let Some(c) = divisor(k, id) {
            split(k, id, c);
        }
    }
    Ok(())
}

/// The serial loops in `nodes`, outermost first.
fn serial_loops(k: &Kernel, nodes: &[Node]) -> Vec<LoopId> {
    let mut out = Vec::new();
    for n in nodes {
        if let Node::Loop(id, body) = n {
            if k.loop_(*id).kind == LoopKind::Serial {
                out.push(*id);
            }
            out.extend(serial_loops(k, body));
        }
    }
    out
}

/// Every index expression of a block: bindings, buffer indices,
/// predicates and its loads' indices.
fn indices(b: &Block) -> Vec<&Index> {
    let mut loads = Vec::new();
    b.value.loads(&mut loads);
    (b.bindings.iter().chain(&b.indices))
        .chain(b.predicates.iter().map(|(x, _)| x))
        .chain(loads.into_iter().flat_map(|(_, ix)| ix))
        .collect()
}

/// Whether an access of block `b` moves with loop variable `v` other than
/// linearly (a fused loop whose axes are adjacent in memory recombines
/// into one that moves linearly, and stays).
fn moves_unevenly(k: &Kernel, b: &Block, v: Var) -> bool {
    let mut loads = Vec::new();
    b.value.loads(&mut loads);
    let accesses = loads.into_iter().chain([(b.buffer, &b.indices[..])]);
    accesses.into_iter().any(|(buffer, ix)| {
        let offset = flat_offset(ix, &k.buffer(buffer).shape);
        k.offset_over_loops(b, &offset).linear_in(v).is_none()
    })
}

/// The divisor `c` of loop `l`'s extent (strictly between 1 and it) to
/// split `l` at, where some access moves unevenly with `l` and every block
/// under `l` reads `l` only through quotients and remainders that `c`
/// splits (see [`split_var`]): the largest over whose remainders every
/// access moves linearly, else the largest.
fn divisor(k: &Kernel, l: LoopId) -> Option<i64> {
    let extent = k.loop_(l).extent as i64;
    let v = Var::Loop(l);
    let blocks = k.blocks_under(l);
    let all: Vec<&Index> = blocks.iter().flat_map(|&b| indices(k.block(b))).collect();
    let mut divisors = Vec::new();
    all.iter().for_each(|x| divisors_of(x, v, &mut divisors));
    // Simplifying the accesses costs more than finding no remainder.
    if divisors.is_empty() || !blocks.iter().any(|&b| moves_unevenly(k, k.block(b), v)) {
        return None;
    }
    divisors.sort_unstable_by(|a, b| b.cmp(a));
    divisors.dedup();
    let splits: Vec<i64> = (divisors.into_iter())
        .filter(|&c| {
            c > 1
                && c < extent
                && extent % c == 0
                && all.iter().all(|x| split_var(x, v, c, v, v).is_some())
        })
        .collect();
    let linear = |&&c: &&i64| {
        let mut k = k.clone();
        let inner = split(&mut k, l, c);
        let blocks = k.blocks_under(inner);
        !(blocks.iter()).any(|&b| moves_unevenly(&k, k.block(b), Var::Loop(inner)))
    };
    splits.iter().find(linear).or(splits.first()).copied()
}

/// Splits loop `l` into itself over the quotients by `c` and a new loop
/// over the remainders inside it, rewriting the blocks under it; the new
/// loop's id.
fn split(k: &mut Kernel, l: LoopId, c: i64) -> LoopId {
    let name = k.loop_(l).name.clone();
    let inner = k.new_loop(format!("{name}_mod{c}"), c as u64);
    k.loop_mut(l).extent /= c as u64;
    let (outer, inner_v) = (Var::Loop(l), Var::Loop(inner));
    for b in k.blocks_under(l) {
        k.block_mut(b)
            .map_indices(|x| split_var(x, outer, c, outer, inner_v).expect("checked"));
    }
    let (siblings, at) = k.find_loop_mut(l).expect("in the tree");
    let Node::Loop(_, body) = &mut siblings[at] else {
        unreachable!("found as a loop")
    };
    let nodes = std::mem::take(body);
    body.push(Node::Loop(inner, nodes));
    inner
}

/// Where `x` could split `v`: the moduli `m` of the remainders `v % m`
/// and the divisors `d` of the quotients `v / d`.
fn divisors_of(x: &Index, v: Var, out: &mut Vec<i64>) {
    match x {
        Index::Mod(y, c) | Index::Div(y, c) if **y == Index::Var(v) => out.push(*c),
        Index::Const(_) | Index::Var(_) => {}
        Index::Add(a, b) => {
            divisors_of(a, v, out);
            divisors_of(b, v, out);
        }
        Index::Mul(a, _) | Index::Div(a, _) | Index::Mod(a, _) => divisors_of(a, v, out),
    }
}

/// `x` with `v` split as `outer * c + inner` (`inner < c`): `v / (c * k)`
/// becomes `outer / k`, `v % m`, for `m` dividing `c`, `inner % m`, and
/// `v / d % m`, for `d * m` dividing `c`, `inner / d % m` (`inner / d`
/// where `d * m` is `c`: an axis fused between two others); `None` where
/// `v` stands otherwise.
fn split_var(x: &Index, v: Var, c: i64, outer: Var, inner: Var) -> Option<Index> {
    if let Index::Mod(y, m) = x
        && let Index::Div(z, d) = &**y
        && **z == Index::Var(v)
        && c % (d * m) == 0
    {
        let quotient = Index::Var(inner) / *d;
        return Some(if d * m == c { quotient } else { quotient % *m });
    }
    let split = |y: &Index| split_var(y, v, c, outer, inner);
    Some(match x {
        Index::Var(w) if *w == v => return None,
        Index::Div(y, d) if **y == Index::Var(v) => {
            return (d % c == 0).then(|| Index::Var(outer) / (d / c));
        }
        // `inner < c`: its remainder by `c` is itself.
        Index::Mod(y, m) if **y == Index::Var(v) => {
            return match *m {
                m if m == c => Some(Index::Var(inner)),
                m => (c % m == 0).then(|| Index::Var(inner) % m),
            };
        }
        Index::Const(_) | Index::Var(_) => x.clone(),
        Index::Add(a, b) => split(a)? + split(b)?,
        Index::Mul(a, k) => split(a)? * *k,
        Index::Div(a, d) => split(a)? / *d,
        Index::Mod(a, m) => split(a)? % *m,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_variable_read_as_quotient_and_remainder_splits_in_two() {
        let (v, o, i) = (
            Var::Loop(LoopId(0)),
            Var::Loop(LoopId(1)),
            Var::Loop(LoopId(2)),
        );
        let x = Index::Var(v);
        let split = |e: &Index| split_var(e, v, 8, o, i);
        let e = x.clone() / 16 * 5 + x.clone() % 8 + x.clone() % 4 * 3;
        let mut divisors = Vec::new();
        divisors_of(&e, v, &mut divisors);
        assert_eq!(divisors, [16, 8, 4]);
        let want = Index::Var(o) / 2 * 5 + Index::Var(i) + Index::Var(i) % 4 * 3;
        assert_eq!(split(&e), Some(want));
        // An axis fused between two others: its quotient's remainder.
        assert_eq!(split(&(x.clone() / 2 % 4)), Some(Index::Var(i) / 2));
        assert_eq!(split(&(x.clone() / 2 % 2)), Some(Index::Var(i) / 2 % 2));
        assert_eq!(split(&(x.clone() / 2 % 8)), None);
        // Read whole, or by a divisor the split does not divide: no split.
        assert_eq!(split(&(x.clone() + x.clone() % 8)), None);
        assert_eq!(split(&(x.clone() / 12)), None);
        assert_eq!(split(&(x % 16)), None);
    }
}
