//! Moves the surrogate's descent makes beyond one field's probes: two
//! fields' best probes at once, and a long field's middle values.

use crate::space::{Grid, Observation, Point, moved};

/// How much slower than the incumbent a field's best probe may run and
/// still join [`combined`] (1.03: 930.0 trials, 1.08: 925.1, 1.5: 928.0
/// over the 96 recorded spaces, against 924.1; 100 seeds;
/// `cargo run --release -p tilefuse-tune --example replay_strategies`).
const NEAR: f64 = 1.05;
/// Fields with at least this many values have their middle values probed
/// by [`middles`] (with the surrogate's sharp labels, 956.2 trials over
/// the 96 recorded spaces → 944.0; 100 seeds;
/// `cargo run --release -p tilefuse-tune --example replay_strategies`).
const LONG_FIELD: usize = 6;

/// `from` with the two fields whose best probes ran fastest (each within
/// `NEAR` of `from`'s `level`) set to those probes' values: two moves
/// that pay only together, as a vectorization and an unroll of 2 on the
/// CPU softmax 2048 x 1536 (each alone 2 % slower, both 4 % faster).
/// `None` when fewer than two fields have such a probe.
pub(crate) fn combined(history: &[Observation], from: &Point, level: f64) -> Option<Point> {
    let mut best: Vec<(f64, usize, usize)> = Vec::new();
    for o in history {
        // A probe as fast as `from` to the digit is its kernel again.
        let Some(t) = o.time.filter(|&t| t != level) else {
            continue;
        };
        let mut moved = (0..from.len()).filter(|&f| o.point[f] != from[f]);
        let (Some(f), None) = (moved.next(), moved.next()) else {
            continue;
        };
        match best.iter_mut().find(|b| b.1 == f) {
            Some(b) if t < b.0 => *b = (t, f, o.point[f]),
            Some(_) => {}
            None => best.push((t, f, o.point[f])),
        }
    }
    best.retain(|b| b.0 <= level * NEAR);
    best.sort_by(|a, b| a.0.total_cmp(&b.0));
    let [(_, f, i), (_, g, j), ..] = best[..] else {
        return None;
    };
    let mut p = from.clone();
    (p[f], p[g]) = (i, j);
    Some(p)
}

/// `from` with each field of at least `LONG_FIELD` values set to each of
/// its values that [`Grid::probes`] skips (not a step away, not an end):
/// a tile size can pay only in the middle of its range.
pub(crate) fn middles(grid: &Grid, from: &Point) -> Vec<Point> {
    let mut out = Vec::new();
    for (f, &n) in grid
        .sizes
        .iter()
        .enumerate()
        .filter(|(_, n)| **n >= LONG_FIELD)
    {
        for i in (1..n - 1).filter(|i| i.abs_diff(from[f]) > 1) {
            out.push(moved(from, f, i));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(point: Point, time: f64) -> Observation {
        Observation {
            point,
            time: Some(time),
        }
    }

    #[test]
    fn the_two_fastest_fields_probes_are_combined() {
        let history = [
            o(vec![1, 1, 1], 1.0),
            o(vec![0, 1, 1], 1.02),
            o(vec![2, 1, 1], 1.2),
            o(vec![1, 2, 1], 1.01),
            o(vec![1, 1, 0], 1.04),
            o(vec![0, 2, 0], 0.5), // two fields moved: not a probe
        ];
        assert_eq!(combined(&history, &vec![1, 1, 1], 1.0), Some(vec![0, 2, 1]));
        // A probe far slower than the incumbent does not join.
        let history = [o(vec![1, 1], 1.0), o(vec![0, 1], 1.01), o(vec![1, 2], 1.2)];
        assert_eq!(combined(&history, &vec![1, 1], 1.0), None);
    }

    #[test]
    fn only_long_fields_get_their_middles() {
        let grid = Grid {
            sizes: vec![7, 5, 6],
        };
        let m = middles(&grid, &vec![0, 0, 3]);
        assert_eq!(
            m,
            [
                vec![2, 0, 3],
                vec![3, 0, 3],
                vec![4, 0, 3],
                vec![5, 0, 3],
                vec![0, 0, 1]
            ]
        );
    }
}
