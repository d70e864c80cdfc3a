//! `exp`, `tanh` and GELU (the parent module gives the methods).

use super::{MulAdd, by_step, horner, round_scaled};

const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;

/// e^x as p * 2^k: Cody-Waite reduction of x to r = x - k ln2 in
/// [-ln2/2, ln2/2], and p = e^r by its degree-6 Taylor polynomial.
#[inline(always)]
fn reduce<M: MulAdd>(x: f32) -> (f32, i32) {
    let (n, k) = round_scaled::<M>(x, LOG2E);
    let r = M::mul_add(-n, LN2_LO, M::mul_add(-n, LN2_HI, x));
    let taylor = [
        0.001_388_89,
        0.008_333_34,
        0.041_666_67,
        0.166_666_67,
        0.5,
        1.0,
        1.0,
    ];
    (horner::<M, 7>(r, taylor), k)
}

/// 2^e for a normal exponent e (-126..=127).
#[inline(always)]
fn pow2(e: i32) -> f32 {
    f32::from_bits(((e + 127) << 23) as u32)
}

#[inline(always)]
fn exp1<M: MulAdd>(x: f32) -> f32 {
    // Past these e^x is inf (or 0) in f32; NaN passes through the clamp.
    let (p, k) = reduce::<M>(x.clamp(-104.0, 89.0));
    // 2^k as two normal factors, so k from -150 to 129 overflows to inf and
    // underflows through the subnormals to 0 as e^x does.
    let half = k >> 1;
    p * pow2(half) * pow2(k - half)
}

/// `exp` for |x| < 87, where 2^k is one normal factor: no clamp, one scale.
#[inline(always)]
fn exp_in_range<M: MulAdd>(x: f32) -> f32 {
    let (p, k) = reduce::<M>(x);
    p * pow2(k)
}

/// tanh as Eigen's rational minimax approximation (degree 13/6): one
/// division, relative error below 4e-7. Below |x| = 4e-4 tanh(x) rounds to
/// x; above 7.99 it is within 2.2e-7 of +-1.
#[inline(always)]
fn tanh1<M: MulAdd>(x: f32) -> f32 {
    let x2 = x * x;
    let odd = [
        -2.760_768_5e-16,
        2.000_188e-13,
        -8.604_672e-11,
        5.122_297e-8,
        1.485_722_4e-5,
        6.372_619_3e-4,
        4.893_524_6e-3,
    ];
    let p = x * horner::<M, 7>(x2, odd);
    let q = horner::<M, 4>(
        x2,
        [1.198_258_4e-6, 1.185_347e-4, 2.268_434_7e-3, 4.893_525e-3],
    );
    // Both comparisons are false for NaN, which p / q keeps.
    if x.abs() < 4e-4 {
        x
    } else if x.abs() > 7.99 {
        1.0f32.copysign(x)
    } else {
        p / q
    }
}

/// GELU's `x / (1 + e^-2u)` (`tilefuse_ir::gelu`, the reference) in f64,
/// branch free so that it vectorizes: libm's scalar `exp` took 17.6 ns an
/// element (a 1024² matmul's GELU epilogue cost as much as the matmul on
/// 2 cores). f64 keeps the reference's precision where f32 could not:
/// `-2u` reaches 87 before the result leaves the normal range, and f32's
/// rounding of it alone would be 87 ulp of the result.
#[inline(always)]
fn gelu1<M: MulAdd>(x: f32) -> f32 {
    let x = f64::from(x);
    let c = (2.0 / std::f64::consts::PI).sqrt();
    let y = -2.0 * c * M::mul_add64(0.044715 * x * x, x, x);
    // Past 700 the quotient is 0 in f32 (or NaN for x = -inf, with e = inf
    // as in the reference); below -700 e adds nothing to 1.
    let e = if y > 700.0 {
        f64::INFINITY
    } else {
        exp64::<M>(y.max(-700.0))
    };
    (x / (1.0 + e)) as f32
}

/// e^y for y in [-700, 700] (NaN stays NaN), to within 3e-10: Cody-Waite
/// reduction to r in [-ln2/2, ln2/2], e^r by its degree-8 Taylor
/// polynomial (the remainder r^9/9! is 2e-10 of it; the caller rounds to
/// f32, 6e-8), and 2^k, a normal f64 over this range, from exponent bits.
#[inline(always)]
fn exp64<M: MulAdd>(y: f64) -> f64 {
    const LN2_HI: f64 = 0.693_147_180_369_123_8;
    const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
    let shifter = 6_755_399_441_055_744.0f64; // 1.5 * 2^52
    let t = M::mul_add64(y, std::f64::consts::LOG2_E, shifter);
    let n = t - shifter;
    let r = M::mul_add64(-n, LN2_LO, M::mul_add64(-n, LN2_HI, y));
    let mut p = 1.0 / 40320.0;
    for c in [5040.0, 720.0, 120.0, 24.0, 6.0, 2.0, 1.0, 1.0] {
        p = M::mul_add64(p, r, 1.0 / c);
    }
    let k = t.to_bits().wrapping_sub(shifter.to_bits()) as i64;
    p * f64::from_bits(((k + 1023) << 52) as u64)
}

