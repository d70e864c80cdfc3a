//! Branch-free f32 `exp`, `tanh`, `ln`, `sin`, `cos` and GELU over
//! slices, written so that LLVM vectorizes them, and compiled for the
//! baseline target, AVX2 + FMA and AVX-512, picked at run time (libm's
//! scalar calls do not vectorize: `ln`, `sin` and `cos` of 4096² took
//! 41, 58 and 66 ms on 2 cores so, 9-11 vectorized; torch 18-26).
//!
//! `exp`: Cody-Waite range reduction to r in [-ln2/2, ln2/2], a degree-6
//! polynomial, and 2^n built from the exponent bits; relative error below
//! 2e-7. Steps of 16 lanes within |x| < 87 take one scale factor; others
//! the full range, through the subnormals. `tanh`: Eigen's rational
//! approximation (`generic_fast_tanh_float`), relative error below 4e-7.
//! `ln`, `sin`, `cos`: Cephes' polynomials on steps their reduction
//! covers, libm's on the others (docs/semantics.md gives the accuracy).
#![allow(unsafe_code)]

/// `a * b + c` as the copy being compiled computes it fastest (see
/// `multiversion!`): fused, one rounding, where it has FMA; else a
/// multiply and an add, since `f32::mul_add` is a library call there. A
/// polynomial of multiplies and adds is a chain of twice the steps: `exp`
/// on AVX-512 took 0.42 ns an element so, 0.26 fused (one Emerald Rapids
/// core, 256-lane runs).
pub trait MulAdd {
    fn mul_add(a: f32, b: f32, c: f32) -> f32;
    fn mul_add64(a: f64, b: f64, c: f64) -> f64;
}

/// FMA's `a * b + c`.
pub struct Fused;

impl MulAdd for Fused {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
    #[inline(always)]
    fn mul_add64(a: f64, b: f64, c: f64) -> f64 {
        a.mul_add(b, c)
    }
}

/// A multiply, then an add.
pub struct Unfused;

impl MulAdd for Unfused {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a * b + c
    }
    #[inline(always)]
    fn mul_add64(a: f64, b: f64, c: f64) -> f64 {
        a * b + c
    }
}

/// The baseline copy's: fused where the target always has FMA (AArch64's
/// NEON; or x86-64 built for a CPU with it).
#[cfg(any(target_arch = "aarch64", target_feature = "fma"))]
pub type BaselineMulAdd = Fused;
#[cfg(not(any(target_arch = "aarch64", target_feature = "fma")))]
pub type BaselineMulAdd = Unfused;

/// The polynomial with coefficients `c` (the highest power's first) at
/// `x`, by Horner's rule.
#[inline(always)]
fn horner<M: MulAdd, const N: usize>(x: f32, c: [f32; N]) -> f32 {
    // A plain loop, no closure: see `by_step`.
    let mut p = c[0];
    for &next in &c[1..] {
        p = M::mul_add(p, x, next);
    }
    p
}

/// `x * scale` rounded to the nearest integer, as a float and as an
/// integer, with the 1.5 * 2^23 trick: the sum's low mantissa bits are
/// that integer, read back as bits (an `as i32` conversion saturates,
/// which does not vectorize). For |x * scale| below 2^22.
#[inline(always)]
fn round_scaled<M: MulAdd>(x: f32, scale: f32) -> (f32, i32) {
    const SHIFTER: f32 = 12_582_912.0;
    let t = M::mul_add(x, scale, SHIFTER);
    (
        t - SHIFTER,
        t.to_bits().wrapping_sub(SHIFTER.to_bits()) as i32,
    )
}

/// Lanes per step of the vector loops (`by_step`: `exp`, `ln`, `sin`, `cos`):
/// one check decides whether a step needs the full-range scalar form.
const STEP: usize = 16;

/// `fast` on every lane of a step where `inside` holds for all of them,
/// else `full` on each.
#[inline(always)]
fn by_step(
    v: &mut [f32],
    inside: impl Fn(f32) -> bool,
    fast: impl Fn(f32) -> f32,
    full: impl Fn(f32) -> f32,
) {
    let mut steps = v.chunks_exact_mut(STEP);
    for step in &mut steps {
        // Index loops: a generic helper (`array::from_fn`) may stay out
        // of line, compiled without the copy's target features (its
        // `mul_add`s became libm calls, 25x slower).
        let mut quick = [0.0f32; STEP];
        let mut all = true;
        for i in 0..STEP {
            quick[i] = fast(step[i]);
            all &= inside(step[i]);
        }
        if all {
            step.copy_from_slice(&quick);
        } else {
            step.iter_mut().for_each(|x| *x = full(*x));
        }
    }
    let rest = steps.into_remainder();
    rest.iter_mut().for_each(|x| *x = full(*x));
}

