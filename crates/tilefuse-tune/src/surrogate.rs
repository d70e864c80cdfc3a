//! The surrogate-guided strategy (Helion's LFBO search, after a pattern
//! descent). It first walks from the default heuristic's point to the
//! first probe that is faster (by more than `MIN_GAIN`), trying the
//! last paying move again before the other probes (each field a step
//! down and up, then its first and last values, field by field), then
//! the two fields' best probes at once, then the same around the two
//! fastest other kernels within that gain (sideways, across a plateau,
//! unless most of the incumbent's probes ran alike), then around the
//! points it left before probing them all (back to the last incumbent,
//! then the one before), then the incumbent's long fields' middle
//! values ([`far_moves`]), until every one of those was tried; within
//! each neighbourhood the forest below ranks which point to try next
//! once a few are measured.
//! Then a random forest learns how good each point is (a label falling
//! sharply with its time over the fastest's) from every observation,
//! failures included (a failed, wrong or cut candidate is labelled 0,
//! so the model learns to avoid its region); each round scores a pool
//! of unseen points (neighbours of the best few, one and two steps
//! away, and random ones) and proposes a batch of the likeliest-good
//! that differ from each other in at least two fields, so one round
//! does not spend its trials on near-copies. The pool's random points
//! are the exploration: the forest picks one when it ranks it above the
//! neighbours.

use std::collections::HashSet;

use rand::Rng;
use rand::rngs::StdRng;
use smartcore::ensemble::random_forest_regressor::{
    RandomForestRegressor, RandomForestRegressorParameters,
};
use smartcore::linalg::basic::matrix::DenseMatrix;

use crate::far_moves;
use crate::space::Observation;
use crate::space::{Grid, Point};

/// Points measured before the model is trusted.
const INITIAL: usize = 8;
/// Points measured before the forest ranks the descent's next step (2 to
/// 8 ran alike over the recorded spaces: 173.5-177.3 trials).
const RANKED_FROM: usize = 4;
/// The gain that moves the descent: closer timings are within the noise
/// of a shared machine, and chasing them walks the descent off at random.
const MIN_GAIN: f64 = 0.02;
/// Kernels within `MIN_GAIN` of the incumbent whose neighbourhoods the
/// stuck descent walks too.
const PLATEAU: usize = 2;
/// How close to the incumbent's time a probe counts as flat (about the
/// noise of a shared machine), and the share of probed kernels that
/// must be that close for the landscape to be flat (0.5 to 0.75 and 2 to
/// 5 % ran alike over the recorded spaces).
const FLAT: f64 = 0.03;
const FLAT_SHARE: f64 = 0.75;
/// Points proposed per round: two rather than four, so the forest refits
/// on every pair measured (over the 96 recorded spaces, with the labels
/// and middle probes of `far_moves`, 944.0 trials by the mean → 934.5;
/// six: 951.2; 100 seeds; `--example replay_strategies`).
const BATCH: usize = 2;
/// Observed points whose neighbourhoods join the pool.
const TOP: usize = 3;
/// Random points in the pool.
const RANDOM_POOL: usize = 96;
/// How sharply a point's label falls with its time: `(fastest / t)^80`,
/// 1 for the fastest, 0.18 at 2 % slower, 0.02 at 5 %. A regression on
/// that rather than on 0/1 labels of the faster half tells the forest how
/// far from the best each point ran: over the 96 recorded spaces, 981.3
/// trials by the mean to within 5 % → 956.2 (40: 958.9, 160: 971.6, 400:
/// 966.7; linear ranks 965-977; 100 seeds; `--example
/// replay_strategies`).
const SHARPNESS: f64 = 80.0;
/// Trees in the forest (32: 934.5 trials, 64: 932.1, 128: 929.5 over the
/// 96 recorded spaces, 100 seeds; a fit costs milliseconds against a
/// trial's compile and run).
const TREES: usize = 64;

