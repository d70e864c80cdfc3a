//! `ln`, `sin` and `cos`: Cephes' polynomials where their reductions
//! hold, libm's values elsewhere.

use super::{MulAdd, by_step, horner, round_scaled};

/// ln x for a positive normal x: x = m 2^e with m in [√½, √2), and ln m
/// = f - f²/2 + f³ P(f) for f = m - 1 (Cephes' `logf` polynomial, 1 ulp),
/// e ln 2 added in two parts.
#[inline(always)]
fn ln_normal<M: MulAdd>(x: f32) -> f32 {
    // The exponent that puts the mantissa in [√½, √2): the bits' distance
    // from √½'s, shifted (negative below √½ in its binade).
    let bits = x.to_bits();
    let e = (bits.wrapping_sub(0x3f35_04f3) as i32) >> 23;
    let f = f32::from_bits(bits.wrapping_sub((e << 23) as u32)) - 1.0;
    let cephes = [
        7.037_683_6e-2,
        -1.151_461_e-1,
        1.167_699_9e-1,
        -1.242_014_1e-1,
        1.424_932_3e-1,
        -1.666_805_8e-1,
        2.000_071_5e-1,
        -2.499_999_4e-1,
        3.333_333e-1,
    ];
    let z = f * f;
    let e = e as f32;
    let tail = M::mul_add(e, -2.121_944_4e-4, horner::<M, 9>(f, cephes) * f * z);
    M::mul_add(e, 0.693_359_4, f + M::mul_add(z, -0.5, tail))
}

/// The largest |x| that [`sin_quadrant`] reduces (Cephes' `sinf` bound):
/// past it, x's multiple of π/4 outgrows the three parts of π/4.
const SIN_REDUCED_MAX: f32 = 8192.0;

/// sin |x| (quadrant 0) or cos |x| (quadrant 1) for |x| <= 8192: |x|
/// less the nearest multiple n of π/2 (π/2 in three parts, the first two
/// short enough that n times them is exact), then Cephes' `sinf` and
/// `cosf` polynomials on [-π/4, π/4], the quadrant (n + `quadrant`) mod 4
/// picking which and its sign (n rounded by `round_scaled`).
#[inline(always)]
fn sin_quadrant<M: MulAdd>(x: f32, quadrant: i32) -> f32 {
    let ax = x.abs();
    let (n, quadrants) = round_scaled::<M>(ax, std::f32::consts::FRAC_2_PI);
    let mut r = ax;
    for part in [1.570_312_5, 4.837_513e-4, 7.549_79e-8] {
        r = M::mul_add(-n, part, r);
    }
    let z = r * r;
    let sin = horner::<M, 3>(z, [-1.951_529_6e-4, 8.332_161e-3, -1.666_665_5e-1]);
    let sin = M::mul_add(sin * z, r, r);
    let cos = horner::<M, 3>(z, [2.443_315_7e-5, -1.388_731_6e-3, 4.166_664_6e-2]);
    let cos = M::mul_add(cos * z, z, M::mul_add(z, -0.5, 1.0));
    let q = quadrants + quadrant;
    let v = if q & 1 == 0 { sin } else { cos };
    if q & 2 == 0 { v } else { -v }
}

multiversion!(
    /// Applies `ln` to every element in place: steps of positive normal
    /// numbers by `ln_normal`, others (zeros, negatives, subnormals, inf,
    /// NaN) by libm's.
    pub fn ln_in_place<M: MulAdd>(v: &mut [f32]) {
        // MIN_POSITIVE..=MAX as bits, one unsigned compare.
        let normal = |x: f32| x.to_bits().wrapping_sub(0x0080_0000) < 0x7f00_0000;
        by_step(v, normal, ln_normal::<M>, f32::ln);
    }
);
multiversion!(
    /// Applies `sin` to every element in place: steps within |x| <= 8192
    /// by `sin_quadrant`, others by libm's.
    pub fn sin_in_place<M: MulAdd>(v: &mut [f32]) {
        let fast = |x: f32| {
            let s = sin_quadrant::<M>(x, 0);
            if x.is_sign_negative() { -s } else { s }
        };
        by_step(v, |x| x.abs() <= SIN_REDUCED_MAX, fast, f32::sin);
    }
);
multiversion!(
    /// Applies `cos` to every element in place, as `sin_in_place`.
    pub fn cos_in_place<M: MulAdd>(v: &mut [f32]) {
        let fast = |x: f32| sin_quadrant::<M>(x, 1);
        by_step(v, |x| x.abs() <= SIN_REDUCED_MAX, fast, f32::cos);
    }
);

