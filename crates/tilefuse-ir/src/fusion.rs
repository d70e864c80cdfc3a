//! The fusion DAG and its builder. Every op is verified when it is added, so
//! a `Fusion` value is always well typed.

use serde::{Deserialize, Serialize};

use crate::dtype::DType;
use crate::error::{FusionError, Result};
use crate::infer::{TensorType, infer};
use crate::op::{BinaryOp, ConstValue, Op, ReduceOp, UnaryOp};
use crate::shape::{Shape, format_shape, numel};
use crate::tensor::Scalar;

/// Version of the fusion JSON schema. Bump it when the meaning of existing
/// JSON changes; fingerprints include it.
pub const FUSION_SCHEMA_VERSION: u32 = 1;

/// A tensor of a fusion: the index of the node that produces it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TensorId(pub usize);

/// One op applied to earlier tensors.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    pub op: Op,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<TensorId>,
    /// A user-given name; it shows in printouts and never in the fingerprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// The serialized form of a fusion.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FusionJson {
    version: u32,
    nodes: Vec<Node>,
    outputs: Vec<TensorId>,
}

/// A verified DAG of tensor ops in topological order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fusion {
    nodes: Vec<Node>,
    types: Vec<TensorType>,
    inputs: Vec<TensorId>,
    outputs: Vec<TensorId>,
}

impl Fusion {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `op` applied to `args`, after checking that it is well typed.
    pub fn add(&mut self, op: Op, args: &[TensorId], name: Option<&str>) -> Result<TensorId> {
        let arg_types = args
            .iter()
            .map(|&a| self.ty(a))
            .collect::<Result<Vec<_>>>()?;
        let ty = infer(&op, &arg_types)?;
        check_size(op.name(), &ty.shape)?;
        if let Some(name) = name {
            self.check_name(name)?;
        }
        let id = TensorId(self.nodes.len());
        if matches!(op, Op::Input { .. }) {
            self.inputs.push(id);
        }
        self.nodes.push(Node {
            op,
            args: args.to_vec(),
            name: name.map(str::to_owned),
        });
        self.types.push(ty);
        Ok(id)
    }

    pub fn input(&mut self, shape: &[usize], dtype: DType, name: Option<&str>) -> Result<TensorId> {
        self.add(
            Op::Input {
                shape: shape.to_vec(),
                dtype,
            },
            &[],
            name,
        )
    }

    /// A scalar constant, stored already converted to `dtype` (so `0.1` as
    /// f32 is the f32 nearest 0.1, and fingerprints do not see f64 noise);
    /// every NaN is stored as the one NaN that JSON's `"nan"` loads as.
    pub fn constant(&mut self, value: f64, dtype: DType) -> Result<TensorId> {
        let value = Scalar::F(value).to(dtype).as_f64();
        let value = ConstValue(if value.is_nan() { f64::NAN } else { value });
        self.add(Op::Constant { value, dtype }, &[], None)
    }

    pub fn unary(&mut self, func: UnaryOp, x: TensorId) -> Result<TensorId> {
        self.add(Op::Unary { func }, &[x], None)
    }

    /// A binary op; float operands of different dtypes are first cast to
    /// their common dtype ([`DType::promote_floats`]), as numpy does.
    pub fn binary(&mut self, func: BinaryOp, a: TensorId, b: TensorId) -> Result<TensorId> {
        let [a, b] = self.promoted([a, b])?;
        self.add(Op::Binary { func }, &[a, b], None)
    }

    /// `where(cond, a, b)`; float branches are promoted as in [`Fusion::binary`].
    pub fn where_(&mut self, cond: TensorId, a: TensorId, b: TensorId) -> Result<TensorId> {
        let [a, b] = self.promoted([a, b])?;
        self.add(Op::Where, &[cond, a, b], None)
    }

    /// `a` and `b`, cast to their common float dtype where they are floats
    /// of different dtypes; unchanged otherwise (verification reports any
    /// other mismatch).
    fn promoted(&mut self, [a, b]: [TensorId; 2]) -> Result<[TensorId; 2]> {
        let (da, db) = (self.ty(a)?.dtype, self.ty(b)?.dtype);
        match DType::promote_floats(da, db) {
            Some(common) if da != db => {
                let widen = |f: &mut Self, x: TensorId, d: DType| {
                    if d == common {
                        Ok(x)
                    } else {
                        f.cast(x, common)
                    }
                };
                Ok([widen(self, a, da)?, widen(self, b, db)?])
            }
            _ => Ok([a, b]),
        }
    }

    pub fn cast(&mut self, x: TensorId, dtype: DType) -> Result<TensorId> {
        self.add(Op::Cast { dtype }, &[x], None)
    }

