//! Candidate times on a machine whose speed drifts. A shared VM runs a
//! memory-bound kernel 1.8x slower in some spells of seconds than in
//! others, and every kernel timed in a spell moves alike: two kernels
//! timed back to back kept their ratio within 10 % while each moved by up
//! to 80 % (`benches/selection.py`). A search that
//! compares candidates timed seconds apart learns the spells, not the
//! kernels. So each candidate's time is paired with a timing of one
//! reference kernel (the default heuristic's) right after it: the time a
//! candidate gets is its ratio to the reference's then, times the
//! default's time in the search (its trial's). Every candidate of a run
//! is so timed at the speed of one moment, on every worker: a worker on a
//! machine slower than another's gives the same ratios.

use tilefuse_ir::Fusion;
use tilefuse_runtime::{Device, Kernel};
use tilefuse_schedulers::heuristics;

use crate::candidate::{Candidate, Measured};
use crate::measure::{self, LONG_LAUNCH, Problem, launches_for};
use crate::trial::Status;

/// Checks and times candidates one after another on one device, each
/// time paired with a [`Reference`] where the device computes on the
/// host's cores (the CPU device, lavapipe). What a [`crate::LocalExecutor`]
/// and a remote worker measure with.
pub struct Stopwatch {
    problem: Problem,
    paired: bool,
    reference: Option<Reference>,
}

impl Stopwatch {
    /// A stopwatch whose reference is the first candidate that runs (a
    /// search's first is the default heuristic's).
    pub fn new(device: &Device, problem: Problem) -> Stopwatch {
        Stopwatch {
            problem,
            paired: device.info().on_the_host(),
            reference: None,
        }
    }

    /// A stopwatch whose reference is the default heuristic's kernel for
    /// `fusion`, built and timed (with `repeat` launches) now when it
    /// pairs: a remote worker's, which may never be handed the default.
    /// Where the default fails, the first candidate that runs.
    pub fn with_default(
        fusion: &Fusion,
        device: &Device,
        problem: Problem,
        repeat: usize,
    ) -> Stopwatch {
        let mut s = Stopwatch::new(device, problem);
        if s.paired {
            s.reference = Reference::of_default(fusion, device, &s.problem, repeat);
        }
        s
    }

    /// What candidates are checked and timed on.
    pub fn problem(&self) -> &Problem {
        &self.problem
    }

    /// `c`, whose build took `seconds` and gave `kernel`, checked and
    /// timed.
    pub fn measure(
        &mut self,
        (kernel, seconds): (Result<Kernel, String>, f64),
        c: &Candidate,
    ) -> Measured {
        let before = self.problem.launches.count();
        let m = match kernel {
            Ok(kernel) => self.timed(kernel, c),
            Err(e) => Measured::failed(e),
        };
        Measured {
            build: Some(seconds),
            launches: self.problem.launches.count() - before,
            ..m
        }
    }

    /// `c` checked and timed on its `kernel`; when pairing, its time
    /// paired with the reference's, or the reference it becomes, and the
    /// best time it may be cut against at the speed the reference ran at
    /// last: a search's times are at the speed of its default's trial, and
    /// a candidate timed in a spell 3x slower than that would be cut
    /// however fast (one quick tune of a CPU matmul ran 2 kernels of its
    /// 89 trials).
    fn timed(&mut self, kernel: Kernel, c: &Candidate) -> Measured {
        let at_speed;
        let c = match (&self.reference, c.best) {
            (Some(r), Some(best)) if self.paired => {
                at_speed = Candidate {
                    best: Some(r.at_speed(best, c)),
                    ..c.clone()
                };
                &at_speed
            }
            _ => c,
        };
        let mut m = measure::timed(&kernel, &self.problem, c);
        let ran = m.time.filter(|_| self.paired && m.status == Status::Ok);
        match (ran, &mut self.reference) {
            (Some(t), Some(r)) => m.time = Some(r.pair(&self.problem, t, c)),
            (Some(t), None) => {
                // A search hands out the default heuristic's params first.
                let default = c.id == 0;
                self.reference = Some(Reference {
                    kernel,
                    time: t,
                    now: t,
                    default,
                });
            }
            (None, _) => {}
        }
        m
    }
}

/// The kernel candidates are paired with, its first and its latest time,
/// and whether it is the default heuristic's (whose time in the search a
/// candidate's anchor gives).
pub(crate) struct Reference {
    kernel: Kernel,
    time: f64,
    now: f64,
    default: bool,
}

impl Reference {
    /// The default heuristic's kernel for `fusion` on `device`, timed
    /// now; `None` when it fails to build or run.
    fn of_default(
        fusion: &Fusion,
        device: &Device,
        problem: &Problem,
        repeat: usize,
    ) -> Option<Reference> {
        let params = heuristics(fusion, None, &device.info()).ok()?;
        let kernel = measure::build(fusion, device, &params.to_value()).ok()?;
        let time = now(problem, &kernel, repeat, None).ok()?;
        Some(Reference {
            kernel,
            time,
            now: time,
            default: true,
        })
    }

    /// The time `c`'s paired times are at the speed of (its anchor, when
    /// the reference is the default's kernel, else the reference's first).
    fn at(&self, c: &Candidate) -> f64 {
        c.anchor.filter(|_| self.default).unwrap_or(self.time)
    }

    /// `best`, a paired time, at the speed the reference ran at last.
    fn at_speed(&self, best: f64, c: &Candidate) -> f64 {
        best * self.now / self.at(c)
    }