/// The next batch of points, none of them in `tried`.
pub(crate) fn propose(
    grid: &Grid,
    history: &[Observation],
    tried: &HashSet<Point>,
    rng: &mut StdRng,
) -> Vec<Point> {
    if let Some(p) = descent_step(grid, history, tried, rng) {
        return vec![p];
    }
    let labels = labels(history);
    if history.len() < INITIAL || !informative(&labels) {
        return vec![grid.random(rng)];
    }
    let pool = pool(grid, history, tried, rng);
    if pool.is_empty() {
        return vec![grid.random(rng)];
    }
    let scores = match fit_and_score(grid, history, &labels, &pool, rng.next_u64()) {
        Some(s) => s,
        None => return vec![grid.random(rng)],
    };
    diverse_batch(&pool, &scores)
}

/// The next step of the descent from the default heuristic's point: after
/// a paying step, the same field's step the other way from where it was
/// probed (a first-improvement descent takes "down" without trying "up":
/// on the CPU RMS norm 4096 x 128 the step down paid 5 % and the step up
/// 11 %, 11.6 trials by the mean → 4.0, no other of the 69 recorded
/// spaces moved; `--example replay_strategies`); then the last
/// move repeated (Hooke and Jeeves' pattern move: a direction that paid
/// once often pays again), then an untried probe of the incumbent
/// ([`Grid::probes`]), then [`far_moves::combined`], then of each kernel
/// of its plateau (unless the
/// incumbent's probes are [`flat`]), then of the earlier incumbents, last
/// first, then [`far_moves::middles`], each neighbourhood's points taken
/// in [`likeliest`]'s order; `None` once all were tried. The earlier incumbents are there because
/// the descent leaves a point at its first paying probe: on the CPU row
/// sum 300 x 3000 the best lies at the base's last probe, behind one that
/// paid 5 % and led nowhere (25.2 trials by the mean → 11.1, 400 seeds).
/// Of the 49 other recorded spaces one moved, the other way: the CPU row
/// sum 1024 x 768, 14.2 → 17.2 (`--example replay_strategies`).
fn descent_step(
    grid: &Grid,
    history: &[Observation],
    tried: &HashSet<Point>,
    rng: &mut StdRng,
) -> Option<Point> {
    let chain = incumbents(history);
    let (&from, earlier_chain) = chain.split_last()?;
    // The move is repeated from where it was probed, not from the
    // incumbent before (after a step down and a better step up, the one
    // before is the step down).
    let probes_from = |b: &&&Point| grid.probes(b).contains(from);
    let before = (earlier_chain.iter().rev().find(probes_from)).or(earlier_chain.last());
    let before = before.copied();
    let other_way = before.and_then(|b| opposite(grid, b, from));
    if let Some(p) = other_way.filter(|p| !tried.contains(p)) {
        return Some(p);
    }
    let repeated = before.and_then(|b| grid.step(from, b));
    if let Some(p) = repeated.filter(|p| !tried.contains(p)) {
        return Some(p);
    }
    let around = |p: &Point| -> Vec<Point> {
        (grid.probes(p).into_iter())
            .filter(|q| !tried.contains(q))
            .collect()
    };
    let level = time_of(history, from)?;
    let combined = far_moves::combined(history, from, level);
    if let Some(p) = combined.filter(|p| around(from).is_empty() && !tried.contains(p)) {
        return Some(p);
    }
    let sideways = if flat(grid, history, from) {
        Vec::new()
    } else {
        plateau(history, from)
    };
    let earlier = chain.iter().rev().skip(1).copied();
    let mut centres = std::iter::once(from).chain(sideways).chain(earlier);
    let untried = centres.find_map(|p| Some(around(p)).filter(|c| !c.is_empty()));
    let middles = || {
        far_moves::middles(grid, from)
            .into_iter()
            .filter(|p| !tried.contains(p))
    };
    let untried = untried.unwrap_or_else(|| middles().collect());
    (!untried.is_empty()).then(|| likeliest(grid, history, untried, rng))
}