/// Defines a function whose body is compiled for the widest vector
/// extension the CPU has: AVX-512, else AVX2 + FMA, else the baseline.
/// The body is an `#[inline(always)]` function forced into each
/// target-feature copy, which is what carries the features into its loops
/// (a closure handed to a target-feature function may stay out of line).
/// Declared `fn name<M: MulAdd>(..)`, the body names as `M` the
/// [`MulAdd`] of the copy being compiled (the function itself is not
/// generic).
macro_rules! multiversion {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $crate::cpu::simd_math::multiversion!(
            $(#[$meta])* $vis fn $name<_M: MulAdd>($($arg: $ty),*) $(-> $ret)? $body
        );
    };
    ($(#[$meta:meta])* $vis:vis fn $name:ident<$m:ident: MulAdd>($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        // The only unsafe calls are the dispatch below, checked here once.
        #[allow(unsafe_code)]
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn body<$m: $crate::cpu::simd_math::MulAdd>($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                use $crate::cpu::simd_math::Fused;
                #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")]
                fn avx512($($arg: $ty),*) $(-> $ret)? {
                    body::<Fused>($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                fn avx2($($arg: $ty),*) $(-> $ret)? {
                    body::<Fused>($($arg),*)
                }
                match $crate::cpu::simd_math::widest() {
                    // SAFETY: the CPU supports the features the function was compiled for.
                    $crate::cpu::simd_math::Simd::Avx512 => return unsafe { avx512($($arg),*) },
                    // SAFETY: as above.
                    $crate::cpu::simd_math::Simd::Avx2 => return unsafe { avx2($($arg),*) },
                    $crate::cpu::simd_math::Simd::Baseline => {}
                }
            }
            body::<$crate::cpu::simd_math::BaselineMulAdd>($($arg),*)
        }
    };
}
pub(crate) use multiversion;

mod exp;
mod ln_trig;

pub use exp::{exp_in_place, gelu_in_place, tanh_in_place};
pub use ln_trig::{cos_in_place, ln_in_place, sin_in_place};

/// The vector extensions `multiversion!` compiles for, narrowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Simd {
    Baseline,
    Avx2,
    Avx512,
}

/// Tests lower this to run the narrower copies on a wider CPU (never
/// above what the CPU has: `widest` takes the minimum).
#[cfg(test)]
static CAP: std::sync::Mutex<Simd> = std::sync::Mutex::new(Simd::Avx512);

/// Runs `f` with every `multiversion!` function using at most `cap`
/// (tests running meanwhile may see the narrower level too; they stay
/// correct, only slower).
#[cfg(test)]
pub fn at_most<R>(cap: Simd, f: impl FnOnce() -> R) -> R {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let set = |level| {
        *CAP.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = level
    };
    set(cap);
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    set(Simd::Avx512);
    out.unwrap_or_else(|e| std::panic::resume_unwind(e))
}

/// The widest extension this CPU has (feature detection is cached;
/// unit tests may cap it with `at_most`).
pub fn widest() -> Simd {
    #[cfg(test)]
    return detected().min(
        *CAP.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    #[cfg(not(test))]
    detected()
}

/// The widest extension this CPU has, detected once: every
/// `multiversion!` call asks, a few times a pass of a row loop, and six
/// feature checks a call were 0.8 % of a one-thread softmax over rows
/// of 512.
pub(super) fn detected() -> Simd {
    static LEVEL: std::sync::OnceLock<Simd> = std::sync::OnceLock::new();
    *LEVEL.get_or_init(detect)
}

fn detect() -> Simd {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if has!("avx512f") && has!("avx512vl") && has!("avx512dq") && has!("avx512bw") {
            return Simd::Avx512;
        }
        if has!("avx2") && has!("fma") {
            return Simd::Avx2;
        }
    }
    Simd::Baseline
}

/// `dst = c * src` on the first visit of a sum, else `dst += c * src`
/// (fused multiply-add with AVX2 + FMA).
pub fn axpy(dst: &mut [f32], c: f32, src: &[f32], first: bool) {
    let src = &src[..dst.len()];
    if first {
        dst.iter_mut().zip(src).for_each(|(d, &s)| *d = c * s);
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if widest() >= Simd::Avx2 {
        // SAFETY: the CPU supports the features the function was compiled for.
        unsafe { axpy_fma(dst, c, src) };
        return;
    }
    dst.iter_mut().zip(src).for_each(|(d, &s)| *d += c * s);
}

#[target_feature(enable = "avx2,fma")]
#[cfg(target_arch = "x86_64")]
fn axpy_fma(dst: &mut [f32], c: f32, src: &[f32]) {
    dst.iter_mut()
        .zip(src)
        .for_each(|(d, &s)| *d = c.mul_add(s, *d));
}

/// Runs `f` at each vector extension this CPU has (see `at_most`).
#[cfg(test)]
pub fn at_every_level(f: fn()) {
    for level in [Simd::Baseline, Simd::Avx2, Simd::Avx512] {
        if level <= detected() {
            at_most(level, f);
        }
    }
}
