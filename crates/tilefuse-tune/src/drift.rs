//! Candidate times on a machine whose speed drifts. A shared VM runs a
//! memory-bound kernel 1.8x slower in some spells of seconds than in
//! others, and every kernel timed in a spell moves alike: two kernels
//! timed back to back kept their ratio within 10 % while each moved by up
//! to 80 % (fifty-ninth session, BENCHMARKS.md). A search that
//! compares candidates timed seconds apart learns the spells, not the
//! kernels. So each candidate's time is paired with a timing of one
//! reference kernel (the first that ran: the default heuristic's) right
//! after it: the time a candidate gets is its ratio to the reference's
//! then, times the reference's first time. Every candidate of a run is so
//! timed at the speed of one moment, the default's trial.

use tilefuse_runtime::{Device, Kernel};

use crate::candidate::{Candidate, Measured};
use crate::measure::{self, Problem};
use crate::trial::Status;

/// Whether `device` computes on the host's cores (the CPU device,
/// lavapipe), at the speed of a machine others may share.
pub(crate) fn on_the_host(device: &Device) -> bool {
    device.info().adapter_type == "cpu"
}

/// Checks and times candidates one after another on one device, each
/// time paired with a [`Reference`] where the device computes on the
/// host's cores (the CPU device, lavapipe): the first candidate that runs
/// becomes the reference (a search's first is the default heuristic's).
/// What a [`crate::LocalExecutor`] and a remote worker measure with.
pub struct Stopwatch {
    problem: Problem,
    paired: bool,
    reference: Option<Reference>,
}

impl Stopwatch {
    pub fn new(device: &Device, problem: Problem) -> Stopwatch {
        Stopwatch {
            problem,
            paired: on_the_host(device),
            reference: None,
        }
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
        let m = match kernel {
            Ok(kernel) => self.timed(kernel, c),
            Err(e) => Measured::failed(e),
        };
        Measured {
            build: Some(seconds),
            ..m
        }
    }

    /// `c` checked and timed on its `kernel`; when pairing, its time
    /// paired with the reference's, or the reference it becomes.
    fn timed(&mut self, kernel: Kernel, c: &Candidate) -> Measured {
        let mut m = measure::timed(&kernel, &self.problem, c);
        let ran = m.time.filter(|_| self.paired && m.status == Status::Ok);
        match (ran, &mut self.reference) {
            (Some(t), Some(r)) => m.time = Some(r.pair(&self.problem, t, c.timing.repeat)),
            (Some(t), None) => self.reference = Some(Reference::new(kernel, t)),
            (None, _) => {}
        }
        m
    }
}

/// The kernel candidates are paired with, and its first time.
pub(crate) struct Reference {
    kernel: Kernel,
    time: f64,
}

impl Reference {
    /// `kernel`, which ran in `time`.
    pub(crate) fn new(kernel: Kernel, time: f64) -> Reference {
        Reference { kernel, time }
    }

    /// `time`, a candidate's time just measured, paired: the reference
    /// timed now as a candidate is (the faster of a short timing and one
    /// of `repeat` launches: a spike in one timing moves neither time),
    /// and `time` scaled by the reference's first time over its time now.
    /// Unscaled when the reference fails to run (it ran before; a failure
    /// now is not the candidate's).
    pub(crate) fn pair(&self, problem: &Problem, time: f64, repeat: usize) -> f64 {
        let short = problem.short(&self.kernel);
        let now = short.and_then(|s| Ok(s.min(problem.time(&self.kernel, 0, repeat)?)));
        match now {
            Ok(now) => time * self.time / now,
            Err(_) => time,
        }
    }
}

#[cfg(test)]
mod tests {
    use tilefuse_runtime::Device;
    use tilefuse_schedulers::{heuristics, schedule};
    use tilefuse_testing::softmax;

    use super::*;

    #[test]
    fn a_stopwatch_pairs_each_time_with_its_first_candidate_s_kernel() {
        let f = softmax(&[64, 256], -1);
        let device = Device::cpu();
        let params = heuristics(&f, None, &device.info()).unwrap().to_value();
        let c = Candidate {
            id: 0,
            params: params.clone(),
            point: Vec::new(),
            best: None,
            corrupt: false,
            timing: crate::Timing {
                warmup: 1,
                repeat: 5,
            },
        };
        let mut stopwatch = Stopwatch::new(&device, Problem::new(&f, 1).unwrap());
        let first = stopwatch.measure(measure::build_timed(&f, &device, &params), &c);
        assert_eq!(first.status, Status::Ok);
        let reference = stopwatch
            .reference
            .as_mut()
            .expect("the first candidate's kernel");
        // As if the first had run in a spell 100x slow: later candidates
        // are timed at that speed.
        reference.time *= 100.0;
        let later = stopwatch.measure(measure::build_timed(&f, &device, &params), &c);
        let ratio = later.time.unwrap() / first.time.unwrap();
        assert!((20.0..500.0).contains(&ratio), "{ratio}");
        assert!(later.build.is_some_and(|s| s > 0.0));
    }

    #[test]
    fn a_time_is_scaled_by_the_reference_s_first_time_over_its_time_now() {
        let f = softmax(&[64, 256], -1);
        let device = Device::cpu();
        let params = heuristics(&f, None, &device.info()).unwrap();
        let kernel = device
            .build(&schedule(&f, &params, &device.info()).unwrap())
            .unwrap();
        let problem = Problem::new(&f, 1).unwrap();
        let now = problem.short(&kernel).unwrap();
        // As if the reference's first timing had run in a spell 100x slow:
        // every candidate is timed at that speed.
        let reference = Reference::new(kernel, 100.0 * now);
        let paired = reference.pair(&problem, 1.0, 5);
        assert!((20.0..500.0).contains(&paired), "{paired}");
    }
}
