//! The one rule by which computed outputs match a reference, shared by the
//! tuner's check of every candidate and the tests (Python's `Tolerance`
//! states the same rule): f32 elements are close when equal (the same
//! infinity) or, both finite, within
//! `rtol * (scale + |want|)`, `scale` the largest finite reference
//! magnitude (reductions reassociate, so errors scale with the data);
//! other dtypes must be equal; NaN only where NaN is wanted.

use crate::tensor::Data;

/// `Err` names the first element that is not close to the reference.
pub fn check_close(want: &Data, got: &Data, rtol: f64) -> Result<(), String> {
    // Slices matched once, not an element at a time: a tuner compares
    // every candidate's outputs (16M elements: 0.18 s through `Data::get`).
    match (want, got) {
        _ if want.len() != got.len() => Err(mismatch(want, got)),
        (Data::F32(w), Data::F32(g)) => close(w, g, |x| f64::from(*x), Some(rtol)),
        (Data::I32(w), Data::I32(g)) => close(w, g, |x| f64::from(*x), None),
        (Data::U32(w), Data::U32(g)) => close(w, g, |x| f64::from(*x), None),
        (Data::Bool(w), Data::Bool(g)) => close(w, g, |x| f64::from(u8::from(*x)), None),
        _ => Err(mismatch(want, got)),
    }
}

fn mismatch(want: &Data, got: &Data) -> String {
    format!(
        "{} {} elements, want {} {}",
        got.len(),
        got.dtype().name(),
        want.len(),
        want.dtype().name()
    )
}

/// The rule over one dtype's elements: within `rtol` (f32), or equal.
fn close<T>(
    want: &[T],
    got: &[T],
    f64_of: impl Fn(&T) -> f64,
    rtol: Option<f64>,
) -> Result<(), String> {
    let scale = (want.iter().map(|x| f64_of(x).abs()))
        .filter(|x| x.is_finite())
        .fold(0.0, f64::max);
    for (i, (w, g)) in want.iter().zip(got).enumerate() {
        let (w, g) = (f64_of(w), f64_of(g));
        let close = match (w.is_nan(), g.is_nan()) {
            (true, true) => true,
            (false, false) => {
                // Infinities only as themselves: `inf - MAX` is within any
                // tolerance of an infinite `want`.
                let finite = w.is_finite() && g.is_finite();
                w == g || (finite && rtol.is_some_and(|r| (w - g).abs() <= r * (scale + w.abs())))
            }
            _ => false,
        };
        if !close {
            return Err(format!("element {i} is {g}, want {w}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_per_dtype() {
        let f32s = |v: &[f32]| Data::F32(v.to_vec());
        let nan = f32::NAN;
        // Within rtol of the largest finite magnitude (4 here), NaN where
        // NaN is wanted, infinities equal.
        let want = f32s(&[1.0, -4.0, nan, f32::INFINITY]);
        assert_eq!(
            check_close(&want, &f32s(&[1.0001, -4.0, nan, f32::INFINITY]), 1e-4),
            Ok(())
        );
        assert_eq!(
            check_close(&want, &f32s(&[1.01, -4.0, nan, f32::INFINITY]), 1e-4),
            Err(format!("element 0 is {}, want 1", 1.01f32 as f64))
        );
        assert!(check_close(&want, &f32s(&[1.0, -4.0, 0.0, f32::INFINITY]), 1e-4).is_err());
        assert!(check_close(&want, &f32s(&[1.0, -4.0, nan, f32::MAX]), 1e-4).is_err());
        // Other dtypes must be equal, whatever the tolerance.
        let ints = Data::I32(vec![1000, 2]);
        assert_eq!(check_close(&ints, &Data::I32(vec![1000, 2]), 0.5), Ok(()));
        assert!(check_close(&ints, &Data::I32(vec![1001, 2]), 0.5).is_err());
        assert!(check_close(&Data::Bool(vec![true]), &Data::Bool(vec![false]), 1.0).is_err());
        // Lengths and dtypes must match.
        assert_eq!(
            check_close(&ints, &Data::U32(vec![1000, 2]), 0.5),
            Err("2 u32 elements, want 2 i32".into())
        );
        assert!(check_close(&ints, &Data::I32(vec![1000]), 0.5).is_err());
    }
}
