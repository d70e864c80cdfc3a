//! The one rule by which computed outputs match a reference, shared by the
//! tuner's check of every candidate and the tests (Python's `Tolerance`
//! states the same rule): f32 elements are close when equal or within
//! `rtol * (scale + |want|)`, `scale` the largest finite reference
//! magnitude (reductions reassociate, so errors scale with the data);
//! other dtypes must be equal; NaN only where NaN is wanted.

use crate::dtype::DType;
use crate::tensor::Data;

/// `Err` names the first element that is not close to the reference.
pub fn check_close(want: &Data, got: &Data, rtol: f64) -> Result<(), String> {
    if want.len() != got.len() || want.dtype() != got.dtype() {
        return Err(format!(
            "{} {} elements, want {} {}",
            got.len(),
            got.dtype().name(),
            want.len(),
            want.dtype().name()
        ));
    }
    let scale = (0..want.len())
        .map(|i| want.get(i).as_f64().abs())
        .filter(|x| x.is_finite())
        .fold(0.0, f64::max);
    for i in 0..want.len() {
        let (w, g) = (want.get(i).as_f64(), got.get(i).as_f64());
        let close = match (w.is_nan(), g.is_nan()) {
            (true, true) => true,
            (false, false) if want.dtype() == DType::F32 => {
                w == g || (w - g).abs() <= rtol * (scale + w.abs())
            }
            (false, false) => w == g,
            _ => false,
        };
        if !close {
            return Err(format!("element {i} is {g}, want {w}"));
        }
    }
    Ok(())
}