    /// `time`, candidate `c`'s just measured, paired: scaled by the
    /// default's time in the search (`c.anchor`, when the reference is
    /// the default's kernel), else the reference's first time, over the
    /// reference's time now. Unscaled when the reference fails to run
    /// (it ran before; a failure now is not the candidate's).
    pub(crate) fn pair(&mut self, problem: &Problem, time: f64, c: &Candidate) -> f64 {
        match now(problem, &self.kernel, c.timing.repeat, Some(self.now)) {
            Ok(now) => {
                self.now = now;
                time * self.at(c) / now
            }
            Err(_) => time,
        }
    }
}

/// `kernel` timed as a candidate is: a long kernel (its `last` time at
/// least [`LONG_LAUNCH`]) by [`launches_for`] it, else the faster of a
/// short timing and one of `repeat` launches (a spike in one timing moves
/// neither time).
fn now(
    problem: &Problem,
    kernel: &Kernel,
    repeat: usize,
    last: Option<f64>,
) -> Result<f64, String> {
    if let Some(last) = last.filter(|&t| t >= LONG_LAUNCH) {
        return problem.time(kernel, 0, launches_for(last, repeat));
    }
    let short = problem.short(kernel)?;
    Ok(short.min(problem.time(kernel, 0, repeat)?))
}

#[cfg(test)]
mod tests {
    use tilefuse_runtime::Device;
    use tilefuse_testing::softmax;

    use super::*;

    /// A softmax, the CPU device, and a candidate of its default params.
    fn setup() -> (Fusion, Device, Candidate) {
        let f = softmax(&[64, 256], -1);
        let device = Device::cpu();
        let params = heuristics(&f, None, &device.info()).unwrap().to_value();
        let c = Candidate {
            id: 0,
            params,
            point: Vec::new(),
            best: None,
            corrupt: false,
            timing: crate::Timing {
                warmup: 1,
                repeat: 5,
            },
            anchor: None,
        };
        (f, device, c)
    }

    #[test]
    fn a_stopwatch_pairs_each_time_with_its_first_candidate_s_kernel() {
        let (f, device, c) = setup();
        let mut stopwatch = Stopwatch::new(&device, Problem::new(&f, 1).unwrap());
        let first = stopwatch.measure(measure::build_timed(&f, &device, &c.params), &c);
        assert_eq!(first.status, Status::Ok);
        let reference = stopwatch.reference.as_mut().expect("the first kernel");
        // As if the first had run in a spell 100x slow: later candidates
        // are timed at that speed.
        reference.time *= 100.0;
        let later = stopwatch.measure(measure::build_timed(&f, &device, &c.params), &c);
        let ratio = later.time.unwrap() / first.time.unwrap();
        assert!((20.0..500.0).contains(&ratio), "{ratio}");
        assert!(later.build.is_some_and(|s| s > 0.0));
    }

    #[test]
    fn a_candidate_is_cut_against_the_best_at_the_speed_the_reference_ran_at_last() {
        let (f, device, c) = setup();
        let mut stopwatch = Stopwatch::new(&device, Problem::new(&f, 1).unwrap());
        let built = || measure::build_timed(&f, &device, &c.params);
        stopwatch.measure(built(), &c);
        // As if the first had run in a spell 10x fast: the search's best
        // (its time) is a tenth of what the kernel takes now, and a
        // candidate as fast would be cut at over 3x it.
        let reference = stopwatch.reference.as_mut().expect("the first kernel");
        reference.time /= 10.0;
        let best = reference.time;
        stopwatch.measure(built(), &c);
        let c = Candidate {
            best: Some(best),
            ..c.clone()
        };
        let again = stopwatch.measure(built(), &c);
        assert_eq!(again.status, Status::Ok, "{again:?}");
        let ratio = again.time.unwrap() / best;
        assert!((0.2..5.0).contains(&ratio), "{ratio}");
    }

    #[test]
    fn a_worker_s_times_are_at_the_speed_of_the_default_s_trial_in_the_search() {
        let (f, device, c) = setup();
        let problem = Problem::new(&f, 1).unwrap();
        let mut stopwatch = Stopwatch::with_default(&f, &device, problem, 5);
        // The default's own kernel, handed to a worker that did not
        // measure the default's trial: the search's time for it, 1 s.
        let c = Candidate {
            id: 7,
            anchor: Some(1.0),
            ..c
        };
        let built = || measure::build_timed(&f, &device, &c.params);
        let anchored = stopwatch.measure(built(), &c).time.unwrap();
        assert!((0.5..2.0).contains(&anchored), "{anchored}");
        // Before the search knew the default's time: the worker's own.
        let own = stopwatch.measure(
            built(),
            &Candidate {
                anchor: None,
                ..c.clone()
            },
        );
        assert!(own.time.unwrap() < 0.1, "{own:?}");
    }

    #[test]
    fn an_anchor_is_not_applied_to_another_kernel_than_the_default_s() {
        let (f, device, c) = setup();
        let problem = Problem::new(&f, 1).unwrap();
        let kernel = measure::build(&f, &device, &c.params).unwrap();
        let first = now(&problem, &kernel, 5, None).unwrap();
        // As if its first timing had run in a spell 100x slow.
        let mut reference = Reference {
            kernel,
            time: 100.0 * first,
            now: first,
            default: false,
        };
        let c = Candidate {
            anchor: Some(1e6),
            ..c
        };
        let paired = reference.pair(&problem, first, &c) / first;
        assert!((20.0..500.0).contains(&paired), "{paired}");
    }
}
