//! Tunable fields: a params field a tuner may set, with the values worth
//! trying (Helion's config fragments, TVM's knob spaces). A scheduler
//! declares them per fusion and device; values are JSON, set by field path
//! (`"tile_sizes.cta_tile.m"`) and checked like any edited params.

use serde::Serialize;
use serde_json::Value;

use crate::error::ParamsError;
use crate::heuristic::HeuristicParams;

/// The values a tunable field takes.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Domain {
    /// `false` or `true`.
    Bool,
    /// Powers of two from `min` to `max`.
    PowerOfTwo { min: u32, max: u32 },
    /// Every integer from `min` to `max`.
    Integer { min: u32, max: u32 },
    /// One of these values (`null` for "let the scheduler derive it").
    Choice { values: Vec<Value> },
}

impl Domain {
    /// Every value of the domain, smallest first.
    pub fn values(&self) -> Vec<Value> {
        match self {
            Domain::Bool => vec![Value::Bool(false), Value::Bool(true)],
            Domain::PowerOfTwo { min, max } => {
                std::iter::successors(Some(u64::from((*min).max(1))), |v| Some(v * 2))
                    .take_while(|&v| v <= u64::from(*max))
                    .map(Value::from)
                    .collect()
            }
            Domain::Integer { min, max } => (*min..=*max).map(Value::from).collect(),
            Domain::Choice { values } => values.clone(),
        }
    }
}

/// A params field a tuner may set.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Tunable {
    /// The field's path, as in `ParamsError::path`.
    pub path: &'static str,
    pub domain: Domain,
}

impl Tunable {
    pub fn flag(path: &'static str) -> Tunable {
        Tunable {
            path,
            domain: Domain::Bool,
        }
    }

    pub fn pow2(path: &'static str, min: u32, max: u32) -> Tunable {
        Tunable {
            path,
            domain: Domain::PowerOfTwo { min, max },
        }
    }

    pub fn int(path: &'static str, min: u32, max: u32) -> Tunable {
        Tunable {
            path,
            domain: Domain::Integer { min, max },
        }
    }

    pub fn choice<V: Into<Value>>(
        path: &'static str,
        values: impl IntoIterator<Item = V>,
    ) -> Tunable {
        Tunable {
            path,
            domain: Domain::Choice {
                values: values.into_iter().map(Into::into).collect(),
            },
        }
    }
}

impl HeuristicParams {
    /// The value of the field at `path` (`None` when there is none).
    pub fn get(&self, path: &str) -> Option<Value> {
        path.split('.')
            .try_fold(&self.to_value(), |v, key| v.get(key))
            .cloned()
    }

    /// These params with the field at `path` set to `value`, loaded and
    /// checked as edited params are (a `ParamsError` names the field).
    pub fn with(&self, path: &str, value: Value) -> Result<HeuristicParams, ParamsError> {
        self.with_all([(path, value)])
    }

    /// These params with several fields set at once, checked once at the
    /// end (fields that constrain each other, such as nested tile sizes,
    /// change together).
    pub fn with_all<'p>(
        &self,
        edits: impl IntoIterator<Item = (&'p str, Value)>,
    ) -> Result<HeuristicParams, ParamsError> {
        let mut root = self.to_value();
        for (path, value) in edits {
            let mut slot = &mut root;
            for key in path.split('.') {
                slot = slot
                    .get_mut(key)
                    .ok_or_else(|| ParamsError::new(path, "no such field"))?;
            }
            *slot = value;
        }
        HeuristicParams::from_value(root)
    }
}