multiversion!(
    /// Applies `exp` to every element in place: steps within |x| < 87
    /// by `exp_in_range`, others by `exp1`.
    pub fn exp_in_place<M: MulAdd>(v: &mut [f32]) {
        by_step(v, |x| x.abs() < 87.0, exp_in_range::<M>, exp1::<M>);
    }
);
multiversion!(
    /// Applies GELU (see [`gelu1`]) to every element in place.
    pub fn gelu_in_place<M: MulAdd>(v: &mut [f32]) {
        v.iter_mut().for_each(|x| *x = gelu1::<M>(*x));
    }
);
multiversion!(
    /// Applies `tanh` to every element in place.
    pub fn tanh_in_place<M: MulAdd>(v: &mut [f32]) {
        v.iter_mut().for_each(|x| *x = tanh1::<M>(*x));
    }
);

#[cfg(test)]
mod tests {
    use super::super::at_every_level;
    use super::*;

    #[test]
    fn exp_and_tanh_are_accurate() {
        at_every_level(exp_and_tanh_are_accurate_at_this_level);
    }

    /// GELU within an f32 rounding of the reference's f64 value (the
    /// vector f64 `exp` moves it by at most 3e-10 first), specials as there.
    #[test]
    fn gelu_rounds_the_reference() {
        at_every_level(gelu_rounds_the_reference_at_this_level);
    }

    fn gelu_rounds_the_reference_at_this_level() {
        let magnitudes = (-300..=160).map(|i| 10f32.powf(i as f32 / 4.0).min(f32::MAX));
        let special = [
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1e-45,
            -3e-39,
        ];
        let xs: Vec<f32> = (magnitudes.flat_map(|m| [m, -m]))
            .chain((-4000..=4000).map(|i| i as f32 * 0.01))
            .chain(special)
            .collect();
        let mut got = xs.clone();
        gelu_in_place(&mut got);
        for (&x, &g) in xs.iter().zip(&got) {
            let want = tilefuse_ir::gelu(f64::from(x));
            let ulp = (want as f32).abs().max(f32::MIN_POSITIVE) * f32::EPSILON;
            let close = (f64::from(g) - want).abs() <= f64::from(ulp);
            let same = g.to_bits() == (want as f32).to_bits() || (g.is_nan() && want.is_nan());
            assert!(same || close, "gelu({x:e}) = {g:e}, want {want:e}");
        }
    }

    fn exp_and_tanh_are_accurate_at_this_level() {
        let xs: Vec<f32> = (-20_000..=20_000).map(|i| i as f32 * 0.004).collect();
        let mut e = xs.clone();
        exp_in_place(&mut e);
        let mut t = xs.clone();
        tanh_in_place(&mut t);
        for ((&x, &ex), &th) in xs.iter().zip(&e).zip(&t) {
            let want = f64::from(x).exp();
            assert!(
                (f64::from(ex) - want).abs() <= 3e-7 * want,
                "exp({x}) = {ex}, want {want}"
            );
            let want = f64::from(x).tanh();
            assert!(
                (f64::from(th) - want).abs() <= 4e-7 * want.abs().max(1e-30) + 1e-9,
                "tanh({x}) = {th}, want {want}"
            );
        }
        // Overflow, underflow through the subnormals, and the special
        // values behave as the f32 rounding of e^x.
        let xs: Vec<f32> = (-1100..=950).map(|i| i as f32 * 0.1).collect();
        let mut e = xs.clone();
        exp_in_place(&mut e);
        for (&x, &ex) in xs.iter().zip(&e) {
            let want = f64::from(x).exp() as f32;
            let tolerance = 3e-7 * want + f32::from_bits(2); // two subnormal steps
            assert!(
                ex == want || (ex - want).abs() <= tolerance,
                "exp({x}) = {ex:e}, want {want:e}"
            );
        }
        let mut special = [f32::NEG_INFINITY, f32::INFINITY, f32::NAN, 89.0, -105.0];
        exp_in_place(&mut special);
        assert_eq!(special[..2], [0.0, f32::INFINITY]);
        assert!(special[2].is_nan() && special[3] == f32::INFINITY && special[4] == 0.0);
        let mut special = [
            -1e30f32,
            1e30,
            0.0,
            f32::NEG_INFINITY,
            f32::INFINITY,
            f32::NAN,
        ];
        tanh_in_place(&mut special);
        assert_eq!(special[..5], [-1.0, 1.0, 0.0, -1.0, 1.0]);
        assert!(special[5].is_nan());
    }
}
