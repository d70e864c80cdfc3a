//! The fusion the schedulers see. Ops no output depends on are dropped
//! (a dead reduction would otherwise make the reduction scheduler refuse
//! a fusion whose live ops it takes). A reduction's axes of extent 1 reduce
//! nothing and are dropped (a reduction left with none is a reshape; the
//! reduction scheduler would take its output, shaped like its input, for a
//! full-shape block). Reduced axes that are not adjacent
//! (`x.sum(axis=(0, 2))`) are moved after the kept ones by a permute, so
//! the reduction is over trailing axes, which the reduction scheduler's
//! outer x reduced x inner model takes. Inputs and outputs are unchanged,
//! so a kernel of the canonical fusion runs the original's arguments.

use std::borrow::Cow;
use std::collections::HashMap;

use tilefuse_ir::{Fusion, FusionError, Op, ReduceOp, TensorId};

/// `fusion` itself when it needs no rewrite, else its canonical form.
pub fn canonical(fusion: &Fusion) -> Result<Cow<'_, Fusion>, String> {
    let live = live(fusion);
    let rewritten = |i: usize| reduced_axes(fusion, i).is_some_and(|(all, kept)| all != kept);
    if !(0..fusion.nodes().len()).any(|i| !live[i] || rewritten(i) || scattered(fusion, i)) {
        return Ok(Cow::Borrowed(fusion));
    }
    rebuild(fusion, &live)
        .map(Cow::Owned)
        .map_err(|e| format!("canonicalizing the fusion: {e}"))
}

/// A reduction node's axes, and those of them that reduce something
/// (extent 0 counts: an empty reduction gives its identity).
fn reduced_axes(fusion: &Fusion, i: usize) -> Option<(Vec<usize>, Vec<usize>)> {
    let node = &fusion.nodes()[i];
    let Op::Reduce { axes, .. } = &node.op else {
        return None;
    };
    let shape = &fusion.ty(node.args[0]).ok()?.shape;
    let kept = axes.iter().copied().filter(|&a| shape[a] != 1).collect();
    Some((axes.clone(), kept))
}

fn scattered(fusion: &Fusion, i: usize) -> bool {
    reduced_axes(fusion, i).is_some_and(|(_, axes)| axes.windows(2).any(|w| w[1] != w[0] + 1))
}

/// Which nodes an output depends on, and the inputs (the arguments stay
/// as they are); the others are dead code.
pub(crate) fn live(fusion: &Fusion) -> Vec<bool> {
    let nodes = fusion.nodes();
    let mut live: Vec<bool> = (nodes.iter())
        .map(|n| matches!(n.op, Op::Input { .. }))
        .collect();
    for t in fusion.outputs() {
        live[t.0] = true;
    }
    for (i, node) in nodes.iter().enumerate().rev() {
        if live[i] {
            for a in &node.args {
                live[a.0] = true;
            }
        }
    }
    live
}

fn rebuild(fusion: &Fusion, live: &[bool]) -> Result<Fusion, FusionError> {
    let mut f = Fusion::new();
    let mut map: HashMap<TensorId, TensorId> = HashMap::new();
    for (i, node) in fusion.nodes().iter().enumerate() {
        if !live[i] {
            continue;
        }
        let id = TensorId(i);
        let name = node.name.as_deref();
        let args: Vec<TensorId> = node.args.iter().map(|a| map[a]).collect();
        let new = match (&node.op, reduced_axes(fusion, i)) {
            (Op::Input { .. }, _) => {
                let ty = fusion.ty(id)?;
                f.input(&ty.shape, ty.dtype, name)?
            }
            (Op::Reduce { func, keepdims, .. }, Some((all, axes)))
                if all != axes || scattered(fusion, i) =>
            {
                let out: Vec<i64> = fusion.ty(id)?.shape.iter().map(|&d| d as i64).collect();
                let reduced = reduce_trailing(&mut f, *func, args[0], &axes, *keepdims)?;
                let shaped = if f
                    .ty(reduced)?
                    .shape
                    .iter()
                    .map(|&d| d as i64)
                    .eq(out.iter().copied())
                {
                    reduced
                } else {
                    f.reshape(reduced, &out)?
                };
                if let (Some(name), true) = (name, shaped != args[0]) {
                    f.set_name(shaped, name)?;
                }
                shaped
            }
            (op, _) => f.add(op.clone(), &args, name)?,
        };
        map.insert(id, new);
    }
    for t in fusion.outputs() {
        f.output(map[t])?;
    }
    Ok(f)
}