#[cfg(test)]
mod tests {
    use super::super::at_every_level;
    use super::*;

    #[test]
    fn ln_is_accurate() {
        at_every_level(ln_is_accurate_at_this_level);
    }

    /// Within 2 ulp of the f64 logarithm, near 1 too; the values the
    /// polynomial does not take (zeros, negatives, subnormals, inf, NaN)
    /// as libm's, also in a step with normal lanes.
    fn ln_is_accurate_at_this_level() {
        let binades =
            (-126..=127).flat_map(|e| (0..64).map(move |i| (1.0 + i as f32 / 64.0) * 2f32.powi(e)));
        let near_one = (-4000..=4000).map(|i| 1.0 + i as f32 * 1e-6);
        let xs: Vec<f32> = binades.chain(near_one).filter(|x| x.is_finite()).collect();
        let mut got = xs.clone();
        ln_in_place(&mut got);
        for (&x, &g) in xs.iter().zip(&got) {
            let want = f64::from(x).ln();
            let ulp = f64::from((want as f32).abs().max(f32::MIN_POSITIVE) * f32::EPSILON);
            assert!(
                (f64::from(g) - want).abs() <= 2.0 * ulp,
                "ln({x:e}) = {g:e}, want {want:e}"
            );
        }
        const SPECIAL: [f32; 8] = [
            0.0,
            -0.0,
            -1.0,
            1e-45,
            1e-39,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ];
        // Alone (a tail shorter than a step) and in a step with normal lanes.
        let mut alone = SPECIAL;
        let mut step: Vec<f32> = SPECIAL.iter().chain(&[2.0; 8]).copied().collect();
        ln_in_place(&mut alone);
        ln_in_place(&mut step);
        for (got, x) in alone.iter().chain(&step[..8]).zip(SPECIAL.iter().cycle()) {
            assert_eq!(got.to_bits(), x.ln().to_bits(), "ln({x:e})");
        }
    }

    #[test]
    fn sin_and_cos_are_accurate() {
        at_every_level(sin_and_cos_are_accurate_at_this_level);
    }

    /// Within 2 ulp of the f64 values, or 1e-10 (well below an ulp of
    /// the argument) near the zeros of sin and cos; past the reduced range,
    /// and at inf and NaN, libm's values.
    fn sin_and_cos_are_accurate_at_this_level() {
        let dense = (-2_000_000..=2_000_000).map(|i| i as f32 * 4.1e-3);
        let small = (-130..=0).flat_map(|e| [2f32.powi(e), -(2f32.powi(e))]);
        let beyond = [
            8193.0,
            -1e5,
            3e38,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ];
        let xs: Vec<f32> = dense
            .chain(small)
            .chain([0.0, -0.0])
            .chain(beyond)
            .collect();
        let (mut sin, mut cos) = (xs.clone(), xs.clone());
        sin_in_place(&mut sin);
        cos_in_place(&mut cos);
        for (i, &x) in xs.iter().enumerate() {
            for (got, f, name) in [
                (sin[i], f64::sin as fn(f64) -> f64, "sin"),
                (cos[i], f64::cos, "cos"),
            ] {
                let want = f(f64::from(x));
                if x.abs() > SIN_REDUCED_MAX || !x.is_finite() {
                    let libm = if name == "sin" { x.sin() } else { x.cos() };
                    assert_eq!(got.to_bits(), libm.to_bits(), "{name}({x:e})");
                    continue;
                }
                let ulp = f64::from((want as f32).abs().max(f32::MIN_POSITIVE) * f32::EPSILON);
                let err = (f64::from(got) - want).abs();
                assert!(
                    err <= 2.0 * ulp || err <= 1e-10,
                    "{name}({x:e}) = {got:e}, want {want:e}"
                );
            }
        }
    }
}