    pub fn broadcast(&mut self, x: TensorId, shape: &[usize]) -> Result<TensorId> {
        self.add(
            Op::Broadcast {
                shape: shape.to_vec(),
            },
            &[x],
            None,
        )
    }

    /// Reduces over `axes` (negative axes count from the end; `None` means
    /// every axis), numpy style. Over no axis at all it returns `x` itself.
    pub fn reduce(
        &mut self,
        func: ReduceOp,
        x: TensorId,
        axes: Option<&[i64]>,
        keepdims: bool,
    ) -> Result<TensorId> {
        let rank = self.ty(x)?.shape.len();
        let axes = match axes {
            None => (0..rank).collect(),
            Some(axes) => normalize_axes(func.name(), axes, rank)?,
        };
        if axes.is_empty() {
            // Over no axis (a rank-0 tensor, or `axis=()`) a reduction is
            // its input, as in numpy.
            return Ok(x);
        }
        self.add(
            Op::Reduce {
                func,
                axes,
                keepdims,
            },
            &[x],
            None,
        )
    }

    pub fn permute(&mut self, x: TensorId, perm: &[i64]) -> Result<TensorId> {
        let rank = self.ty(x)?.shape.len();
        let perm = perm
            .iter()
            .map(|&a| normalize_axis("permute", a, rank))
            .collect::<Result<Vec<_>>>()?;
        self.add(Op::Permute { perm }, &[x], None)
    }

    /// Reshapes `x`; one extent may be `-1`, inferred from the element count.
    pub fn reshape(&mut self, x: TensorId, shape: &[i64]) -> Result<TensorId> {
        let from = self.ty(x)?.shape.clone();
        let shape = resolve_reshape(&from, shape)?;
        self.add(Op::Reshape { shape }, &[x], None)
    }

    pub fn matmul(
        &mut self,
        a: TensorId,
        b: TensorId,
        transpose_a: bool,
        transpose_b: bool,
    ) -> Result<TensorId> {
        self.matmul_to(a, b, transpose_a, transpose_b, None)
    }

    /// [`Fusion::matmul`] with its result rounded to `out_dtype` (a float)
    /// instead of the operands' dtype: f32 out of half operands.
    pub fn matmul_to(
        &mut self,
        a: TensorId,
        b: TensorId,
        transpose_a: bool,
        transpose_b: bool,
        out_dtype: Option<DType>,
    ) -> Result<TensorId> {
        let [a, b] = self.promoted([a, b])?;
        self.add(
            Op::Matmul {
                transpose_a,
                transpose_b,
                out_dtype,
            },
            &[a, b],
            None,
        )
    }

    /// Marks `t` as an output of the fusion.
    pub fn output(&mut self, t: TensorId) -> Result<()> {
        self.ty(t)?;
        if self.outputs.contains(&t) {
            return Err(FusionError::Output(format!(
                "{} is already an output",
                self.label(t)
            )));
        }
        self.outputs.push(t);
        Ok(())
    }

