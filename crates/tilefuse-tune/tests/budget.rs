//! A time budget bounds the whole run, not its search alone: the search
//! stops handing out candidates once the second look, the final run and
//! a confirmation it would then start (their builds and launches, at the
//! times measured so far) could not end within `seconds`.

mod common;

use common::{chain, gpu};
use tilefuse_tune::{Measured, Options, Search, Strategy, Trial};

/// Candidates a random search of 40 trials and 20 s hands out when each
/// is told it built in `build` seconds and ran a launch in `launch`.
fn handed_out(launch: f64, build: f64) -> usize {
    let f = chain(6);
    let info = gpu("discrete_gpu", 256);
    let options = Options {
        strategy: Some(Strategy::Random),
        trials: Some(40),
        seconds: Some(20.0),
        ..Options::default()
    };
    let mut observe = |_: &Trial, _: Option<f64>| true;
    let mut search = Search::new(&f, &info, &options, &[], &mut observe).unwrap();
    let mut n = 0;
    while let Some(c) = search.ask() {
        n += 1;
        let m = Measured {
            build: Some(build),
            ..Measured::ran(launch)
        };
        search.tell(c.id, m).unwrap();
    }
    n
}

#[test]
fn the_search_keeps_time_for_the_final_run() {
    // Microseconds: the trial budget ends the search (the default and 40
    // counted candidates; duplicates are settled without handing out).
    let quick = handed_out(1e-6, 1e-3);
    assert!((30..=41).contains(&quick), "{quick} handed out");
    // A launch of a millisecond or more is timed by three launches a
    // round: the final run launches each finalist 17 times (2 warm-up
    // launches, 5 rounds of 3), and a confirmation two of them 17 times
    // more. At half a second a launch, the default's and the next
    // candidate's take over 40 s.
    assert_eq!(handed_out(0.5, 1e-3), 1);
    // 40 ms launches (taken as 50 ms: the ending runs slower than a
    // candidate's fastest timing) and 1 s builds: a finalist costs 1.85 s,
    // and so does each of the confirmation's two; the second look (2
    // warm-up launches and 2 rounds of 3) 1.4 s each but the default's.
    // Five kept and the next (19.95 s) still fit in 20 s; six and the
    // next (21.35 s) do not.
    assert_eq!(handed_out(0.04, 1.0), 6);
    // 10 ms launches: a finalist or one of the confirmation's costs
    // 1.21 s, a second look 1.1 s. Ten kept and the next (19.5 s) fit,
    // eleven and the next (20.6 s) do not.
    assert_eq!(handed_out(0.01, 1.0), 11);
}
