//! How the final run's times pick the winner. The finalists are timed in
//! interleaved rounds, so a machine that drifts slows every finalist of a
//! round alike; a finalist replaces the default heuristic's params only
//! when it beat them in every round, by more than [`FINAL_GAIN`]. Picked by
//! the lowest median alone, one in five winners of quick tunes of small
//! CPU kernels was over 3 % slower than the default when timed again; one
//! in ten with this rule, about the noise of that measurement
//! (BENCHMARKS.md, thirty-fifth session; `benches/selection.py`).

/// What a finalist must gain on the default's params in each round.
pub const FINAL_GAIN: f64 = 0.01;

/// Each finalist's times in the final run, one per round.
pub type RoundTimes = Vec<Vec<f64>>;

/// The winner among the finalists timed in `rounds` (with those
/// `medians`): the lowest median among those that beat the `default`
/// finalist (when it ran) in every round by [`FINAL_GAIN`], else the
/// default.
pub(crate) fn winner(rounds: &[Vec<f64>], medians: &[f64], default: Option<usize>) -> usize {
    let eligible = |i: &usize| default.is_none_or(|d| i == &d || beats(&rounds[*i], &rounds[d]));
    (0..rounds.len())
        .filter(eligible)
        .min_by(|&a, &b| medians[a].total_cmp(&medians[b]))
        .expect("finalists")
}

/// Whether `times` beat `default`'s, round by round, by [`FINAL_GAIN`].
fn beats(times: &[f64], default: &[f64]) -> bool {
    (times.iter().zip(default)).all(|(t, d)| *t < *d * (1.0 - FINAL_GAIN))
}

/// Each finalist's median over the rounds.
pub(crate) fn medians(rounds: &[Vec<f64>]) -> Vec<f64> {
    (rounds.iter())
        .map(|r| crate::measure::median(&mut r.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick(rounds: &[Vec<f64>], default: Option<usize>) -> usize {
        winner(rounds, &medians(rounds), default)
    }

    #[test]
    fn a_finalist_must_beat_the_default_in_every_round() {
        let default = vec![1.0, 1.0, 1.0];
        // The lowest median, but slower than the default in one round.
        let lucky = vec![0.8, 0.8, 1.05];
        let steady = vec![0.95, 0.97, 0.96];
        assert_eq!(pick(&[default.clone(), lucky.clone(), steady], Some(0)), 2);
        assert_eq!(pick(&[default.clone(), lucky.clone()], Some(0)), 0);
        // Without a default (it failed), the lowest median.
        assert_eq!(pick(&[default, lucky], None), 1);
    }

    #[test]
    fn a_gain_within_the_margin_keeps_the_default() {
        let default = vec![1.0, 1.0, 1.0];
        let close = vec![0.995, 0.995, 0.995];
        assert_eq!(pick(&[default, close], Some(0)), 0);
        // The default need not be first.
        assert_eq!(pick(&[vec![0.5], vec![1.0]], Some(1)), 0);
        assert_eq!(medians(&[vec![3.0, 1.0, 2.0]]), [2.0]);
    }
}
