//! B packed in rows for the matmul micro-kernel (see `gemm::update`),
//! where its columns do not lie next to each other: a transposed B, as in
//! `x @ w.T`.

#![allow(unsafe_code)] // AVX transposes, dispatched as in simd_math

use super::simd_math::{Simd, widest};

thread_local! {
    /// B packed in rows (see [`with_rows_of_b`]).
    static PACKED: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Calls `f(b, b_k)` with `k` rows of `n` columns of B, each row
/// contiguous, as the micro-kernel reads them: `b` itself where its
/// columns lie `b_lane = 1` apart, else a copy packed row by row (a
/// transposed B, as in `q @ k.T`: a 128 x 64 x 128 product took 4.7 ms
/// in the generic path, column by column).
pub fn with_rows_of_b(
    b: &[f32],
    b_k: usize,
    b_lane: usize,
    k: usize,
    n: usize,
    f: impl FnOnce(&[f32], usize),
) {
    if b_lane == 1 {
        return f(b, b_k);
    }
    PACKED.with_borrow_mut(|packed| {
        packed.resize(k * n, 0.0);
        let done = match widest() {
            // SAFETY: the CPU has AVX; `b` holds every element read (the
            // caller's span covers `b_lane * (n - 1) + k`, `b_k` being 1).
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 | Simd::Avx512 if b_k == 1 => unsafe {
                transpose_avx(b, b_lane, k, n, packed)
            },
            _ => (0, 0),
        };
        pack_rest(b, b_k, b_lane, done, packed, n);
        f(packed, n);
    });
}

/// Packs what [`transpose_avx`] left: columns from `done.0` and, in the
/// columns before, rows from `done.1`. 16 columns at a time: the 16 lines
/// they read from stay in L1 across the k rows, each row written a whole
/// line at a time (a 512^3 `a @ b.T` on two threads: 4.2 ms packed column
/// by column, 1.45 ms so, 1.05 ms without the transpose).
fn pack_rest(
    b: &[f32],
    b_k: usize,
    b_lane: usize,
    done: (usize, usize),
    packed: &mut [f32],
    n: usize,
) {
    let (cols, rows) = done;
    let columns = |j0: usize, width: usize, from_row: usize, packed: &mut [f32]| {
        for (kk, row) in packed.chunks_exact_mut(n).enumerate().skip(from_row) {
            let from = &b[kk * b_k + j0 * b_lane..];
            for (jj, x) in row[j0..j0 + width].iter_mut().enumerate() {
                *x = from[jj * b_lane];
            }
        }
    };
    if cols > 0 {
        columns(0, cols, rows, packed);
    }
    for j0 in (cols..n).step_by(16) {
        columns(j0, 16.min(n - j0), 0, packed);
    }
}

/// Packs B's first columns and rows in blocks of 8 x 8, each read as 8
/// rows of 8 contiguous values of k and written transposed. Copied
/// element by element instead, a 64 x 4096 x 1024 `a @ b.T` took 5.4 ms
/// (3.9 so; 3.5 with B untransposed). Returns how many columns and rows
/// it did.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn transpose_avx(
    b: &[f32],
    b_lane: usize,
    k: usize,
    n: usize,
    packed: &mut [f32],
) -> (usize, usize) {
    let (cols, rows) = (n / 8 * 8, k / 8 * 8);
    for j0 in (0..cols).step_by(8) {
        for k0 in (0..rows).step_by(8) {
            // SAFETY: rows j0..j0 + 8 of B^T hold k values each, and the
            // packed rows k0..k0 + 8 hold n; both in bounds by the loops.
            unsafe {
                transpose8(
                    b.as_ptr().add(j0 * b_lane + k0),
                    b_lane,
                    packed.as_mut_ptr().add(k0 * n + j0),
                    n,
                );
            }
        }
    }
    (cols, rows)
}

/// `dst[r * dst_row + c] = src[c * src_row + r]` for an 8 x 8 block.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn transpose8(src: *const f32, src_row: usize, dst: *mut f32, dst_row: usize) {
    use std::arch::x86_64::*;
    // SAFETY: the caller's block is in bounds.
    let r: [__m256; 8] = std::array::from_fn(|i| unsafe { _mm256_loadu_ps(src.add(i * src_row)) });
    let t = [
        _mm256_unpacklo_ps(r[0], r[1]),
        _mm256_unpackhi_ps(r[0], r[1]),
        _mm256_unpacklo_ps(r[2], r[3]),
        _mm256_unpackhi_ps(r[2], r[3]),
        _mm256_unpacklo_ps(r[4], r[5]),
        _mm256_unpackhi_ps(r[4], r[5]),
        _mm256_unpacklo_ps(r[6], r[7]),
        _mm256_unpackhi_ps(r[6], r[7]),
    ];
    let s = [
        _mm256_shuffle_ps::<0x44>(t[0], t[2]),
        _mm256_shuffle_ps::<0xEE>(t[0], t[2]),
        _mm256_shuffle_ps::<0x44>(t[1], t[3]),
        _mm256_shuffle_ps::<0xEE>(t[1], t[3]),
        _mm256_shuffle_ps::<0x44>(t[4], t[6]),
        _mm256_shuffle_ps::<0xEE>(t[4], t[6]),
        _mm256_shuffle_ps::<0x44>(t[5], t[7]),
        _mm256_shuffle_ps::<0xEE>(t[5], t[7]),
    ];
    let out = [
        _mm256_permute2f128_ps::<0x20>(s[0], s[4]),
        _mm256_permute2f128_ps::<0x20>(s[1], s[5]),
        _mm256_permute2f128_ps::<0x20>(s[2], s[6]),
        _mm256_permute2f128_ps::<0x20>(s[3], s[7]),
        _mm256_permute2f128_ps::<0x31>(s[0], s[4]),
        _mm256_permute2f128_ps::<0x31>(s[1], s[5]),
        _mm256_permute2f128_ps::<0x31>(s[2], s[6]),
        _mm256_permute2f128_ps::<0x31>(s[3], s[7]),
    ];
    for (i, v) in out.into_iter().enumerate() {
        // SAFETY: as above.
        unsafe { _mm256_storeu_ps(dst.add(i * dst_row), v) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shape around the 8 x 8 blocks' edges packs as the
    /// definition says, with B transposed (`b_k` 1) and strided, with AVX
    /// and without.
    #[test]
    fn packs_every_shape_as_the_definition() {
        packs_as_the_definition();
        crate::cpu::simd_math::at_most(Simd::Baseline, packs_as_the_definition);
    }

    fn packs_as_the_definition() {
        for (k, n) in [(1, 1), (7, 9), (8, 8), (16, 24), (17, 33), (64, 5), (3, 40)] {
            for (b_k, b_lane) in [(1, k), (1, k + 3), (2, 2 * k + 1)] {
                let len = b_k * (k - 1) + b_lane * (n - 1) + 1;
                let b: Vec<f32> = (0..len).map(|i| i as f32).collect();
                with_rows_of_b(&b, b_k, b_lane, k, n, |packed, row| {
                    assert_eq!(row, n);
                    for kk in 0..k {
                        for j in 0..n {
                            let want = b[kk * b_k + j * b_lane];
                            assert_eq!(
                                packed[kk * n + j],
                                want,
                                "{k}x{n} ({b_k}, {b_lane}) at {kk}, {j}"
                            );
                        }
                    }
                });
            }
        }
    }
}
