//! The one rule by which computed outputs match a reference, shared by the
//! tuner's check of every candidate and the tests (Python's `Tolerance`
//! states the same rule): float elements are close when equal (the same
//! infinity) or, both finite, within
//! `rtol * (scale + |want|)`, `scale` the largest finite reference
//! magnitude (reductions reassociate, so errors scale with the data), and
//! `rtol` at least the dtype's [`DType::rtol_floor`] (two steps of its
//! precision: a device's f32 intermediate may round the other way);
//! other dtypes must be equal; NaN only where NaN is wanted.

use crate::dtype::DType;
use crate::tensor::Data;

/// `Err` names the first element that is not close to the reference.
pub fn check_close(want: &Data, got: &Data, rtol: f64) -> Result<(), String> {
    // Slices matched once, not an element at a time: a tuner compares
    // every candidate's outputs (16M elements: 0.18 s through `Data::get`).
    match (want, got) {
        _ if want.len() != got.len() => Err(mismatch(want, got)),
        (Data::F32(w), Data::F32(g)) => close(w, g, f64::from, rtol),
        (Data::F16(w), Data::F16(g)) => close(w, g, f64::from, DType::F16.rtol(rtol)),
        (Data::BF16(w), Data::BF16(g)) => close(w, g, f64::from, DType::BF16.rtol(rtol)),
        (Data::I32(w), Data::I32(g)) => close(w, g, f64::from, 0.0),
        (Data::U32(w), Data::U32(g)) => close(w, g, f64::from, 0.0),
        (Data::Bool(w), Data::Bool(g)) => close(w, g, |x| f64::from(u8::from(x)), 0.0),
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

/// The rule over one dtype's elements: within `rtol` (f32), or equal
/// (`rtol` 0: integers are finite). Branch-free over blocks of elements,
/// so that it vectorizes; a block with a failure is searched for the first.
fn close<T: Copy>(
    want: &[T],
    got: &[T],
    f64_of: impl Fn(T) -> f64 + Copy,
    rtol: f64,
) -> Result<(), String> {
    let scale = largest_finite(want, f64_of);
    let ok = |w: T, g: T| {
        let (w, g) = (f64_of(w), f64_of(g));
        // Infinities only as themselves: `inf - MAX` is within any
        // tolerance of an infinite `want`.
        let finite = w.is_finite() & g.is_finite();
        (w.is_nan() & g.is_nan())
            | (w == g)
            | (finite & ((w - g).abs() <= rtol * (scale + w.abs())))
    };
    const BLOCK: usize = 256;
    for (b, (ws, gs)) in want.chunks(BLOCK).zip(got.chunks(BLOCK)).enumerate() {
        let failed = ws
            .iter()
            .zip(gs)
            .fold(0u32, |n, (&w, &g)| n + u32::from(!ok(w, g)));
        if failed > 0 {
            let (i, (w, g)) = (ws.iter().zip(gs).enumerate())
                .find(|(_, (w, g))| !ok(**w, **g))
                .expect("a block with a failure has one");
            let (w, g) = (f64_of(*w), f64_of(*g));
            return Err(format!("element {} is {g}, want {w}", b * BLOCK + i));
        }
    }
    Ok(())
}

/// The largest finite magnitude in `data` (0 when none), in lanes that
/// vectorize (a float max reduction does not reassociate by itself).
fn largest_finite<T: Copy>(data: &[T], f64_of: impl Fn(T) -> f64) -> f64 {
    const LANES: usize = 8;
    let mut lanes = [0.0f64; LANES];
    let chunks = data.chunks_exact(LANES);
    let tail = chunks.remainder();
    let finite = |x: T| {
        let a = f64_of(x).abs();
        if a.is_finite() { a } else { 0.0 }
    };
    for chunk in chunks {
        for (m, &x) in lanes.iter_mut().zip(chunk) {
            let a = finite(x);
            *m = if a > *m { a } else { *m };
        }
    }
    let tail = tail.iter().map(|&x| finite(x));
    lanes.into_iter().chain(tail).fold(0.0, f64::max)
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
        // The first failure is named past the first block of elements, and
        // the largest magnitude is found in the tail of a long output too.
        let mut long = vec![1.0f32; 1003];
        long[1002] = -100.0;
        let mut off = long.clone();
        off[700] = 1.05;
        off[900] = 7.0;
        assert_eq!(
            check_close(&f32s(&long), &f32s(&off), 1e-4),
            Err(format!("element 700 is {}, want 1", 1.05f32 as f64))
        );
        off[700] = 1.005;
        off[900] = 1.005;
        assert_eq!(check_close(&f32s(&long), &f32s(&off), 1e-4), Ok(()));
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
