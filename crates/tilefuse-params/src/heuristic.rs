//! `HeuristicParams`: the tagged union over scheduler kinds, and the table
//! of every params struct by name for front ends that work with names.

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::common::{CompileParams, LaunchParams};
use crate::convert::ParamsStruct;
use crate::error::ParamsError;
use crate::kind::SchedulerKind;
use crate::matmul::{
    CircularBufferOptions, GemmTile, MatMulTileOptions, MatmulParams, SupportedVecSize,
};
use crate::pointwise::PointwiseParams;
use crate::reduction::ReductionParams;

/// The params of one scheduler, tagged by `"scheduler"` in JSON.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, JsonSchema)]
#[serde(tag = "scheduler", rename_all = "snake_case")]
pub enum HeuristicParams {
    Pointwise(PointwiseParams),
    Reduction(ReductionParams),
    Matmul(MatmulParams),
}

/// The scheduler tags, in the order of [`HeuristicParams`]'s variants.
pub const SCHEDULERS: [&str; 3] = [
    SchedulerKind::Pointwise.as_str(),
    SchedulerKind::Reduction.as_str(),
    SchedulerKind::Matmul.as_str(),
];

impl HeuristicParams {
    /// The scheduler these params are for.
    pub fn kind(&self) -> SchedulerKind {
        match self {
            HeuristicParams::Pointwise(_) => SchedulerKind::Pointwise,
            HeuristicParams::Reduction(_) => SchedulerKind::Reduction,
            HeuristicParams::Matmul(_) => SchedulerKind::Matmul,
        }
    }

    /// The `"scheduler"` tag of this value.
    pub fn scheduler(&self) -> &'static str {
        self.kind().as_str()
    }

    /// Loads a value whose `"scheduler"` field picks the struct.
    pub fn from_value(value: Value) -> Result<Self, ParamsError> {
        let tag = match value.get("scheduler") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => return Err(bad_tag(&other.to_string())),
            None if value.is_object() => {
                return Err(ParamsError::new(
                    "scheduler",
                    "missing; expected one of \"pointwise\", \"reduction\", \"matmul\"",
                ));
            }
            None => {
                return Err(ParamsError::new(
                    "",
                    format!("expected an object, got {value}"),
                ));
            }
        };
        match tag.as_str() {
            "pointwise" => PointwiseParams::from_value(value).map(Self::Pointwise),
            "reduction" => ReductionParams::from_value(value).map(Self::Reduction),
            "matmul" => MatmulParams::from_value(value).map(Self::Matmul),
            _ => Err(bad_tag(&format!("{tag:?}"))),
        }
    }

    pub fn from_json(text: &str) -> Result<Self, ParamsError> {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| ParamsError::new("", format!("invalid JSON: {e}")))?;
        Self::from_value(value)
    }

    pub fn to_value(&self) -> Value {
        match self {
            HeuristicParams::Pointwise(p) => p.to_value(),
            HeuristicParams::Reduction(p) => p.to_value(),
            HeuristicParams::Matmul(p) => p.to_value(),
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(&self.to_value()).expect("params serialize")
    }

    pub fn validate(&self) -> Result<(), ParamsError> {
        match self {
            HeuristicParams::Pointwise(p) => p.validate(),
            HeuristicParams::Reduction(p) => p.validate(),
            HeuristicParams::Matmul(p) => p.validate(),
        }
    }

    /// Launch params shared by every kind.
    pub fn launch(&self) -> &LaunchParams {
        match self {
            HeuristicParams::Pointwise(p) => &p.launch,
            HeuristicParams::Reduction(p) => &p.launch,
            HeuristicParams::Matmul(p) => &p.launch,
        }
    }

    /// Compile params shared by every kind.
    pub fn compile(&self) -> &CompileParams {
        match self {
            HeuristicParams::Pointwise(p) => &p.compile,
            HeuristicParams::Reduction(p) => &p.compile,
            HeuristicParams::Matmul(p) => &p.compile,
        }
    }
}

fn bad_tag(got: &str) -> ParamsError {
    ParamsError::new(
        "scheduler",
        format!("expected one of \"pointwise\", \"reduction\", \"matmul\", got {got}"),
    )
}

/// Deserializing goes through [`HeuristicParams::from_value`], so serde
/// users get the same defaults, checks and field paths.
impl<'de> Deserialize<'de> for HeuristicParams {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::from_value(Value::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

macro_rules! from_kind {
    ($($variant:ident($ty:ty)),+) => {$(
        impl From<$ty> for HeuristicParams {
            fn from(p: $ty) -> Self {
                HeuristicParams::$variant(p)
            }
        }
    )+};
}
from_kind!(
    Pointwise(PointwiseParams),
    Reduction(ReductionParams),
    Matmul(MatmulParams)
);

/// One params struct, reachable by name.
#[derive(Clone, Copy)]
pub struct StructInfo {
    pub name: &'static str,
    /// The `"scheduler"` tag, for scheduler params.
    pub scheduler: Option<&'static str>,
    /// The struct's JSON Schema.
    pub schema: fn() -> &'static Value,
    /// Loads a possibly partial value and returns it complete (defaults
    /// filled in, tag added), or the error with its path.
    pub normalize: fn(Value) -> Result<Value, ParamsError>,
}

fn info<T: ParamsStruct>() -> StructInfo {
    StructInfo {
        name: T::NAME,
        scheduler: T::SCHEDULER,
        schema: T::schema,
        normalize: |v| T::from_value(v).map(|p| p.to_value()),
    }
}

/// Every struct of the params format, scheduler params first.
pub fn structs() -> [StructInfo; 9] {
    [
        info::<PointwiseParams>(),
        info::<ReductionParams>(),
        info::<MatmulParams>(),
        info::<LaunchParams>(),
        info::<CompileParams>(),
        info::<MatMulTileOptions>(),
        info::<GemmTile>(),
        info::<CircularBufferOptions>(),
        info::<SupportedVecSize>(),
    ]
}
