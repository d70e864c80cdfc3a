//! Checking and timing a candidate: fresh random inputs (fixed by the
//! seed) or a workload's, the reference evaluator's outputs (or the
//! workload's own reference's) computed once, every candidate's outputs
//! compared with them before its time counts, and a
//! short timing first so that a candidate far slower than the best is cut
//! before its full measurement (tinygrad's BEAM, CubeCL).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tilefuse_ir::{
    AsTensorRef, DType, Data, Fusion, Tensor, bf16, check_close, check_results, evaluate, f16,
    interrupt,
};
use tilefuse_params::HeuristicParams;
use tilefuse_runtime::{Device, Kernel};
use tilefuse_schedulers::schedule;

use crate::candidate::{Candidate, Measured, Timing};
use crate::trial::Status;
use crate::verdict::RoundTimes;

/// Relative error a candidate's f32 outputs may have against the
/// reference by default, scaled by the largest finite value: reductions
/// reassociate. The same rule and default as Python's `Tolerance`.
pub const RTOL: f64 = 1e-3;

/// Candidates whose short timing is this much slower than the best are cut.
pub const CUT_RATIO: f64 = 3.0;

/// Candidates whose first, cold launch is this much slower than the best
/// are cut at once: a random point can be 1000x slower than the default,
/// and a cold launch is not 10x a warm one.
pub const PROBE_RATIO: f64 = 10.0;

/// A candidate's first two launches (its check's and its probe's) may take
/// this many times the best launch, plus [`LIMIT_FLOOR`], before they are
/// stopped: twice [`PROBE_RATIO`], so that only a candidate the probe
/// would cut is.
pub const LIMIT_RATIO: f64 = 2.0 * PROBE_RATIO;

/// Time every candidate may take for its two first launches whatever the
/// best launch: their allocations and copies.
pub const LIMIT_FLOOR: Duration = Duration::from_millis(500);

/// A launch at least this long is timed by [`LONG_LAUNCHES`] launches in
/// one call and no warm-up of its own: the check's and the probe's
/// launches warm the device, and a millisecond dwarfs the timer's noise.
/// Shorter ones get the short and the full timing, 4 + `repeat` launches.
/// `benches/tune_cost.py` gives the launches a trial makes: 1.5-2x as many
/// trials in a quick tune of 2 to 50 ms kernels, 8 launches a trial.
pub const LONG_LAUNCH: f64 = 1e-3;

/// Timed launches of a long kernel: three in one call, whose median drops
/// the call's first launch, which on the CPU device faults in fresh
/// output pages (a 4096² softmax's took about twice a warm one).
pub const LONG_LAUNCHES: usize = 3;

/// Timed launches for a kernel whose launch takes `time` seconds:
/// `repeat` (the run's full timing) below [`LONG_LAUNCH`], else
/// [`LONG_LAUNCHES`] (or `repeat`, if fewer).
pub fn launches_for(time: f64, repeat: usize) -> usize {
    if time < LONG_LAUNCH {
        repeat
    } else {
        repeat.min(LONG_LAUNCHES)
    }
}

/// Checks and times `c` on its `kernel`: one launch first, cut when over
/// [`PROBE_RATIO`] times the best so far (stopped when it and the check's
/// launch run past [`LIMIT_RATIO`] times), then a short timing, cut when
/// over [`CUT_RATIO`] times it, then the full timing; its time is the
/// faster of the two. A kernel whose probe took [`LONG_LAUNCH`] or more
/// gets one timing of [`launches_for`] it instead, cut when over
/// [`CUT_RATIO`] times the best. Unpaired: see [`crate::Stopwatch`].
pub(crate) fn timed(kernel: &Kernel, problem: &Problem, c: &Candidate) -> Measured {
    let probe = match first_launches(kernel, problem, c) {
        Ok(probe) => probe,
        Err(m) => return m,
    };
    let slower = |time: f64, ratio: f64| c.best.is_some_and(|best| time > ratio * best);
    let timed = if slower(probe, PROBE_RATIO) {
        Ok((
            Status::Cut,
            probe,
            Some("its first launch took over 10x the best"),
        ))
    } else if probe >= LONG_LAUNCH {
        let launches = launches_for(probe, c.timing.repeat);
        problem
            .time(kernel, 0, launches)
            .map(|time| match slower(time, CUT_RATIO) {
                true => (Status::Cut, time, Some("over 3x the best")),
                false => (Status::Ok, time, None),
            })
    } else {
        // The short timing warms up (a GPU for at least 200 ms): the full
        // one right after it needs none.
        problem.short(kernel).and_then(|short| {
            if slower(short, CUT_RATIO) {
                return Ok((Status::Cut, short, Some("over 3x the best")));
            }
            // A slow spell of a shared machine only adds time: the faster
            // of the two timings is the closer to the kernel's own.
            let full = problem.time(kernel, 0, c.timing.repeat)?;
            Ok((Status::Ok, full.min(short), None))
        })
    };
    match timed {
        Ok((status, time, error)) => Measured::new(status, Some(time), error.map(str::to_owned)),
        Err(e) => Measured::failed(e),
    }
}

