//! What a scheduler's steps fail with: params that cannot work for the
//! fusion or device (the field at fault), or a schedule primitive refusing
//! one of the scheduler's own steps (a bug in the scheduler). Steps
//! propagate both with `?`; the public functions give users a
//! `ParamsError` either way.

use tilefuse_params::ParamsError;
use tilefuse_sched::ScheduleError;

pub(crate) enum StepError {
    Params(ParamsError),
    Refused(ScheduleError),
}

/// A scheduler step's result.
pub(crate) type Step<T> = Result<T, StepError>;

impl From<ParamsError> for StepError {
    fn from(e: ParamsError) -> Self {
        StepError::Params(e)
    }
}

impl From<ScheduleError> for StepError {
    fn from(e: ScheduleError) -> Self {
        StepError::Refused(e)
    }
}

/// A refused step is reported at `scheduler`, naming the primitive and
/// what it refused.
impl From<StepError> for ParamsError {
    fn from(e: StepError) -> Self {
        match e {
            StepError::Params(e) => e,
            StepError::Refused(e) => ParamsError::new(
                "scheduler",
                format!(
                    "internal error: a scheduling step failed ({e}); these params should have \
                     been accepted or rejected with a reason, please report them"
                ),
            ),
        }
    }
}
