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

    /// The params of `proposed` and what `schedule` makes of them,
    /// repaired first, one field back to its base value a step: the field
    /// to blame for the error (`culprit`), else the changed field
    /// whose base value makes the most `progress` (a limit on a value
    /// derived from several fields names none of them), else the pair of
    /// changed fields that does. `Err`: the last
    /// point tried and its error, once no field is left to put back.
    pub fn repair<S>(
        &self,
        proposed: &[usize],
        schedule: impl Fn(&HeuristicParams) -> Result<S, ParamsError>,
    ) -> Result<(HeuristicParams, S), (Point, ParamsError)> {
        let base = self.base_point();
        let attempt = |point: &[usize]| {
            self.params(point)
                .and_then(|p| schedule(&p).map(|s| (p, s)))
        };
        let reverted = |point: &[usize], fields: &[usize]| {
            let mut p = point.to_vec();
            fields.iter().for_each(|&i| p[i] = base[i]);
            p
        };
        let mut point = proposed.to_vec();
        loop {
            let e = match attempt(&point) {
                Ok(done) => return Ok(done),
                Err(e) => e,
            };
            let best = |sets: Vec<Vec<usize>>| {
                sets.iter()
                    .map(|set| reverted(&point, set))
                    .filter_map(|p| Some((progress(&e, attempt(&p).err())?, p)))
                    .min_by_key(|(rank, _)| *rank)
                    .map(|(_, p)| p)
            };
            let next = match self.culprit(&point, &base, &e) {
                Some(i) => Some(reverted(&point, &[i])),
                None => {
                    let changed: Vec<usize> =
                        (0..point.len()).filter(|&i| point[i] != base[i]).collect();
                    // Fields that only go back together (a flag and the
                    // count it gives a meaning to) make no progress one by one.
                    best(changed.iter().map(|&i| vec![i]).collect())
                        .or_else(|| best(pairs(&changed)))
                }
            };
            match next {
                Some(p) => point = p,
                None => return Err((point, e)),
            }
        }
    }

    /// The field of `point` off its `base` value to blame for the
    /// scheduler's error `e`: the one it names, else one its message names
    /// (a constraint between two fields names the other there:
    /// "tile_sizes.warp_tile.n: 64 does not divide cta_tile.n (16)").
    fn culprit(&self, point: &[usize], base: &[usize], e: &ParamsError) -> Option<usize> {
        let changed = || (0..point.len()).filter(|&i| point[i] != base[i]);
        let path = |i: usize| self.fields[i].path;
        changed()
            .find(|&i| names_field(&e.path, path(i)))
            .or_else(|| changed().find(|&i| mentions(&e.message, path(i))))
    }

    /// The base params' point (every field's base value is in its domain).
    pub fn base_point(&self) -> Point {
        self.point_of(&self.base)
    }
}

/// Every pair of `fields`.
fn pairs(fields: &[usize]) -> Vec<Vec<usize>> {
    (fields.iter().enumerate())
        .flat_map(|(n, &i)| fields[n + 1..].iter().map(move |&j| vec![i, j]))
        .collect()
}

/// How far putting a field back took a refused point from `error`, best
/// first: it schedules (0), the error moved to another field (1), the
/// error changed (2: the field is part of the limit); `None`: no change.
fn progress(error: &ParamsError, after: Option<ParamsError>) -> Option<u8> {
    match after {
        None => Some(0),
        Some(e) if e.path != error.path => Some(1),
        Some(e) if e.message != error.message => Some(2),
        Some(_) => None,
    }
}

/// Whether an error at `path` is about `field` (itself, an element or a
/// member of it).
fn names_field(path: &str, field: &str) -> bool {
    path.strip_prefix(field)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['[', '.']))
}

/// Whether `message` names `field` as a word: its whole path or a tail of
/// it of three characters or more (messages name a sibling by the part
/// they share: `cta_tile.n`, `stages`).
fn mentions(message: &str, field: &str) -> bool {
    let word = |c: char| c.is_alphanumeric() || c == '_' || c == '.';
    let tails = field.match_indices('.').map(|(i, _)| &field[i + 1..]);
    std::iter::once(field)
        .chain(tails)
        .filter(|tail| tail.len() >= 3)
        .any(|tail| {
            message.match_indices(tail).any(|(i, _)| {
                let before = message[..i].chars().next_back();
                let after = message[i + tail.len()..].chars().next();
                !before.is_some_and(word) && !after.is_some_and(word)
            })
        })
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