/// `c`'s outputs, checked, and its first timed launch. The two launches
/// are stopped once they pass [`LIMIT_RATIO`] times the best launch (a
/// random point can run for minutes); the comparison, whose cost grows
/// with the outputs and not with the kernel, is not. `Err`: what to record
/// instead of timing it.
fn first_launches(kernel: &Kernel, problem: &Problem, c: &Candidate) -> Result<f64, Measured> {
    let launches = || {
        let got = problem.run(kernel).map_err(Measured::failed)?;
        let probe = problem.time(kernel, 0, 1).map_err(Measured::failed)?;
        Ok((got, probe))
    };
    let (got, probe) = match c.best {
        None => launches()?,
        Some(best) => {
            let limit = Duration::from_secs_f64(LIMIT_RATIO * best) + LIMIT_FLOOR;
            match interrupt::within(limit, launches) {
                (_, true) => return Err(stopped(limit)),
                (done, false) => done?,
            }
        }
    };
    problem.compare(got, c.corrupt).map_err(|e| Measured {
        status: Status::Wrong,
        ..Measured::failed(e)
    })?;
    Ok(probe)
}

/// Cut: its first launches ran past their time `limit`.
fn stopped(limit: Duration) -> Measured {
    let limit = limit.as_secs_f64();
    let error = format!(
        "stopped after {limit:.2} s: its first two launches ran past {LIMIT_RATIO}x the best launch"
    );
    Measured::new(Status::Cut, Some(limit), Some(error))
}

/// The `finalists` timed in `rounds` interleaved rounds on `device`
/// (each one's median in each round, of `timing.repeat` launches, or of
/// [`launches_for`] a long kernel). The device is warmed up once (a
/// GPU for at least 200 ms) and each kernel by its own warm-up launches;
/// the rounds run back to back, so none cools down. Each round starts one
/// finalist later, so that none is always first after the last of a
/// round.
pub fn final_round(
    fusion: &Fusion,
    device: &Device,
    problem: &Problem,
    finalists: &[serde_json::Value],
    timing: Timing,
    rounds: usize,
) -> Result<RoundTimes, String> {
    let kernels = (finalists.iter())
        .map(|p| build(fusion, device, p))
        .collect::<Result<Vec<_>, _>>()?;
    let warmup = timing.warmup.max(1);
    if let Some(first) = kernels.first() {
        problem.time(first, warmup, 1)?;
    }
    // A long kernel's round is [`launches_for`] it, not `repeat` launches.
    let repeats = (kernels.iter())
        .map(|k| Ok(launches_for(problem.time(k, 0, warmup)?, timing.repeat)))
        .collect::<Result<Vec<_>, String>>()?;
    let n = kernels.len();
    let mut times = vec![Vec::new(); n];
    for round in 0..rounds {
        for i in (round..round + n).map(|i| i % n) {
            times[i].push(problem.time(&kernels[i], 0, repeats[i])?);
        }
    }
    Ok(times)
}

/// Schedules `params`, lowers and compiles the kernel on `device`.
pub(crate) fn build(
    fusion: &Fusion,
    device: &Device,
    params: &serde_json::Value,
) -> Result<Kernel, String> {
    let params = HeuristicParams::from_value(params.clone()).map_err(|e| e.to_string())?;
    let s = schedule(fusion, &params, &device.info()).map_err(|e| e.to_string())?;
    device.build(&s).map_err(|e| e.to_string())
}

/// [`build`], and the seconds it took.
pub fn build_timed(
    fusion: &Fusion,
    device: &Device,
    params: &serde_json::Value,
) -> (Result<Kernel, String>, f64) {
    let start = Instant::now();
    let kernel = build(fusion, device, params);
    (kernel, start.elapsed().as_secs_f64())
}

pub(crate) fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// The inputs every candidate runs on and the outputs it must match.
#[derive(Clone)]
pub struct Problem {
    /// Shared, not copied, with whoever gave them (a workload's inputs can
    /// be large).
    pub inputs: Arc<[Tensor]>,
    /// Shared like the inputs: a workload's expected outputs can be large.
    pub want: Arc<[Tensor]>,
    /// How close f32 outputs must be to `want` (see [`RTOL`]).
    pub rtol: f64,
    /// Kernel launches made through this copy.
    pub launches: Launches,
}

/// Kernel launches made through one copy of a [`Problem`]: a copy starts
/// at 0, so that each executor counts its own.
#[derive(Debug, Default)]
pub struct Launches(AtomicUsize);

