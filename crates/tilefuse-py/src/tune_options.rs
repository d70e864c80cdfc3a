//! The options of `tilefuse.tune` as the Python side passes them (a
//! JSON-shaped dict), checked into the tuner's `Options`; a bad one is a
//! `ParamsError` naming it.

use serde_json::Value;
use tilefuse::params::{HeuristicParams, ParamsError};
use tilefuse::tune::{Effort, Measured, Options, Status, Strategy};

fn field<T: serde::de::DeserializeOwned>(
    options: &Value,
    name: &str,
) -> Result<Option<T>, ParamsError> {
    match options.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => serde_json::from_value(v.clone())
            .map(Some)
            .map_err(|e| ParamsError::new(name, e.to_string())),
    }
}

/// The `seconds` budget: a positive number (NaN and -inf arrive as text,
/// JSON having neither).
fn seconds(options: &Value) -> Result<Option<f64>, ParamsError> {
    match options.get("seconds") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => (v.as_f64().filter(|&s| s > 0.0).map(Some)).ok_or_else(|| {
            let got = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
            ParamsError::new(
                "seconds",
                format!("must be a positive number of seconds, got {got}"),
            )
        }),
    }
}

/// Tuning options from `{"effort", "strategy", "trials", "seconds",
/// "seed", "rtol", "warmup", "repeat", "fingerprint", "warm_start",
/// "recorded"}` (missing or `None`: the defaults; `warm_start`: params
/// dicts; `recorded`: trials of an earlier run, as dicts).
pub(crate) fn options(value: &Value) -> Result<Options, ParamsError> {
    let mut o = Options::default();
    if let Some(e) = field::<Effort>(value, "effort")? {
        o.effort = e;
    }
    o.strategy = field::<Strategy>(value, "strategy")?;
    o.trials = field(value, "trials").map_err(|_| {
        let got = &value["trials"];
        ParamsError::new(
            "trials",
            format!("must be a whole number, 0 or more, got {got}"),
        )
    })?;
    o.seconds = seconds(value)?;
    o.seed = field(value, "seed")?.unwrap_or(0);
    o.rtol = field(value, "rtol")?.unwrap_or(o.rtol);
    o.warmup = field(value, "warmup")?.unwrap_or(o.warmup);
    o.repeat = field(value, "repeat")?.unwrap_or(o.repeat).max(1);
    o.corrupt_trial = field(value, "corrupt_trial")?;
    o.fields = field(value, "fields")?;
    o.fingerprint = field(value, "fingerprint")?;
    for (i, p) in (field::<Vec<Value>>(value, "warm_start")?.unwrap_or_default())
        .into_iter()
        .enumerate()
    {
        let p =
            HeuristicParams::from_value(p).map_err(|e| e.within(&format!("warm_start[{i}]")))?;
        o.warm_start.push(p);
    }
    for trial in field::<Vec<Value>>(value, "recorded")?.unwrap_or_default() {
        let measured: Measured = serde_json::from_value(trial.clone())
            .map_err(|e| ParamsError::new("recorded", e.to_string()))?;
        if measured.status != Status::Duplicate {
            o.recorded.insert(trial["params"].to_string(), measured);
        }
    }
    Ok(o)
}