    /// Names (or renames) a tensor. Names are identifiers, unique in the fusion.
    pub fn set_name(&mut self, t: TensorId, name: &str) -> Result<()> {
        self.ty(t)?;
        if self.nodes[t.0].name.as_deref() != Some(name) {
            self.check_name(name)?;
        }
        self.nodes[t.0].name = Some(name.to_owned());
        Ok(())
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    pub fn node(&self, t: TensorId) -> &Node {
        &self.nodes[t.0]
    }

    pub fn inputs(&self) -> &[TensorId] {
        &self.inputs
    }

    pub fn outputs(&self) -> &[TensorId] {
        &self.outputs
    }

    /// The type of every tensor, indexed by [`TensorId`].
    pub fn types(&self) -> &[TensorType] {
        &self.types
    }

    /// The type of a tensor, or an error if it is not in this fusion.
    pub fn ty(&self, t: TensorId) -> Result<&TensorType> {
        self.types.get(t.0).ok_or(FusionError::UnknownTensor {
            id: t.0,
            len: self.types.len(),
        })
    }

    /// How a tensor is called in printouts and errors: its name, or `t{id}`.
    pub fn label(&self, t: TensorId) -> String {
        match self.nodes.get(t.0).and_then(|n| n.name.as_deref()) {
            Some(name) => name.to_owned(),
            None => format!("t{}", t.0),
        }
    }

    /// Finds a tensor by its user-given name.
    pub fn find(&self, name: &str) -> Option<TensorId> {
        self.nodes
            .iter()
            .position(|n| n.name.as_deref() == Some(name))
            .map(TensorId)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(&self.as_json()).expect("fusion JSON serializes")
    }

    pub fn to_json_pretty(&self) -> String {
        serde_json::to_string_pretty(&self.as_json()).expect("fusion JSON serializes")
    }

    /// Loads and re-verifies a fusion written by `to_json`.
    pub fn from_json(text: &str) -> Result<Self> {
        let json: FusionJson =
            serde_json::from_str(text).map_err(|e| FusionError::Json(e.to_string()))?;
        if json.version > FUSION_SCHEMA_VERSION {
            return Err(FusionError::Json(format!(
                "version {} is newer than this tilefuse reads ({FUSION_SCHEMA_VERSION})",
                json.version
            )));
        }
        let mut fusion = Fusion::new();
        for (i, node) in json.nodes.into_iter().enumerate() {
            if let Some(bad) = node.args.iter().find(|a| a.0 >= i) {
                return Err(FusionError::Json(format!(
                    "node {i} uses tensor {} before it is defined",
                    bad.0
                )));
            }
            fusion
                .add(node.op, &node.args, node.name.as_deref())
                .map_err(|e| FusionError::Json(format!("node {i}: {e}")))?;
        }
        for t in json.outputs {
            fusion
                .output(t)
                .map_err(|e| FusionError::Json(e.to_string()))?;
        }
        Ok(fusion)
    }

    fn as_json(&self) -> FusionJson {
        FusionJson {
            version: FUSION_SCHEMA_VERSION,
            nodes: self.nodes.clone(),
            outputs: self.outputs.clone(),
        }
    }

    /// The fusion as fingerprinting sees it: JSON without names, each op
    /// passed through `edit` first.
    pub(crate) fn structural_json(&self, edit: impl Fn(&mut Op)) -> String {
        let mut json = self.as_json();
        for n in &mut json.nodes {
            n.name = None;
            edit(&mut n.op);
        }
        serde_json::to_string(&json).expect("fusion JSON serializes")
    }

    fn check_name(&self, name: &str) -> Result<()> {
        if !is_identifier(name) {
            return Err(FusionError::Name(format!(
                "tensor name {name:?} is not an identifier (letters, digits, '_', not starting with a digit)"
            )));
        }
        if let Some(t) = self.find(name) {
            return Err(FusionError::Name(format!(
                "tensor name {name:?} is already used by tensor {}",
                t.0
            )));
        }
        Ok(())
    }
}

/// ASCII letters, digits and `_`, not starting with a digit: the names
/// (of tensors, loops) that reach generated code.
pub fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Kernels index with 32-bit integers (WGSL has no other), so no tensor may
/// have more elements than a `u32` can count.
pub const MAX_ELEMENTS: u64 = u32::MAX as u64;

fn check_size(op: &'static str, shape: &[usize]) -> Result<()> {
    let count = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d as u64));
    match count {
        Some(n) if n <= MAX_ELEMENTS => Ok(()),
        _ => Err(FusionError::op(
            op,
            format!(
                "shape {} has more than {MAX_ELEMENTS} elements (32-bit indexing)",
                format_shape(shape)
            ),
        )),
    }
}

fn normalize_axis(op: &'static str, axis: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return Err(FusionError::op(
            op,
            format!("axis {axis} is out of range for rank {rank}"),
        ));
    }
    Ok(if axis < 0 { axis + r } else { axis } as usize)
}

fn normalize_axes(op: &'static str, axes: &[i64], rank: usize) -> Result<Vec<usize>> {
    let mut out = axes
        .iter()
        .map(|&a| normalize_axis(op, a, rank))
        .collect::<Result<Vec<_>>>()?;
    out.sort_unstable();
    if out.windows(2).any(|w| w[0] == w[1]) {
        return Err(FusionError::op(op, format!("axes {axes:?} repeat an axis")));
    }
    Ok(out)
}

fn resolve_reshape(from: &[usize], shape: &[i64]) -> Result<Shape> {
    let fail = |why: &str| {
        FusionError::op(
            "reshape",
            format!("cannot reshape {} to {shape:?}: {why}", format_shape(from)),
        )
    };
    if shape.iter().filter(|&&d| d == -1).count() > 1 {
        return Err(fail("only one extent may be -1"));
    }
    if shape.iter().any(|&d| d < -1) {
        return Err(fail("extents must be non-negative or -1"));
    }
    let known: usize = shape
        .iter()
        .filter(|&&d| d >= 0)
        .map(|&d| d as usize)
        .product();
    let total = numel(from);
    shape
        .iter()
        .map(|&d| match d {
            -1 if known != 0 && total.is_multiple_of(known) => Ok(total / known),
            -1 => Err(fail("the -1 extent cannot be inferred")),
            d => Ok(d as usize),
        })
        .collect()
}
