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
            out.extend(steps(point[f], n).map(|j| moved(point, f, j)));
        }
        out
    }

    /// The points a descent probes around `point`, field by field: one
    /// step down and up (the [`Grid::neighbors`]), then the field's first
    /// and last values where they are more than one step away (long
    /// probes, which cross a valley one step at a time does not: rows a
    /// workgroup of 1 and 16 both fast, 2 slow). A field's probes stay
    /// together so that a field whose far end pays is found before the
    /// next field is probed, and the fields go in the scheduler's declared
    /// order (vector widths and unrolls before rows a workgroup).
    pub fn probes(&self, point: &[usize]) -> Vec<Point> {
        let mut out = Vec::new();
        for (f, &n) in self.sizes.iter().enumerate() {
            let i = point[f];
            let ends = [0, n.saturating_sub(1)]
                .into_iter()
                .filter(|e| e.abs_diff(i) > 1);
            out.extend(steps(i, n).chain(ends).map(|j| moved(point, f, j)));
        }
        out
    }

    /// The point as far past `to` as `to` is past `from` (the same move
    /// again); `None` when that leaves the grid.
    pub fn step(&self, to: &[usize], from: &[usize]) -> Option<Point> {
        (self.sizes.iter().zip(to.iter().zip(from)))
            .map(|(&n, (&t, &f))| {
                let i = 2 * t as i64 - f as i64;
                (0..n as i64).contains(&i).then_some(i as usize)
            })
            .collect()
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

/// The values one step down and up from index `i` of `n`.
fn steps(i: usize, n: usize) -> impl Iterator<Item = usize> {
    [i.checked_sub(1), Some(i + 1).filter(|&j| j < n)]
        .into_iter()
        .flatten()
}

/// `point` with field `f` at value `i`.
pub(crate) fn moved(point: &[usize], f: usize, i: usize) -> Point {
    let mut next = point.to_vec();
    next[f] = i;
    next
}

/// A digest of a space's fields and their domains (not the base), what a
/// cache entry keeps to tell whether the scheduler declares the space it
/// was tuned over (CubeCL's checksum of the candidate set): a winner tuned
/// before a field or value was added never saw it.
pub fn digest(fields: &[Tunable]) -> String {
    let text: Vec<String> = (fields.iter())
        .map(|t| format!("{}={}", t.path, Value::from(t.domain.values())))
        .collect();
    tilefuse_ir::sha256_hex(&text.join(";"))[..16].to_owned()
}

pub struct Space {
    pub base: HeuristicParams,
    pub fields: Vec<Tunable>,
    pub grid: Grid,
    values: Vec<Vec<Value>>,
}

impl Space {
    /// The space of `fields` around `base`; a field's base value joins its
    /// domain when the domain lacks it, so the base is a point and a
    /// refused field can always go back to it. A number joins in order,
    /// so that a step from it is to the nearest values (8 columns beside
    /// a default of 1024 made the first step a 100x slower kernel); any
    /// other value (`null`, an array) joins first.
    pub fn new(base: HeuristicParams, fields: Vec<Tunable>) -> Space {
        let values: Vec<Vec<Value>> = fields
            .iter()
            .map(|t| {
                let mut values = t.domain.values();
                if let Some(v) = base.get(t.path)
                    && !values.contains(&v)
                {
                    values.insert(in_order(&values, &v), v);
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
    /// edited params are, once all are set (a workgroup tile and its
    /// invocations' tile narrowed together are valid only together).
    pub fn params(&self, point: &[usize]) -> Result<HeuristicParams, ParamsError> {
        let edits = (self.fields.iter().zip(&self.values).zip(point))
            .map(|((field, values), &i)| (field.path, values[i].clone()))
            .filter(|(path, value)| self.base.get(path).as_ref() != Some(value));
        self.base.with_all(edits)
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
    /// repaired first, one field a step: a field at its base value that
    /// must fit a changed one follows it (`follower`, once a field), else
    /// a field goes back to its base value: the field to blame for the
    /// error (`culprit`), else the changed field
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
        let mut followed = Vec::new();
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
            if let Some((i, p)) = self.follower(&point, &base, &e)
                && !followed.contains(&i)
            {
                followed.push(i);
                point = p;
                continue;
            }
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

    /// A field at its `base` value that the error `e` is about, and
    /// `point` with it set to the value of a changed field the message
    /// names, when its domain has that value: nested tiles, where a
    /// workgroup tile of 128 columns takes its invocations' tile to 128
    /// ("tile_sizes.warp_tile.n: 1024 does not divide cta_tile.n (128)")
    /// rather than going back to its default of 1024 columns.
    fn follower(&self, point: &[usize], base: &[usize], e: &ParamsError) -> Option<(usize, Point)> {
        let named = (0..point.len())
            .find(|&i| point[i] == base[i] && names_field(&e.path, self.fields[i].path))?;
        let leader = self.mentioned(point, base, e)?;
        let value = &self.values[leader][point[leader]];
        let at = self.values[named].iter().position(|v| v == value)?;
        let mut followed = point.to_vec();
        followed[named] = at;
        Some((named, followed))
    }

    /// The field of `point` off its `base` value to blame for the
    /// scheduler's error `e`: the one it names, else one its message names
    /// (a constraint between two fields names the other there:
    /// "tile_sizes.warp_tile.n: 64 does not divide cta_tile.n (16)").
    fn culprit(&self, point: &[usize], base: &[usize], e: &ParamsError) -> Option<usize> {
        (0..point.len())
            .find(|&i| point[i] != base[i] && names_field(&e.path, self.fields[i].path))
            .or_else(|| self.mentioned(point, base, e))
    }

    /// A field of `point` off its `base` value that the message of `e`
    /// names.
    fn mentioned(&self, point: &[usize], base: &[usize], e: &ParamsError) -> Option<usize> {
        (0..point.len()).find(|&i| point[i] != base[i] && mentions(&e.message, self.fields[i].path))
    }

    /// The base params' point (every field's base value is in its domain).
    pub fn base_point(&self) -> Point {
        self.point_of(&self.base)
    }
}

/// Where `v` joins `values`: before the first larger number when it is a
/// number, else first.
fn in_order(values: &[Value], v: &Value) -> usize {
    let Some(x) = v.as_f64() else { return 0 };
    let larger = |w: &Value| w.as_f64().is_some_and(|w| w > x);
    values.iter().position(larger).unwrap_or(values.len())
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

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use tilefuse_params::Tunable;

    use super::{Grid, Space, digest};

    /// A field's values in a space around a CPU matmul's defaults (whole
    /// rows of 64 columns an invocation, `launch` derived), and the index
    /// of the default's.
    fn values(field: Tunable) -> (Vec<Value>, usize) {
        let f = tilefuse_testing::matmul(64, 64, 64);
        let info = tilefuse_runtime::Device::cpu().info();
        let base = tilefuse_schedulers::heuristics(&f, None, &info).unwrap();
        let mut space = Space::new(base, vec![field]);
        let at = space.base_point()[0];
        (space.values.swap_remove(0), at)
    }

    #[test]
    fn a_descent_probes_each_field_together() {
        let grid = Grid {
            sizes: vec![6, 2, 5, 1],
        };
        let probes = grid.probes(&[1, 0, 2, 0]);
        let expected = [
            // Field 0: a step down and up, then its last value (0 is a
            // step away); field 1: up only; field 2: both ends too.
            [0, 0, 2, 0],
            [2, 0, 2, 0],
            [5, 0, 2, 0],
            [1, 1, 2, 0],
            [1, 0, 1, 0],
            [1, 0, 3, 0],
            [1, 0, 0, 0],
            [1, 0, 4, 0],
        ];
        assert_eq!(probes, expected.map(Vec::from));
    }

    #[test]
    fn a_base_value_outside_its_domain_joins_it_in_order() {
        let n = "tile_sizes.instruction_tile.n";
        let numbers = |v: &[u32]| v.iter().map(|&x| Value::from(x)).collect::<Vec<_>>();
        let below = values(Tunable::pow2(n, 1, 8));
        assert_eq!(below, (numbers(&[1, 2, 4, 8, 64]), 4));
        let above = values(Tunable::pow2(n, 128, 256));
        assert_eq!(above, (numbers(&[64, 128, 256]), 0));
        let between = values(Tunable::choice(n, [16, 256]));
        assert_eq!(between, (numbers(&[16, 64, 256]), 1));
        let derived = values(Tunable::choice(
            "launch.workgroup_size",
            [json!([64, 1, 1])],
        ));
        assert_eq!(derived, (vec![Value::Null, json!([64, 1, 1])], 0));
    }

    /// A CPU matmul's workgroup tile narrowed to 128 of its 256 columns:
    /// the invocations' tiles follow it, where putting it back would give
    /// the default's kernel again.
    #[test]
    fn nested_tiles_follow_a_narrower_workgroup_tile() {
        let f = tilefuse_testing::matmul(256, 256, 256);
        let info = tilefuse_runtime::Device::cpu().info();
        let base = tilefuse_schedulers::heuristics(&f, None, &info).unwrap();
        let (_, fields) = tilefuse_schedulers::tunables(&f, None, &info).unwrap();
        let space = Space::new(base, fields);
        let field = |path: &str| space.fields.iter().position(|t| t.path == path).unwrap();
        let cta = field("tile_sizes.cta_tile.n");
        let mut point = space.base_point();
        point[cta] = space.values[cta].iter().position(|v| v == 128).unwrap();
        let (params, _) = (space.repair(&point, |p| tilefuse_schedulers::schedule(&f, p, &info)))
            .map_err(|(_, e)| e)
            .unwrap();
        for level in ["cta_tile", "warp_tile", "instruction_tile"] {
            assert_eq!(
                params.get(&format!("tile_sizes.{level}.n")),
                Some(128.into())
            );
        }
    }

    #[test]
    fn the_digest_changes_with_a_field_or_a_value_and_only_then() {
        let fields = || vec![Tunable::flag("a"), Tunable::pow2("b", 1, 8)];
        assert_eq!(digest(&fields()), digest(&fields()));
        let mut wider = fields();
        wider[1] = Tunable::pow2("b", 1, 16);
        let mut more = fields();
        more.push(Tunable::flag("c"));
        assert_ne!(digest(&wider), digest(&fields()));
        assert_ne!(digest(&more), digest(&fields()));
    }
}