/// The candidate the forest ranks likeliest good (the first of equals),
/// once `RANKED_FROM` points are measured and some of them are good and
/// some not; else the first. Over the recorded spaces in fixed order, the
/// descent took 184.9 trials by the mean to get within 5 % of the best;
/// ranked, 173.8 (`--example replay_strategies`).
fn likeliest(
    grid: &Grid,
    history: &[Observation],
    mut candidates: Vec<Point>,
    rng: &mut StdRng,
) -> Point {
    let labels = labels(history);
    let ranked = candidates.len() > 1 && history.len() >= RANKED_FROM && informative(&labels);
    let scores = ranked
        .then(|| fit_and_score(grid, history, &labels, &candidates, rng.next_u64()))
        .flatten();
    let pick = scores.map_or(0, |s| {
        (0..s.len())
            .max_by(|&a, &b| s[a].total_cmp(&s[b]).then(b.cmp(&a)))
            .unwrap_or(0)
    });
    candidates.swap_remove(pick)
}

/// The step from `base` the other way along the one field in which `to`
/// is one step from it.
fn opposite(grid: &Grid, base: &Point, to: &Point) -> Option<Point> {
    let mut moved = (0..base.len()).filter(|&f| base[f] != to[f]);
    let f = moved.next().filter(|_| moved.next().is_none())?;
    if base[f].abs_diff(to[f]) != 1 {
        return None;
    }
    let i = (2 * base[f])
        .checked_sub(to[f])
        .filter(|&i| i < grid.sizes[f])?;
    let mut p = base.clone();
    p[f] = i;
    Some(p)
}

/// Whether `labels` hold both good and not good points (above and below
/// one half: within and beyond about 1 % of the fastest), so a forest has
/// something to tell apart.
fn informative(labels: &[f64]) -> bool {
    labels.iter().any(|&y| y > 0.5) && labels.iter().any(|&y| y < 0.5)
}

/// Up to `PLATEAU` other kernels as fast as `from` within `MIN_GAIN`,
/// fastest first: where a descent goes sideways once its own
/// neighbourhood is spent (a field that pays only after another moved
/// can sit behind a step the noise makes flat).
fn plateau<'h>(history: &'h [Observation], from: &Point) -> Vec<&'h Point> {
    let Some(level) = time_of(history, from) else {
        return Vec::new();
    };
    let mut near: Vec<(f64, &Point)> = (history.iter())
        .filter_map(|o| Some((o.time?, &o.point)))
        .filter(|&(t, _)| t != level && t <= level / (1.0 - MIN_GAIN))
        .collect();
    near.sort_by(|a, b| a.0.total_cmp(&b.0));
    // A duplicate carries its original's time: one point per kernel.
    near.dedup_by(|a, b| a.0 == b.0);
    near.into_iter().take(PLATEAU).map(|(_, p)| p).collect()
}

/// Whether most kernels probed around `from` ran within `FLAT` of it:
/// a landscape of noise around the incumbent, where walking the plateau
/// kernels' neighbourhoods too finds only more noise and the forest's
/// rounds (whose pools hold random points) look further sooner. On the 1000²
/// CPU layer norm, whose fast kernels lie three steps of one field away,
/// 19.3 trials by the mean → 14.3 (400 seeds); no other of the first 28
/// recorded spaces moved (`--example replay_strategies`).
fn flat(grid: &Grid, history: &[Observation], from: &Point) -> bool {
    let Some(level) = time_of(history, from) else {
        return false;
    };
    let probes: HashSet<Point> = grid.probes(from).into_iter().collect();
    let mut times: Vec<f64> = (history.iter())
        .filter(|o| probes.contains(&o.point))
        .filter_map(|o| o.time)
        .filter(|&t| t != level)
        .collect();
    times.sort_by(f64::total_cmp);
    // A duplicate carries its original's time: one time per kernel.
    times.dedup();
    let close = times
        .iter()
        .filter(|&&t| (t / level - 1.0).abs() <= FLAT)
        .count();
    !times.is_empty() && close as f64 >= FLAT_SHARE * times.len() as f64
}

/// The time `point` ran in, if it ran.
fn time_of(history: &[Observation], point: &Point) -> Option<f64> {
    history.iter().find(|o| &o.point == point)?.time
}

