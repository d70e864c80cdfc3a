//! f16 and bf16 lanes: rounding f32 lanes to a half's precision, and
//! narrowing them into a buffer of halves, vectorized. The `half` crate's
//! slice conversions go 8 lanes a call through F16C for f16 and a branch
//! per lane for bf16; a half softmax spent most of its time there
//! (`benches/half.py`).
//!
//! Unsafe code: only the calls of F16C functions after runtime detection.
#![allow(unsafe_code)]

use half::slice::HalfFloatSliceExt;
use tilefuse_ir::{DType, bf16, f16};

use super::simd_math::multiversion;

/// The bf16 bits of `x`, rounded to nearest even; a NaN stays a (quiet)
/// NaN. Branch-free, so that loops of it vectorize.
#[inline(always)]
fn bf16_bits(x: f32) -> u32 {
    let b = x.to_bits();
    let rounded = b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16;
    let nan = (b >> 16) | 0x40;
    if b & 0x7fff_ffff > 0x7f80_0000 {
        nan
    } else {
        rounded
    }
}

multiversion!(
    fn round_bf16(a: &mut [f32]) {
        a.iter_mut()
            .for_each(|x| *x = f32::from_bits(bf16_bits(*x) << 16));
    }
);

multiversion!(
    /// Writes `src`, rounded to nearest even, into `dst`.
    pub fn narrow_bf16(src: &[f32], dst: &mut [bf16]) {
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = bf16::from_bits(bf16_bits(s) as u16);
        }
    }
);

/// Rounds every lane to `half`'s precision (f16 or bf16), in place.
pub fn round_to(half: DType, a: &mut [f32]) {
    match half {
        DType::F16 => round_f16(a),
        DType::BF16 => round_bf16(a),
        other => unreachable!("rounding to {other}, not a half"),
    }
}

/// Writes `src`, rounded to nearest even, into `dst` (F16C where the CPU
/// has it).
pub fn narrow_f16(src: &[f32], dst: &mut [f16]) {
    dst.convert_from_f32_slice(src);
}

fn round_f16(a: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("f16c") {
        // SAFETY: the CPU has F16C (and so AVX), detected above.
        return unsafe { round_f16_f16c(a) };
    }
    for x in a {
        *x = f16::from_f32(*x).to_f32();
    }
}

/// f16 rounding of 8 lanes per instruction pair (`vcvtps2ph` to nearest
/// even, `vcvtph2ps`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
fn round_f16_f16c(a: &mut [f32]) {
    use std::arch::x86_64::{
        _MM_FROUND_TO_NEAREST_INT, _mm256_cvtph_ps, _mm256_cvtps_ph, _mm256_loadu_ps,
        _mm256_storeu_ps,
    };
    let mut chunks = a.chunks_exact_mut(8);
    for c in &mut chunks {
        // SAFETY: `c` holds 8 f32s; unaligned loads and stores.
        unsafe {
            let v = _mm256_loadu_ps(c.as_ptr());
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
            _mm256_storeu_ps(c.as_mut_ptr(), _mm256_cvtph_ps(h));
        }
    }
    for x in chunks.into_remainder() {
        *x = f16::from_f32(*x).to_f32();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every rounding agrees with the `half` crate's (the reference's),
    /// ties, specials, overflow and subnormals among them.
    #[test]
    fn rounding_matches_the_half_crate() {
        let mut values: Vec<f32> = (0..4096u32)
            .map(|i| f32::from_bits(i.wrapping_mul(0x9E37_79B9)))
            .collect();
        values.extend([
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            65504.0,
            65519.0,
            65520.0,
            1.0 + 1.0 / 256.0,
            1.0 + 3.0 / 256.0,
            5.96e-8,
            2.98e-8,
            1e-40,
            f32::MAX,
        ]);
        for half in [DType::F16, DType::BF16] {
            let mut got = values.clone();
            round_to(half, &mut got);
            let narrowed: Vec<u16> = match half {
                DType::F16 => {
                    let mut out = vec![f16::ZERO; values.len()];
                    narrow_f16(&values, &mut out);
                    out.iter().map(|h| h.to_bits()).collect()
                }
                _ => {
                    let mut out = vec![bf16::ZERO; values.len()];
                    narrow_bf16(&values, &mut out);
                    out.iter().map(|h| h.to_bits()).collect()
                }
            };
            for (i, &x) in values.iter().enumerate() {
                let want = match half {
                    DType::F16 => f16::from_f32(x).to_f32(),
                    _ => bf16::from_f32(x).to_f32(),
                };
                let bits = match half {
                    DType::F16 => f16::from_f32(x).to_bits(),
                    _ => bf16::from_f32(x).to_bits(),
                };
                assert!(got[i].to_bits() == want.to_bits() || got[i].is_nan() && want.is_nan());
                assert!(narrowed[i] == bits || want.is_nan(), "{half} {x}");
            }
        }
    }
}
