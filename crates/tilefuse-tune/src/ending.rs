//! A tuning run's ending, once its search handed out its last candidate:
//! the second look at the candidates it kept, the final run of the
//! fastest of that look beside the default's params, and the
//! confirmation of a winner other than the default (see `verdict`).

use crate::clock;
use crate::executor::Executor;
use crate::options::{Options, TuneError};
use crate::search::Search;
use crate::trial::TuneResult;
use crate::verdict;

/// The result of the run whose `search` is done, timing through
/// `executor`.
pub(crate) fn end(
    mut search: Search<'_>,
    executor: &mut dyn Executor,
    options: &Options,
) -> Result<TuneResult, TuneError> {
    let timing = options.timing();
    let contenders = search.contenders();
    if !contenders.is_empty() {
        let look = executor.final_round(&contenders, timing, clock::LOOK_ROUNDS)?;
        search.second_look(&look);
    }
    let finalists = search.finalists();
    if finalists.is_empty() {
        let why = "no candidate ran correctly, not even the default heuristic's";
        return Err(TuneError::Failed(why.into()));
    }
    let rounds = executor.final_round(&finalists, timing, search.final_rounds())?;
    let confirmation = match search.challenger(&rounds) {
        Some(w) => {
            let pair = [finalists[0].clone(), finalists[w].clone()];
            let medians = verdict::medians(&rounds);
            let n = clock::rounds(&[medians[0], medians[w]], timing);
            Some(executor.final_round(&pair, timing, n)?)
        }
        None => None,
    };
    Ok(search.finish(&rounds, confirmation.as_deref()))
}