/// Where the descent stood, in order: the first point that ran, then
/// each later one faster than the last by more than `MIN_GAIN`.
fn incumbents(history: &[Observation]) -> Vec<&Point> {
    let mut chain = Vec::new();
    let mut best = f64::INFINITY;
    for o in history {
        if let Some(t) = o.time
            && t < best * (1.0 - MIN_GAIN)
        {
            best = t;
            chain.push(&o.point);
        }
    }
    chain
}

/// How good each observation is: `(fastest / time)^SHARPNESS`, 0 for a
/// failure.
fn labels(history: &[Observation]) -> Vec<f64> {
    let fastest = (history.iter().filter_map(|o| o.time)).fold(f64::INFINITY, f64::min);
    (history.iter())
        .map(|o| o.time.map_or(0.0, |t| (fastest / t).powf(SHARPNESS)))
        .collect()
}

/// Each field's value index scaled to [0, 1].
fn encode(grid: &Grid, point: &[usize]) -> Vec<f64> {
    (grid.sizes.iter().zip(point))
        .map(|(&n, &i)| {
            if n > 1 {
                i as f64 / (n - 1) as f64
            } else {
                0.0
            }
        })
        .collect()
}

/// Unseen points near the best few, and random ones.
fn pool(
    grid: &Grid,
    history: &[Observation],
    tried: &HashSet<Point>,
    rng: &mut StdRng,
) -> Vec<Point> {
    let mut best: Vec<&Observation> = history.iter().filter(|o| o.time.is_some()).collect();
    best.sort_by(|a, b| a.time.unwrap().total_cmp(&b.time.unwrap()));
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    let mut add = |p: Point, out: &mut Vec<Point>| {
        if !tried.contains(&p) && seen.insert(p.clone()) {
            out.push(p);
        }
    };
    for o in best.iter().take(TOP) {
        for near in grid.neighbors(&o.point) {
            for further in grid.neighbors(&near) {
                add(further, &mut out);
            }
            add(near, &mut out);
        }
    }
    for _ in 0..RANDOM_POOL {
        add(grid.random(rng), &mut out);
    }
    out
}

/// The forest's estimate that each pool point is good.
fn fit_and_score(
    grid: &Grid,
    history: &[Observation],
    labels: &[f64],
    pool: &[Point],
    seed: u64,
) -> Option<Vec<f64>> {
    let rows = |points: &mut dyn Iterator<Item = &Point>| {
        DenseMatrix::from_2d_vec(&points.map(|p| encode(grid, p)).collect::<Vec<_>>()).ok()
    };
    let x = rows(&mut history.iter().map(|o| &o.point))?;
    let params = RandomForestRegressorParameters::default()
        .with_n_trees(TREES)
        .with_max_depth(8)
        .with_min_samples_leaf(1)
        .with_min_samples_split(2)
        .with_seed(seed);
    let forest = RandomForestRegressor::fit(&x, &labels.to_vec(), params).ok()?;
    forest.predict(&rows(&mut pool.iter())?).ok()
}

