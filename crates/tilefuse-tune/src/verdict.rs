//! How the final run's times pick the winner. The finalists are timed in
//! interleaved rounds, so a machine that drifts slows every finalist of a
//! round alike; a finalist replaces the default heuristic's params only
//! when it beat them in every round of five, by more than [`FINAL_GAIN`]
//! (in as many rounds of a longer run as a sign test asks, below). Picked by
//! the lowest median alone, one in five winners of quick tunes of small
//! CPU kernels was over 3 % slower than the default when timed again; one
//! in ten with this rule, about the noise of that measurement
//! (`benches/selection.py`).
//!
//! A winner other than the default is then confirmed: it and the default
//! alone, in more rounds (`clock::rounds`), by the same rule. On a 2-vCPU
//! VM whose rounds of one kernel ran up to 1.3x apart, quick tunes of a
//! 4096² chain kept winners that claimed 1.18x and 1.26x and timed 1.00x
//! and 0.97x the default's speed again (`benches/selection.py`, case chain): the five
//! rounds' sign test lets a finalist no faster than the default win
//! every round once in 32 tunes, and four of the five once in five, and
//! there are four finalists.
//!
//! A large gain may lose one round of five: noise on a shared machine only
//! adds time, and one slowed round out of five vetoed one in six 1.7x
//! winners on lavapipe (`benches/selection.py --device gpu`), while a finalist no faster
//! than the default passes only if the default was slowed, by over
//! [`LARGE_GAIN`], in four rounds of five.
//!
//! Both rules are sign tests, and a run of more rounds may lose as many
//! as keep a finalist no faster than the default as unlikely to pass:
//! [`SMALL_LEVEL`] (all five of five) and [`LARGE_LEVEL`] (four of five).
//! Short kernels get more rounds (`clock::rounds`): on a 2-vCPU VM the
//! default's five rounds of a 0.2 ms matmul ran 154-322 µs, and four
//! quick tunes in ten kept it over a 1.2x kernel (`benches/selection.py`,
//! case matmul). Twenty rounds may lose five (seven for a large gain).

/// What a finalist must gain on the default's params in each round.
pub const FINAL_GAIN: f64 = 0.01;

/// The median gain on the default's params that may lose one round.
pub const LARGE_GAIN: f64 = 0.10;

/// How likely a finalist no faster than the default may be to pass by
/// chance: that of winning all five of five rounds.
const SMALL_LEVEL: f64 = 1.0 / 32.0;

/// [`SMALL_LEVEL`] for a large gain: that of winning four of five.
const LARGE_LEVEL: f64 = 6.0 / 32.0;

/// Each finalist's times in the final run, one per round.
pub type RoundTimes = Vec<Vec<f64>>;

/// The winner among the finalists timed in `rounds` (with those
/// `medians`): the lowest median among those that beat the `default`
/// finalist (when it ran) in enough rounds by [`FINAL_GAIN`] (see
/// [`beats`]), else the default.
pub(crate) fn winner(rounds: &[Vec<f64>], medians: &[f64], default: Option<usize>) -> usize {
    let eligible = |i: &usize| {
        default.is_none_or(|d| i == &d || beats(&rounds[*i], &rounds[d], medians[*i], medians[d]))
    };
    (0..rounds.len())
        .filter(eligible)
        .min_by(|&a, &b| medians[a].total_cmp(&medians[b]))
        .expect("finalists")
}

/// The final run's winner where it is not the `default` finalist: the
/// one a confirmation times again beside it.
pub(crate) fn challenger(rounds: &[Vec<f64>], default: usize) -> Option<usize> {
    let win = winner(rounds, &medians(rounds), Some(default));
    (win != default).then_some(win)
}

/// The winner of the final run's `rounds`, and each finalist's rounds,
/// given the `confirmation` of its [`challenger`] (the default's times and
/// its, where there was one): a challenger the confirmation does not bear
/// out leaves the default the winner; one it does, and the default, are
/// timed over both runs' rounds.
pub(crate) fn settled(
    mut rounds: RoundTimes,
    default: Option<usize>,
    confirmation: Option<&[Vec<f64>]>,
) -> (usize, RoundTimes) {
    let win = winner(&rounds, &medians(&rounds), default);
    let (Some(d), Some(again)) = (default, confirmation) else {
        return (win, rounds);
    };
    if win == d || !confirmed(again) {
        return (d, rounds);
    }
    rounds[d].extend(&again[0]);
    rounds[win].extend(&again[1]);
    (win, rounds)
}

