//! Readable text form of a fusion, one op per line:
//!
//! ```text
//! fusion {
//!   x: f32[4, 8] = input(0)
//!   t1: f32[4, 1] = max(x, axes=[1], keepdims=true)
//!   t2: f32[4, 8] = sub(x, t1)
//!   return t2
//! }
//! ```

use std::fmt;

use crate::fusion::Fusion;
use crate::op::Op;

impl fmt::Display for Fusion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "fusion {{")?;
        let mut next_input = 0;
        for (i, node) in self.nodes().iter().enumerate() {
            let id = crate::TensorId(i);
            let mut operands: Vec<String> = node.args.iter().map(|&a| self.label(a)).collect();
            match &node.op {
                Op::Input { .. } => {
                    operands.push(next_input.to_string());
                    next_input += 1;
                }
                Op::Constant { value, .. } => operands.push(value.0.to_string()),
                Op::Cast { dtype } => operands.push(format!("dtype={dtype}")),
                Op::Broadcast { shape } | Op::Reshape { shape } => {
                    operands.push(format!("shape={shape:?}"))
                }
                Op::Reduce { axes, keepdims, .. } => {
                    operands.push(format!("axes={axes:?}, keepdims={keepdims}"))
                }
                Op::Permute { perm } => operands.push(format!("perm={perm:?}")),
                Op::Matmul {
                    transpose_a,
                    transpose_b,
                    out_dtype,
                } => {
                    if *transpose_a {
                        operands.push("transpose_a=true".into());
                    }
                    if *transpose_b {
                        operands.push("transpose_b=true".into());
                    }
                    if let Some(dtype) = out_dtype {
                        operands.push(format!("out_dtype={dtype}"));
                    }
                }
                Op::Unary { .. } | Op::Binary { .. } | Op::Where => {}
            }
            let ty = self.ty(id).map_err(|_| fmt::Error)?;
            writeln!(
                f,
                "  {}: {ty} = {}({})",
                self.label(id),
                node.op.name(),
                operands.join(", ")
            )?;
        }
        let outputs: Vec<String> = self.outputs().iter().map(|&t| self.label(t)).collect();
        writeln!(f, "  return {}", outputs.join(", "))?;
        write!(f, "}}")
    }
}

impl Fusion {
    /// One line saying what the fusion is, without names: its inputs' and
    /// outputs' types and its compute ops in order, each once
    /// (`f32[64, 128] -> f32[64, 128]: max, sub, exp, sum, div`). Cache
    /// listings show it beside an entry's fingerprint.
    pub fn signature(&self) -> String {
        let types = |ids: &[crate::TensorId]| {
            (ids.iter())
                .map(|&t| self.ty(t).map_or_else(|_| "?".into(), |ty| ty.to_string()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut ops: Vec<&str> = Vec::new();
        for node in self.nodes() {
            if node.op.computes() && !ops.contains(&node.op.name()) {
                ops.push(node.op.name());
            }
        }
        let (inputs, outputs) = (types(self.inputs()), types(self.outputs()));
        format!("{inputs} -> {outputs}: {}", ops.join(", "))
    }
}