impl Launches {
    /// Launches so far.
    pub fn count(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    fn add(&self, n: usize) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
}

impl Clone for Launches {
    fn clone(&self) -> Self {
        Launches::default()
    }
}

impl Problem {
    /// What candidates of `fusion` are checked and timed on: `inputs` (or
    /// random ones from `seed`), the `expected` outputs for them (or the
    /// reference evaluator's), within `rtol`.
    pub fn of(
        fusion: &Fusion,
        inputs: Option<Arc<[Tensor]>>,
        expected: Option<Arc<[Tensor]>>,
        seed: u64,
        rtol: f64,
    ) -> Result<Problem, String> {
        if !(rtol >= 0.0 && rtol.is_finite()) {
            return Err(format!("rtol is {rtol}, not a finite number >= 0"));
        }
        let problem = match (inputs, expected) {
            (None, Some(_)) => return Err("expected outputs need the inputs they are for".into()),
            (None, None) => Problem::new(fusion, seed)?,
            (Some(inputs), None) => Problem::given(fusion, inputs)?,
            (Some(inputs), Some(want)) => {
                let views: Vec<_> = want.iter().map(|t| t.as_tensor_ref()).collect();
                check_results(fusion, &views).map_err(|e| format!("expected {e}"))?;
                Problem {
                    inputs,
                    want,
                    rtol: RTOL,
                    launches: Launches::default(),
                }
            }
        };
        Ok(Problem { rtol, ..problem })
    }

    /// Random inputs for `fusion` (values in [-1, 1], small integers,
    /// random masks) and the reference's outputs.
    pub fn new(fusion: &Fusion, seed: u64) -> Result<Problem, String> {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut inputs = Vec::new();
        for &t in fusion.inputs() {
            let ty = fusion.ty(t).map_err(|e| e.to_string())?;
            let n: usize = ty.shape.iter().product();
            let data = match ty.dtype {
                DType::F32 => Data::F32((0..n).map(|_| rng.random_range(-1.0..1.0)).collect()),
                DType::I32 => Data::I32((0..n).map(|_| rng.random_range(-8..8)).collect()),
                DType::U32 => Data::U32((0..n).map(|_| rng.random_range(0..16)).collect()),
                DType::Bool => Data::Bool((0..n).map(|_| rng.random_bool(0.5)).collect()),
                DType::F16 => Data::F16(
                    (0..n)
                        .map(|_| f16::from_f32(rng.random_range(-1.0..1.0)))
                        .collect(),
                ),
                DType::BF16 => Data::BF16(
                    (0..n)
                        .map(|_| bf16::from_f32(rng.random_range(-1.0..1.0)))
                        .collect(),
                ),
            };
            inputs.push(Tensor::new(ty.shape.clone(), data)?);
        }
        Problem::given(fusion, inputs.into())
    }

    /// `inputs` (a workload's, say) and the reference's outputs for them.
    pub fn given(fusion: &Fusion, inputs: Arc<[Tensor]>) -> Result<Problem, String> {
        let want = evaluate(fusion, &inputs).map_err(|e| e.to_string())?;
        Ok(Problem {
            inputs,
            want: want.into(),
            rtol: RTOL,
            launches: Launches::default(),
        })
    }

    /// Runs `kernel` and compares its outputs with the reference: `Err`
    /// names the first output and element that differ.
    pub fn check(&self, kernel: &Kernel) -> Result<(), String> {
        self.compare(self.run(kernel)?, false)
    }

    /// The kernel's outputs for the inputs.
    fn run(&self, kernel: &Kernel) -> Result<Vec<Tensor>, String> {
        self.launches.add(1);
        kernel.run(&self.inputs[..]).map_err(|e| e.to_string())
    }

    /// `got` against the expected outputs, with its first output element
    /// changed first when `corrupt` (a fault injected by tests: the check
    /// must disqualify it).
    fn compare(&self, mut got: Vec<Tensor>, corrupt: bool) -> Result<(), String> {
        if corrupt && let Some(out) = got.first_mut() {
            corrupt_first(&mut out.data);
        }
        for (o, (w, g)) in self.want.iter().zip(&got).enumerate() {
            check_close(&w.data, &g.data, self.rtol).map_err(|e| format!("output {o}: {e}"))?;
        }
        Ok(())
    }

    /// A short timing of `kernel`: one warm-up launch and the median of
    /// three.
    pub(crate) fn short(&self, kernel: &Kernel) -> Result<f64, String> {
        self.time(kernel, 1, 3)
    }

    /// Median seconds of `repeat` launches after `warmup`.
    pub fn time(&self, kernel: &Kernel, warmup: usize, repeat: usize) -> Result<f64, String> {
        self.launches.add(warmup + repeat);
        let t = kernel
            .benchmark(&self.inputs[..], warmup, repeat)
            .map_err(|e| e.to_string())?;
        Ok(t.median)
    }
}

fn corrupt_first(data: &mut Data) {
    match data {
        Data::F32(v) => v.iter_mut().take(1).for_each(|x| *x = *x * 2.0 + 1.0),
        Data::I32(v) => v.iter_mut().take(1).for_each(|x| *x = x.wrapping_add(1)),
        Data::U32(v) => v.iter_mut().take(1).for_each(|x| *x = x.wrapping_add(1)),
        Data::Bool(v) => v.iter_mut().take(1).for_each(|x| *x = !*x),
        Data::F16(v) => {
            (v.iter_mut().take(1)).for_each(|x| *x = f16::from_f32(x.to_f32() * 2.0 + 1.0))
        }
        Data::BF16(v) => {
            (v.iter_mut().take(1)).for_each(|x| *x = bf16::from_f32(x.to_f32() * 2.0 + 1.0))
        }
    }
}
