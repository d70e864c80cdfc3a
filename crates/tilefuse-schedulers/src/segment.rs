//! Segmentation: a fusion that no single scheduler accepts (a matmul
//! followed by a softmax, reductions over different axes) is split into
//! segments, each a fusion of its own that one scheduler accepts, run in
//! order; tensors that cross segments go through device memory.

use std::collections::HashMap;

use tilefuse_ir::{Fusion, Op, TensorId};

use tilefuse_params::SchedulerKind;

use super::can_schedule;
use crate::canonical::live;

/// A part of a fusion that one scheduler accepts.
#[derive(Clone, Debug)]
pub struct Segment {
    /// The part as a fusion of its own.
    pub fusion: Fusion,
    /// The first scheduler that accepts it.
    pub scheduler: SchedulerKind,
    /// The parent fusion's tensors that feed the segment's inputs, in order.
    pub inputs: Vec<TensorId>,
    /// The parent fusion's tensors that the segment's outputs are, in order.
    pub outputs: Vec<TensorId>,
}

/// Splits `fusion` into segments, greedily: ops join the current segment
/// (in the fusion's topological order) while some scheduler accepts it. A
/// fusion one scheduler accepts is one segment.
pub fn segments(fusion: &Fusion) -> Result<Vec<Segment>, String> {
    if fusion.outputs().is_empty() {
        return Err("the fusion has no outputs; call output() first".into());
    }
    let live = live(fusion);
    let compute: Vec<usize> = (0..fusion.nodes().len())
        .filter(|&i| live[i] && computed(fusion, TensorId(i)))
        .collect();
    let mut out = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    let mut accepted: Option<Segment> = None;
    let alone = |n: usize| {
        format!(
            "no scheduler accepts {} ({}) even on its own",
            fusion.label(TensorId(n)),
            fusion.nodes()[n].op.name()
        )
    };
    for &n in &compute {
        let mut candidate = current.clone();
        candidate.push(n);
        match part(fusion, &live, &candidate, &[])? {
            Some(segment) => {
                current = candidate;
                accepted = Some(segment);
            }
            None => {
                // An op no scheduler takes even as a segment of its own.
                out.push(accepted.take().ok_or_else(|| alone(n))?);
                current = vec![n];
                accepted = Some(part(fusion, &live, &current, &[])?.ok_or_else(|| alone(n))?);
            }
        }
    }
    out.extend(accepted);
    // Outputs that are constants: a last segment fills them. Outputs that
    // are inputs need no kernel (the caller copies them), unless nothing
    // else runs: a fusion is at least one segment.
    let copied: Vec<TensorId> = (fusion.outputs().iter().copied())
        .filter(|&t| matches!(fusion.node(t).op, Op::Constant { .. }) || out.is_empty())
        .filter(|&t| !computed(fusion, t))
        .collect();
    if !copied.is_empty() {
        out.extend(part(fusion, &live, &[], &copied)?);
    }
    Ok(out)
}

/// Whether an op computes `t` (it is neither an input nor a constant).
fn computed(fusion: &Fusion, t: TensorId) -> bool {
    !matches!(fusion.node(t).op, Op::Input { .. } | Op::Constant { .. })
}

/// The segment made of `nodes` (compute nodes of `fusion`, in order; `live`
/// marks the nodes an output depends on), if a scheduler accepts it. Its
/// outputs are the tensors used outside it or returned by the fusion, and
/// `copied` (inputs or constants of the fusion that it returns).
fn part(
    fusion: &Fusion,
    live: &[bool],
    nodes: &[usize],
    copied: &[TensorId],
) -> Result<Option<Segment>, String> {
    let fail = |e: tilefuse_ir::FusionError| format!("segmenting: {e}");
    let mut f = Fusion::new();
    let mut map: HashMap<usize, TensorId> = HashMap::new();
    let mut inputs = Vec::new();
    let mut bring = |f: &mut Fusion, map: &mut HashMap<usize, TensorId>, t: TensorId| {
        if let Some(&id) = map.get(&t.0) {
            return Ok(id);
        }
        let node = fusion.node(t);
        let id = match &node.op {
            Op::Constant { value, dtype } => f.constant(value.0, *dtype),
            _ => {
                let ty = fusion.ty(t).expect("a tensor of the fusion");
                inputs.push(t);
                f.input(&ty.shape, ty.dtype, node.name.as_deref())
            }
        }
        .map_err(fail)?;
        map.insert(t.0, id);
        Ok::<_, String>(id)
    };
    for &n in nodes {
        let node = &fusion.nodes()[n];
        let args = node
            .args
            .iter()
            .map(|&a| bring(&mut f, &mut map, a))
            .collect::<Result<Vec<_>, _>>()?;
        let id = f
            .add(node.op.clone(), &args, node.name.as_deref())
            .map_err(fail)?;
        map.insert(n, id);
    }
    // Dead ops (not `live`) read nothing: they belong to no segment.
    let used_outside = |t: usize| {
        fusion.outputs().contains(&TensorId(t))
            || (fusion.nodes().iter().enumerate())
                .any(|(c, node)| live[c] && !nodes.contains(&c) && node.args.contains(&TensorId(t)))
    };
    let mut outputs: Vec<TensorId> = nodes
        .iter()
        .copied()
        .filter(|&n| used_outside(n))
        .map(TensorId)
        .collect();
    for &t in copied {
        bring(&mut f, &mut map, t)?;
        outputs.push(t);
    }
    for &t in &outputs {
        f.output(map[&t.0]).map_err(fail)?;
    }
    Ok(SchedulerKind::ALL
        .into_iter()
        .find(|&s| can_schedule(&f, s).is_ok())
        .map(|scheduler| Segment {
            fusion: f,
            scheduler,
            inputs,
            outputs,
        }))
}