/// The highest-scoring points, each differing from those already picked
/// in at least two fields (fewer when the pool runs out).
fn diverse_batch(pool: &[Point], scores: &[f64]) -> Vec<Point> {
    let mut order: Vec<usize> = (0..pool.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    let mut batch: Vec<Point> = Vec::new();
    for i in order {
        let p = &pool[i];
        let far = |q: &Point| p.iter().zip(q).filter(|(a, b)| a != b).count() >= 2;
        if batch.iter().all(far) {
            batch.push(p.clone());
            if batch.len() == BATCH {
                break;
            }
        }
    }
    batch
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    fn rng() -> StdRng {
        StdRng::seed_from_u64(7)
    }

    /// A measured point.
    fn o(point: Point, time: f64) -> Observation {
        Observation {
            point,
            time: Some(time),
        }
    }

    /// The descent's next step after `history`, every point of it tried.
    fn next_step(grid: &Grid, history: &[Observation]) -> Option<Point> {
        descent_step(grid, history, &points_of(history), &mut rng())
    }

    /// The points of `history`, as a search has them tried.
    fn points_of(history: &[Observation]) -> HashSet<Point> {
        history.iter().map(|o| o.point.clone()).collect()
    }

    #[test]
    fn the_descent_moves_only_for_a_gain_above_the_noise() {
        let history = [
            o(vec![0], 1.0),
            o(vec![1], 0.99),
            o(vec![2], 0.9),
            o(vec![3], 0.89),
        ];
        assert_eq!(incumbents(&history[..2]), [&vec![0]]);
        assert_eq!(incumbents(&history), [&vec![0], &vec![2]]);
        let grid = Grid { sizes: vec![4] };
        let tried = HashSet::from([vec![1], vec![2]]);
        assert_eq!(
            descent_step(&grid, &history[..3], &tried, &mut rng()),
            Some(vec![3])
        );
        let tried = HashSet::from([vec![1], vec![3], vec![0]]);
        assert_eq!(descent_step(&grid, &history[..3], &tried, &mut rng()), None);
    }

    #[test]
    fn a_move_that_paid_is_repeated_before_the_neighbours() {
        let grid = Grid { sizes: vec![4, 3] };
        let history = [o(vec![1, 0], 1.0), o(vec![2, 0], 1.1), o(vec![1, 1], 0.9)];
        // [0, 1] is the incumbent's first neighbour; [1, 2] repeats the move.
        assert_eq!(next_step(&grid, &history), Some(vec![1, 2]));
        // Past the grid's edge there is no repeat: the probes come next,
        // field 0's (its one neighbour was tried; its far end) first.
        let history = [o(vec![2, 1], 1.0), o(vec![1, 1], 1.2), o(vec![3, 1], 0.9)];
        assert_eq!(grid.step(&[3, 1], &[2, 1]), None);
        assert_eq!(next_step(&grid, &history), Some(vec![0, 1]));
    }

    #[test]
    fn a_paying_step_down_is_weighed_against_the_step_up() {
        let grid = Grid { sizes: vec![7, 2] };
        let history = [o(vec![3, 0], 1.0), o(vec![2, 0], 0.95)];
        assert_eq!(next_step(&grid, &history), Some(vec![4, 0]));
        // The step up paid more: its repeat goes on from the base, one
        // step further up, not two steps past the step down.
        let history = [o(vec![3, 0], 1.0), o(vec![2, 0], 0.95), o(vec![4, 0], 0.9)];
        assert_eq!(next_step(&grid, &history), Some(vec![5, 0]));
        // A step across two fields has no other way.
        assert_eq!(opposite(&grid, &vec![3, 0], &vec![2, 1]), None);
        assert_eq!(opposite(&grid, &vec![0, 0], &vec![1, 0]), None);
    }

    #[test]
    fn a_spent_descent_goes_sideways_to_kernels_as_fast() {
        let grid = Grid { sizes: vec![3, 3] };
        let history = [
            o(vec![1, 1], 1.0),
            o(vec![0, 1], 1.01),
            o(vec![2, 1], 1.5),
            o(vec![1, 0], 1.01), // [0, 1]'s kernel again
            o(vec![1, 2], 1.005),
        ];
        let tried = points_of(&history);
        assert_eq!(plateau(&history, &vec![1, 1]), [&vec![1, 2], &vec![0, 1]]);
        // The incumbent's neighbours are spent (and its ends are
        // neighbours): [1, 2]'s are next, in the forest's order.
        let next = descent_step(&grid, &history, &tried, &mut rng());
        assert!([vec![0, 2], vec![2, 2]].contains(&next.unwrap()));
        let slower = [o(vec![1, 1], 1.0), o(vec![1, 2], 1.03)];
        assert!(plateau(&slower, &vec![1, 1]).is_empty());
    }

    #[test]
    fn a_stuck_descent_probes_each_field_at_its_ends_then_a_long_fields_middle() {
        let grid = Grid { sizes: vec![6, 2] };
        let history = [Observation {
            point: vec![1, 0],
            time: Some(1.0),
        }];
        let mut tried: HashSet<Point> = HashSet::from([vec![1, 0]]);
        tried.extend(grid.neighbors(&[1, 0]));
        // Index 0 is one step away (a neighbour); field 1 has no far end.
        assert_eq!(
            descent_step(&grid, &history, &tried, &mut rng()),
            Some(vec![5, 0])
        );
        tried.insert(vec![5, 0]);
        // Every probe spent: field 0 (six values) is probed in between.
        let next = descent_step(&grid, &history, &tried, &mut rng());
        assert!([vec![3, 0], vec![4, 0]].contains(&next.unwrap()));
        tried.extend([vec![3, 0], vec![4, 0]]);
        assert_eq!(descent_step(&grid, &history, &tried, &mut rng()), None);
    }

    #[test]
    fn a_spent_descent_goes_back_to_the_probes_it_left() {
        let grid = Grid { sizes: vec![3, 6] };
        // [1, 0] paid before the base's field 1 was probed; every probe of
        // [1, 0] since ran slower.
        let history = [
            o(vec![0, 0], 1.0),
            o(vec![1, 0], 0.9),
            o(vec![2, 0], 1.0),
            o(vec![1, 1], 1.1),
            o(vec![1, 5], 1.2),
        ];
        let tried = points_of(&history);
        assert!(plateau(&history, &vec![1, 0]).is_empty());
        let next = descent_step(&grid, &history, &tried, &mut rng());
        assert!([vec![0, 1], vec![0, 5]].contains(&next.unwrap()));
        let tried: HashSet<Point> = tried.into_iter().chain([vec![0, 1], vec![0, 5]]).collect();
        // Then the incumbent's field 1 between its probes.
        let next = descent_step(&grid, &history, &tried, &mut rng());
        assert!([vec![1, 2], vec![1, 3], vec![1, 4]].contains(&next.unwrap()));
    }

    #[test]
    fn a_flat_neighbourhood_is_left_to_the_forest() {
        let grid = Grid { sizes: vec![3, 3] };
        let around = |times: [f64; 4]| -> Vec<Observation> {
            let probes = [vec![0, 1], vec![2, 1], vec![1, 0], vec![1, 2]];
            std::iter::once(o(vec![1, 1], 1.0))
                .chain(probes.into_iter().zip(times).map(|(p, t)| o(p, t)))
                .collect()
        };
        // Every probe within 3 %: no sideways walk around [1, 0].
        let history = around([1.01, 1.02, 0.995, 1.012]);
        let tried = points_of(&history);
        assert!(flat(&grid, &history, &vec![1, 1]));
        // The two fastest probes together ([1, 0] and [0, 1]), and no more.
        let next = descent_step(&grid, &history, &tried, &mut rng());
        assert_eq!(next, Some(vec![0, 0]));
        let tried: HashSet<Point> = tried.into_iter().chain(next).collect();
        assert_eq!(descent_step(&grid, &history, &tried, &mut rng()), None);
        // Half of them far off: the landscape has a shape to walk.
        let history = around([1.01, 1.5, 0.995, 1.3]);
        assert!(!flat(&grid, &history, &vec![1, 1]));
        assert!(descent_step(&grid, &history, &tried, &mut rng()).is_some());
    }

    #[test]
    fn the_forest_ranks_a_neighbourhood_once_a_few_points_ran() {
        // Field 0 at 2 or more is fast, below it slow; field 1 is noise.
        let grid = Grid { sizes: vec![4, 4] };
        let history: Vec<Observation> = [(2, 0, 1.0), (0, 1, 2.0), (3, 2, 1.01), (1, 3, 2.1)]
            .into_iter()
            .chain([(0, 0, 1.9), (2, 3, 1.02), (1, 0, 2.2), (3, 1, 0.99)])
            .map(|(f0, f1, t)| o(vec![f0, f1], t))
            .collect();
        let candidates = vec![vec![0, 2], vec![1, 1], vec![3, 3], vec![0, 3]];
        let pick = likeliest(&grid, &history, candidates.clone(), &mut rng());
        assert_eq!(pick, vec![3, 3]);
        // Too few points measured: the descent's own order.
        let pick = likeliest(&grid, &history[..RANKED_FROM - 1], candidates, &mut rng());
        assert_eq!(pick, vec![0, 2]);
    }
}