/// Whether the final run's winner beat the default again in the
/// confirmation's `rounds` (the default's times first, the winner's
/// second), by the final run's rule.
pub(crate) fn confirmed(rounds: &[Vec<f64>]) -> bool {
    let [default, winner] = rounds else {
        return false;
    };
    let medians = medians(rounds);
    beats(winner, default, medians[1], medians[0])
}

/// Whether `times` (of that `median`) beat `default`'s (of
/// `default_median`), round by round, by [`FINAL_GAIN`], in all but the
/// rounds a sign test at [`SMALL_LEVEL`] allows to lose ([`LARGE_LEVEL`]
/// where the median gain is [`LARGE_GAIN`]).
fn beats(times: &[f64], default: &[f64], median: f64, default_median: f64) -> bool {
    let large = median < default_median * (1.0 - LARGE_GAIN);
    let lost = (times.iter().zip(default))
        .filter(|(t, d)| **t >= **d * (1.0 - FINAL_GAIN))
        .count();
    let level = if large { LARGE_LEVEL } else { SMALL_LEVEL };
    lost <= losses_allowed(times.len(), level)
}

/// The most of `rounds` rounds a finalist may lose such that one no
/// faster than the default (a coin flip each round) wins the others with
/// a chance of at most `level`; none where even winning all is likelier.
fn losses_allowed(rounds: usize, level: f64) -> usize {
    // P(at least `wins` wins of `rounds`), from all of them down.
    let mut choose = 1.0;
    let mut tail = 0.0;
    let coin = 0.5_f64.powi(rounds as i32);
    for lost in 0..=rounds {
        tail += choose * coin;
        if tail > level {
            return lost.saturating_sub(1);
        }
        choose *= (rounds - lost) as f64 / (lost + 1) as f64;
    }
    rounds
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
    fn a_large_gain_may_lose_one_round_of_five() {
        let default = vec![1.0; 5];
        // One round slowed by 1.8x: still a 1.7x gain on the median.
        let spiked = vec![0.6, 0.6, 1.08, 0.6, 0.6];
        assert_eq!(pick(&[default.clone(), spiked.clone()], Some(0)), 1);
        // A 5 % gain must hold in every round.
        let small = vec![0.95, 0.95, 1.05, 0.95, 0.95];
        assert_eq!(pick(&[default.clone(), small], Some(0)), 0);
        // Two lost rounds, or one of fewer than five, keep the default.
        let twice = vec![0.6, 1.08, 1.08, 0.6, 0.6];
        assert_eq!(pick(&[default, twice], Some(0)), 0);
        assert_eq!(pick(&[vec![1.0; 4], spiked[1..].to_vec()], Some(0)), 0);
        // The default slowed in three rounds: a large gain on the median
        // that lost two rounds.
        let flattered = vec![1.0; 5];
        let slowed = vec![1.0, 1.2, 1.2, 1.2, 1.0];
        assert_eq!(pick(&[slowed, flattered], Some(0)), 0);
    }

    #[test]
    fn more_rounds_may_lose_more_at_the_same_chance() {
        let allowed = |rounds| {
            (
                losses_allowed(rounds, SMALL_LEVEL),
                losses_allowed(rounds, LARGE_LEVEL),
            )
        };
        assert_eq!(allowed(1), (0, 0));
        assert_eq!(allowed(4), (0, 0));
        assert_eq!(allowed(5), (0, 1));
        assert_eq!(allowed(10), (1, 3));
        assert_eq!(allowed(15), (3, 5));
        assert_eq!(allowed(20), (5, 7));
        // Twenty rounds: a steady 5 % gain that lost five passes, one
        // that lost six does not.
        let default = vec![1.0; 20];
        let mut times = vec![0.95; 20];
        times[..5].fill(1.0);
        assert_eq!(pick(&[default.clone(), times.clone()], Some(0)), 1);
        times[5] = 1.0;
        assert_eq!(pick(&[default, times], Some(0)), 0);
    }

    #[test]
    fn a_confirmation_applies_the_final_runs_rule_to_the_pair() {
        let default = vec![1.0; 5];
        assert!(confirmed(&[default.clone(), vec![0.95; 5]]));
        // A small gain lost in one round, a large one in two.
        assert!(!confirmed(&[
            default.clone(),
            vec![0.95, 0.95, 1.0, 0.95, 0.95]
        ]));
        assert!(confirmed(&[
            default.clone(),
            vec![0.6, 0.6, 1.08, 0.6, 0.6]
        ]));
        assert!(!confirmed(&[
            default.clone(),
            vec![0.6, 1.08, 1.08, 0.6, 0.6]
        ]));
        // Not a pair: nothing is confirmed.
        assert!(!confirmed(&[default]));
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
