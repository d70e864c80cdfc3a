//! A scheduler's search space for one fusion on one device: the tunable
//! fields it declares (with their domains, narrowed by the fusion and the
//! device), over a base params value. A point picks one value per field.

use rand::RngExt;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tilefuse_params::{HeuristicParams, ParamsError, Tunable};

/// One value index per field.
pub type Point = Vec<usize>;

/// The shape of a space, all a strategy needs: each field's number of
/// values (so strategies also run on recorded spaces, see `replay`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grid {
    pub sizes: Vec<usize>,
}

impl Grid {
    /// Points in the grid (saturating).
    pub fn size(&self) -> u64 {
        (self.sizes.iter()).fold(1u64, |n, &v| n.saturating_mul(v as u64))
    }

    pub fn random(&self, rng: &mut StdRng) -> Point {
        self.sizes.iter().map(|&n| rng.random_range(0..n)).collect()
    }

    /// The points one step from `point` along one field (Helion's pattern
    /// neighbours: the next value up or down).
    pub fn neighbors(&self, point: &[usize]) -> Vec<Point> {
        let mut out = Vec::new();
        for (f, &n) in self.sizes.iter().enumerate() {
            for step in [-1i64, 1] {
                let i = point[f] as i64 + step;
                if (0..n as i64).contains(&i) {
                    let mut next = point.to_vec();
                    next[f] = i as usize;
                    out.push(next);
                }
            }
        }
        out
    }

    /// Every point, in order (for small grids).
    pub fn all(&self) -> Vec<Point> {
        let mut out = vec![Vec::new()];
        for &n in &self.sizes {
            out = out
                .into_iter()
                .flat_map(|p: Point| {
                    (0..n).map(move |i| {
                        let mut q = p.clone();
                        q.push(i);
                        q
                    })
                })
                .collect();
        }
        out
    }
}

pub struct Space {
    pub base: HeuristicParams,
    pub fields: Vec<Tunable>,
    pub grid: Grid,
    values: Vec<Vec<Value>>,
}

impl Space {
    /// The space of `fields` around `base`; a field's base value joins its
    /// domain (first) when the domain lacks it, so the base is a point and
    /// a refused field can always go back to it.
    pub fn new(base: HeuristicParams, fields: Vec<Tunable>) -> Space {
        let values: Vec<Vec<Value>> = fields
            .iter()
            .map(|t| {
                let mut values = t.domain.values();
                if let Some(v) = base.get(t.path)
                    && !values.contains(&v)
                {
                    values.insert(0, v);
                }
                values
            })
            .collect();
        Space {
            base,
            fields,
            grid: Grid {
                sizes: values.iter().map(Vec::len).collect(),
            },
            values,
        }
    }

    /// The params of `point`: the base with every field set, checked as
    /// edited params are.
    pub fn params(&self, point: &[usize]) -> Result<HeuristicParams, ParamsError> {
        let mut p = self.base.clone();
        for ((field, values), &i) in self.fields.iter().zip(&self.values).zip(point) {
            if p.get(field.path).as_ref() != Some(&values[i]) {
                p = p.with(field.path, values[i].clone())?;
            }
        }
        Ok(p)
    }

    /// `{field path: value}` of `point` (for reporting a point whose
    /// params do not load).
    pub fn describe(&self, point: &[usize]) -> Value {
        let map = (self.fields.iter().zip(&self.values).zip(point))
            .map(|((f, values), &i)| (f.path.to_owned(), values[i].clone()))
            .collect();
        Value::Object(map)
    }

    /// The point nearest `params`: each field's own value where its domain
    /// has it, else the closest number, else the first value.
    pub fn point_of(&self, params: &HeuristicParams) -> Point {
        let near = |values: &[Value], v: Option<Value>| {
            let exact = v.as_ref().and_then(|v| values.iter().position(|x| x == v));
            let num = v.as_ref().and_then(Value::as_f64);
            exact
                .or_else(|| {
                    let num = num?;
                    let dist = |x: &Value| x.as_f64().map_or(f64::INFINITY, |x| (x - num).abs());
                    (0..values.len()).min_by(|&a, &b| dist(&values[a]).total_cmp(&dist(&values[b])))
                })
                .unwrap_or(0)
        };
        (self.fields.iter().zip(&self.values))
            .map(|(f, values)| near(values, params.get(f.path)))
            .collect()
    }

    /// The base params' point (every field's base value is in its domain).
    pub fn base_point(&self) -> Point {
        self.point_of(&self.base)
    }
}

/// What a strategy learns from one candidate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    pub point: Point,
    /// Its time; `None` when it failed or computed wrong results.
    pub time: Option<f64>,
}

/// The point of the fastest observation.
pub(crate) fn best_point(history: &[Observation]) -> Option<&Point> {
    (history.iter())
        .filter_map(|o| o.time.map(|t| (t, &o.point)))
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, p)| p)
}