/// `func` of `x` over `axes` (none: `x` itself), the axes first moved after
/// the others when they are not adjacent.
fn reduce_trailing(
    f: &mut Fusion,
    func: ReduceOp,
    x: TensorId,
    axes: &[usize],
    keepdims: bool,
) -> Result<TensorId, FusionError> {
    if axes.is_empty() {
        return Ok(x);
    }
    let rank = f.ty(x)?.shape.len();
    if axes.windows(2).all(|w| w[1] == w[0] + 1) {
        let axes: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
        return f.reduce(func, x, Some(&axes), keepdims);
    }
    let kept = (0..rank).filter(|a| !axes.contains(a));
    let perm: Vec<i64> = kept.chain(axes.iter().copied()).map(|a| a as i64).collect();
    let moved = f.permute(x, &perm)?;
    let trailing: Vec<i64> = (rank - axes.len()..rank).map(|a| a as i64).collect();
    f.reduce(func, moved, Some(&trailing), keepdims)
}

#[cfg(test)]
mod tests {
    use tilefuse_ir::{DType, ReduceOp, evaluate};

    use super::*;
    use tilefuse_testing::{compare, inputs};

    /// The canonical fusion computes exactly what the original does.
    fn same_meaning(f: &Fusion, c: &Fusion) {
        let args = inputs(f, 3);
        compare(
            &evaluate(f, &args).unwrap(),
            &evaluate(c, &args).unwrap(),
            0.0,
        )
        .unwrap();
    }

    #[test]
    fn scattered_reductions_become_permute_and_trailing_reduction() {
        for keepdims in [false, true] {
            let mut f = Fusion::new();
            let x = f.input(&[3, 4, 5, 2], DType::F32, Some("x")).unwrap();
            let r = f.reduce(ReduceOp::Max, x, Some(&[0, 2]), keepdims).unwrap();
            f.output(r).unwrap();
            let c = canonical(&f).unwrap();
            assert!(matches!(c, Cow::Owned(_)));
            assert_eq!(c.ty(c.outputs()[0]).unwrap(), f.ty(r).unwrap());
            same_meaning(&f, &c);
        }
    }

    #[test]
    fn axes_of_extent_one_are_dropped() {
        for keepdims in [false, true] {
            let mut f = Fusion::new();
            let x = f.input(&[1, 4, 1], DType::F32, Some("x")).unwrap();
            let m = f
                .reduce(ReduceOp::Mean, x, Some(&[0, 2]), keepdims)
                .unwrap();
            let s = f.reduce(ReduceOp::Sum, x, Some(&[0, 1]), keepdims).unwrap();
            f.output(m).unwrap();
            f.output(s).unwrap();
            let c = canonical(&f).unwrap();
            let reductions = c
                .nodes()
                .iter()
                .filter(|n| matches!(n.op, Op::Reduce { .. }));
            assert_eq!(reductions.count(), 1, "{}", *c);
            same_meaning(&f, &c);
        }
    }

    #[test]
    fn dead_ops_are_dropped_and_inputs_kept() {
        let mut f = Fusion::new();
        let x = f.input(&[3, 4], DType::F32, None).unwrap();
        let unused = f.input(&[2], DType::F32, None).unwrap();
        f.reduce(ReduceOp::Sum, x, Some(&[0]), false).unwrap();
        let all = f.reduce(ReduceOp::Sum, x, None, false).unwrap();
        f.unary(tilefuse_ir::UnaryOp::Exp, unused).unwrap();
        f.output(all).unwrap();
        assert!(crate::can_schedule(&f, tilefuse_params::SchedulerKind::Reduction).is_ok());
        let c = canonical(&f).unwrap();
        assert_eq!(c.nodes().len(), 3, "{}", *c);
        assert_eq!(c.inputs().len(), 2);
        same_meaning(&f, &c);
    }

    #[test]
    fn adjacent_reductions_are_left_alone() {
        let mut f = Fusion::new();
        let x = f.input(&[3, 4, 5], DType::F32, None).unwrap();
        let r = f.reduce(ReduceOp::Sum, x, Some(&[1, 2]), false).unwrap();
        f.output(r).unwrap();
        assert!(matches!(canonical(&f).unwrap(), Cow::Borrowed(_)));
    }
}
