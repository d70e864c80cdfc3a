//! Where candidates are measured. The search hands out [`Candidate`]s
//! and learns from their [`Measured`] results; an [`Executor`] measures
//! them: [`LocalExecutor`] one at a time on a device of this process,
//! others (Ray workers, from Python) several at once elsewhere.

use tilefuse_ir::Fusion;
use tilefuse_runtime::Device;

use crate::candidate::{Candidate, Finalist, Measured, Timing};
use crate::measure::{self, Problem};
use crate::options::TuneError;

/// Measures candidates for a search, possibly several at once.
pub trait Executor {
    /// How many candidates it measures at once (0 when it has no worker
    /// left).
    fn capacity(&self) -> usize;

    /// Starts measuring `candidate`.
    fn submit(&mut self, candidate: Candidate) -> Result<(), TuneError>;

    /// Waits for any submitted candidate's result: its id and what was found.
    fn next(&mut self) -> Result<(usize, Measured), TuneError>;

    /// Medians of the `finalists` (params) timed interleaved on one device,
    /// `timing.repeat` launches a round.
    fn final_round(
        &mut self,
        finalists: &[Finalist],
        timing: Timing,
    ) -> Result<Vec<f64>, TuneError>;
}

/// Measures on a device of this process, one candidate at a time.
pub struct LocalExecutor<'a> {
    fusion: &'a Fusion,
    device: &'a Device,
    problem: Problem,
    queued: Option<Candidate>,
}

impl<'a> LocalExecutor<'a> {
    pub fn new(fusion: &'a Fusion, device: &'a Device, problem: Problem) -> Self {
        LocalExecutor {
            fusion,
            device,
            problem,
            queued: None,
        }
    }
}

impl Executor for LocalExecutor<'_> {
    fn capacity(&self) -> usize {
        1
    }

    fn submit(&mut self, candidate: Candidate) -> Result<(), TuneError> {
        assert!(self.queued.is_none(), "one candidate at a time");
        self.queued = Some(candidate);
        Ok(())
    }

    fn next(&mut self) -> Result<(usize, Measured), TuneError> {
        let c = self.queued.take().expect("a submitted candidate");
        let m = measure::candidate(self.fusion, self.device, &self.problem, &c);
        Ok((c.id, m))
    }

    fn final_round(
        &mut self,
        finalists: &[Finalist],
        timing: Timing,
    ) -> Result<Vec<f64>, TuneError> {
        let params: Vec<_> = finalists.iter().map(|f| f.params.clone()).collect();
        measure::final_round(self.fusion, self.device, &self.problem, &params, timing)
            .map_err(TuneError::from_runtime)
    }
}
