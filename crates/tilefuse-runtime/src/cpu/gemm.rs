//! A register-blocked rank-k update, the CPU executor's matmul
//! micro-kernel: `C[r, j] += sum_k A[r, k] * B[k, j]` for a few rows `r`
//! and a strip of columns `j`, keeping a block of `C` (see [`update`]) in
//! registers across the whole `k` loop,
//! so that each step loads one row of B and broadcasts one value of A per
//! row. The program recognizes the loop nest it replaces (see
//! `program.rs`, `Step::Gemm`).

#![allow(unsafe_code)] // AVX2 + FMA dispatch, as in simd_math

use super::simd_math::{Simd, widest};

/// Where the operands live: flat slices with element strides.
pub struct Panel<'a> {
    pub c: &'a mut [f32],
    /// Between consecutive rows of `c`.
    pub c_row: usize,
    pub a: &'a [f32],
    pub a_row: usize,
    pub a_k: usize,
    pub b: &'a [f32],
    pub b_k: usize,
    pub rows: usize,
    pub k: usize,
    pub n: usize,
}

/// The most rows of the micro-kernel's own row loop (the instruction
/// tile's; `gemm_match` may add a loop over groups of them), and the most
/// a panel has that [`update`] runs with B in place.
pub const MAX_ROWS: usize = 8;

/// Runs the update over the whole panel. With AVX-512, register blocks of
/// up to 6 rows × 64 columns (see `update_avx512`); else 4 × 16 (8 of
/// AVX2's 16 registers accumulate), so that the accumulators, a row of B
/// and a broadcast value of A stay in registers. A panel of more rows than one
/// block runs strip by strip of B (see [`in_strips`]).
pub fn update(p: &mut Panel<'_>) {
    let (width, blocks): (usize, fn(&mut Panel<'_>)) = match widest() {
        // SAFETY: the CPU supports the features the function was compiled for.
        #[cfg(target_arch = "x86_64")]
        Simd::Avx512 => (64, |p| unsafe { update_avx512(p) }),
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Simd::Avx2 => (16, |p| unsafe { update_avx2(p) }),
        _ => (16, by_rows::<16, false>),
    };
    if p.rows > MAX_ROWS && p.n >= width {
        in_strips(p, width, blocks);
    } else {
        blocks(p);
    }
}

thread_local! {
    /// A strip of B, copied contiguous (see [`in_strips`]).
    static STRIP: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `blocks` on the panel one strip of `width` columns at a time, all
/// rows of a strip before the next, each strip of B copied once into a
/// contiguous buffer first. Read in place, B's rows lie a whole row of the
/// matrix apart (4 KB for 1024 columns, the stride at which every row
/// falls into the same L1 set), so every row block re-read B from L2; the
/// copy (k × `width`) stays in L1 across the panel's row blocks. The last
/// columns (fewer than `width`) run in place.
fn in_strips(p: &mut Panel<'_>, width: usize, blocks: fn(&mut Panel<'_>)) {
    let full = p.n / width * width;
    STRIP.with_borrow_mut(|strip| {
        strip.resize(p.k * width, 0.0);
        for j0 in (0..full).step_by(width) {
            for (kk, row) in strip.chunks_exact_mut(width).enumerate() {
                row.copy_from_slice(&p.b[kk * p.b_k + j0..][..width]);
            }
            blocks(&mut p.columns(j0, width, strip, width));
        }
    });
    if full < p.n {
        let (b, b_k) = (p.b, p.b_k);
        blocks(&mut p.columns(full, p.n - full, &b[full..], b_k));
    }
}

impl Panel<'_> {
    /// Columns `j0..j0 + n` of every row, with B (its first column at
    /// `j0`) read from `b` with step `b_k`.
    fn columns<'s>(&'s mut self, j0: usize, n: usize, b: &'s [f32], b_k: usize) -> Panel<'s> {
        Panel {
            c: &mut self.c[j0..],
            c_row: self.c_row,
            a: self.a,
            a_row: self.a_row,
            a_k: self.a_k,
            b,
            b_k,
            rows: self.rows,
            k: self.k,
            n,
        }
    }
}

/// Blocks of 6 rows × 64 columns: 24 of the 32 vector registers
/// accumulate, so that each step's 4 loads of B and 6 broadcasts of A feed
/// 24 FMAs (8 × 32 fed 16 FMAs with 10: 1024^3 on one core of a 2-core
/// AVX-512 Xeon, 64 rows a call, B in strips: 121 GFLOP/s against 108,
/// and 105 for 8 × 32 on B in place, 8 rows a call; numpy's OpenBLAS on
/// that core: 145).
#[target_feature(enable = "avx512f,avx2,fma")]
#[cfg(target_arch = "x86_64")]
fn update_avx512(p: &mut Panel<'_>) {
    for r0 in (0..p.rows).step_by(6) {
        match p.rows - r0 {
            1 => rows_avx512::<1>(p, r0),
            2 => rows_avx512::<2>(p, r0),
            3 => rows_avx512::<3>(p, r0),
            4 => rows_avx512::<4>(p, r0),
            5 => rows_avx512::<5>(p, r0),
            _ => rows_avx512::<6>(p, r0),
        }
    }
}

/// Rows `r0..r0 + R`: blocks of 64 columns (128 for two rows), then of
/// 16, then the last columns in one masked vector; one row streams B
/// instead (see [`stream_avx512`]). Two rows take B's rows half a kilobyte
/// at a time, not 256 bytes from rows a row of B apart.
#[target_feature(enable = "avx512f,avx2,fma")]
#[cfg(target_arch = "x86_64")]
fn rows_avx512<const R: usize>(p: &mut Panel<'_>, r0: usize) {
    let widest = match R {
        1 => stream_avx512(p, r0),
        2 => blocks_avx512::<R, 8>(p, r0, 0),
        _ => 0,
    };
    let wide = blocks_avx512::<R, 4>(p, r0, widest);
    let narrow = blocks_avx512::<R, 1>(p, r0, wide);
    masked_avx512::<R>(p, r0, narrow);
}

/// One row (a vector-matrix product): four rows of B at a time added into
/// the whole row of C, each read from end to end, so that the hardware
/// prefetchers see a few long streams; C's row stays in L1. Blocks of 256
/// columns, k inner, read a kilobyte from each row of B in turn: 1 x 4096
/// x 4096 on one core ran at 14 GB/s so, at OpenBLAS's 26 (its gemv reads
/// B this way) in whole rows. Returns where the whole vectors end.
#[target_feature(enable = "avx512f,avx2,fma")]
#[cfg(target_arch = "x86_64")]
fn stream_avx512(p: &mut Panel<'_>, r0: usize) -> usize {
    let full = p.n / 16 * 16;
    if full == 0 {
        return 0;
    }
    assert_within(p, r0, full);
    let quads = p.k / 4 * 4;
    // SAFETY: `assert_within` bounds every offset: row r0, columns below
    // `full`, steps below k.
    unsafe {
        for k in (0..quads).step_by(4) {
            add_rows::<4>(p, r0, k, full);
        }
        for k in quads..p.k {
            add_rows::<1>(p, r0, k, full);
        }
    }
    full
}

/// `C[r0, ..full] += sum over q < Q of A[r0, k + q] * B[k + q, ..full]`.
///
/// # Safety
/// The CPU has AVX-512; row `r0`, columns below `full` and steps below
/// `k + Q` lie within the panel.
#[target_feature(enable = "avx512f,avx2,fma")]
#[cfg(target_arch = "x86_64")]
unsafe fn add_rows<const Q: usize>(p: &mut Panel<'_>, r0: usize, k: usize, full: usize) {
    use std::arch::x86_64::{_mm512_fmadd_ps, _mm512_loadu_ps, _mm512_set1_ps, _mm512_storeu_ps};
    // SAFETY: the caller bounds every offset (see above).
    unsafe {
        let c = p.c.as_mut_ptr().add(r0 * p.c_row);
        let a = p.a.as_ptr().add(r0 * p.a_row + k * p.a_k);
        let x: [_; Q] = std::array::from_fn(|q| _mm512_set1_ps(*a.add(q * p.a_k)));
        let rows: [*const f32; Q] = std::array::from_fn(|q| p.b.as_ptr().add((k + q) * p.b_k));
        for j in (0..full).step_by(16) {
            let mut acc = _mm512_loadu_ps(c.add(j));
            for q in 0..Q {
                acc = _mm512_fmadd_ps(x[q], _mm512_loadu_ps(rows[q].add(j)), acc);
            }
            _mm512_storeu_ps(c.add(j), acc);
        }
    }
}

/// Rows of B ahead of the k loop that two rows' blocks prefetch: their
/// kilobyte of each row is too short for the hardware prefetchers (2 x
/// 4096 x 4096: 3.2 ms without, 2.65 with).
const PREFETCH_ROWS: usize = 8;

/// Asserts that C's rows to `last_row` and columns below `end`, and the
/// parts of A and B their k steps read, lie within the panel: the vector
/// loops run on raw pointers (A and B are read only when there are k
/// steps; C is loaded and stored regardless).
#[cfg(target_arch = "x86_64")]
fn assert_within(p: &Panel<'_>, last_row: usize, end: usize) {
    assert!(last_row * p.c_row + end <= p.c.len(), "C panel");
    if p.k > 0 {
        assert!(
            last_row * p.a_row + (p.k - 1) * p.a_k < p.a.len(),
            "A panel"
        );
        assert!((p.k - 1) * p.b_k + end <= p.b.len(), "B panel");
    }
}

/// Rows `r0..r0 + R`, the fewer than 16 columns from `from` to the end in
/// one vector whose lanes past the end are masked off (neither read nor
/// written). One column at a time, the last 10 of 250 columns took two
/// thirds of a 256 x 250 x 1024 matmul's time.
#[target_feature(enable = "avx512f,avx2,fma")]
#[cfg(target_arch = "x86_64")]
fn masked_avx512<const R: usize>(p: &mut Panel<'_>, r0: usize, from: usize) {
    use std::arch::x86_64::{
        __m512, _mm512_fmadd_ps, _mm512_mask_storeu_ps, _mm512_maskz_loadu_ps, _mm512_set1_ps,
    };
    let left = p.n - from;
    if left == 0 {
        return;
    }
    assert!(left < 16, "whole vectors go through blocks_avx512");
    let mask = ((1u32 << left) - 1) as u16;
    assert_within(p, r0 + R - 1, p.n);
    let (a, b, c) = (p.a.as_ptr(), p.b.as_ptr(), p.c.as_mut_ptr());
    // SAFETY: `assert_within` bounds every unmasked lane's offset: rows
    // below r0 + R, columns below n, steps below k.
    unsafe {
        let mut acc: [__m512; R] =
            std::array::from_fn(|r| _mm512_maskz_loadu_ps(mask, c.add((r0 + r) * p.c_row + from)));
        let (mut a_k, mut b_k) = (a.add(r0 * p.a_row), b.add(from));
        for _ in 0..p.k {
            let b = _mm512_maskz_loadu_ps(mask, b_k);
            for (r, acc) in acc.iter_mut().enumerate() {
                *acc = _mm512_fmadd_ps(_mm512_set1_ps(*a_k.add(r * p.a_row)), b, *acc);
            }
            a_k = a_k.wrapping_add(p.a_k);
            b_k = b_k.wrapping_add(p.b_k);
        }
        for (r, acc) in acc.iter().enumerate() {
            _mm512_mask_storeu_ps(c.add((r0 + r) * p.c_row + from), mask, *acc);
        }
    }
}

/// Rows `r0..r0 + R`, columns from `from` in blocks of `V` vectors (16
/// columns each) as far as whole blocks go; returns where they end.
/// Written with intrinsics (LLVM leaves a wide array loop scalar). The k
/// loop runs on raw pointers: a bounds check per access there costs about
/// as many instructions as the FMAs, and this loop is limited by how many
/// instructions a cycle the core issues (1024^3 on a 2-core AVX-512 Xeon:
/// 14.2–16.1 ms with checks, see BENCHMARKS.md for without).
#[target_feature(enable = "avx512f,avx2,fma")]
#[cfg(target_arch = "x86_64")]
fn blocks_avx512<const R: usize, const V: usize>(
    p: &mut Panel<'_>,
    r0: usize,
    from: usize,
) -> usize {
    use std::arch::x86_64::{
        __m512, _MM_HINT_T0, _mm_prefetch, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_set1_ps,
        _mm512_storeu_ps,
    };
    let width = 16 * V;
    let full = from + (p.n - from) / width * width;
    if full > from {
        assert_within(p, r0 + R - 1, full);
    }
    let (a, b, c) = (p.a.as_ptr(), p.b.as_ptr(), p.c.as_mut_ptr());
    for j0 in (from..full).step_by(width) {
        // SAFETY: `assert_within` bounds every offset: rows below r0 + R,
        // columns below `full`, steps below k.
        unsafe {
            let mut acc: [[__m512; V]; R] = std::array::from_fn(|r| {
                let row = c.add((r0 + r) * p.c_row + j0);
                std::array::from_fn(|v| _mm512_loadu_ps(row.add(16 * v)))
            });
            let (mut a_k, mut b_k) = (a.add(r0 * p.a_row), b.add(j0));
            for _ in 0..p.k {
                if R == 2 {
                    let ahead = b_k.wrapping_add(PREFETCH_ROWS * p.b_k);
                    for v in 0..V {
                        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(16 * v).cast());
                    }
                }
                let b: [__m512; V] = std::array::from_fn(|v| _mm512_loadu_ps(b_k.add(16 * v)));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let a = _mm512_set1_ps(*a_k.add(r * p.a_row));
                    for v in 0..V {
                        acc[v] = _mm512_fmadd_ps(a, b[v], acc[v]);
                    }
                }
                // Past the last step these point beyond the panel, unread.
                a_k = a_k.wrapping_add(p.a_k);
                b_k = b_k.wrapping_add(p.b_k);
            }
            for (r, acc) in acc.iter().enumerate() {
                let row = c.add((r0 + r) * p.c_row + j0);
                for (v, acc) in acc.iter().enumerate() {
                    _mm512_storeu_ps(row.add(16 * v), *acc);
                }
            }
        }
    }
    full
}

#[target_feature(enable = "avx2,fma")]
#[cfg(target_arch = "x86_64")]
fn update_avx2(p: &mut Panel<'_>) {
    by_rows::<16, true>(p);
}

/// Groups of up to 4 rows, each in register blocks of `L` columns.
/// `FMA`: fuse the multiply-add (only where the CPU has it: `mul_add` is a
/// library call otherwise).
#[inline(always)]
fn by_rows<const L: usize, const FMA: bool>(p: &mut Panel<'_>) {
    for r0 in (0..p.rows).step_by(4) {
        match p.rows - r0 {
            1 => blocks::<1, L, FMA>(p, r0),
            2 => blocks::<2, L, FMA>(p, r0),
            3 => blocks::<3, L, FMA>(p, r0),
            _ => blocks::<4, L, FMA>(p, r0),
        }
    }
}

/// Rows `r0..r0 + R` of the panel.
#[inline(always)]
fn blocks<const R: usize, const L: usize, const FMA: bool>(p: &mut Panel<'_>, r0: usize) {
    let full = p.n / L * L;
    for j0 in (0..full).step_by(L) {
        block::<R, L, FMA>(p, r0, j0);
    }
    tail_columns::<R>(p, r0, full);
}

/// Columns `from..n` of rows `r0..r0 + R`, one at a time.
#[inline(always)]
fn tail_columns<const R: usize>(p: &mut Panel<'_>, r0: usize, from: usize) {
    for j in from..p.n {
        for r in r0..r0 + R {
            let mut acc = p.c[r * p.c_row + j];
            for kk in 0..p.k {
                acc += p.a[r * p.a_row + kk * p.a_k] * p.b[kk * p.b_k + j];
            }
            p.c[r * p.c_row + j] = acc;
        }
    }
}

#[inline(always)]
fn block<const R: usize, const L: usize, const FMA: bool>(p: &mut Panel<'_>, r0: usize, j0: usize) {
    let mut acc = [[0f32; L]; R];
    for (r, row) in acc.iter_mut().enumerate() {
        row.copy_from_slice(&p.c[(r0 + r) * p.c_row + j0..][..L]);
    }
    for kk in 0..p.k {
        let b: &[f32; L] = p.b[kk * p.b_k + j0..][..L].try_into().expect("L elements");
        for (r, row) in acc.iter_mut().enumerate() {
            let a = p.a[(r0 + r) * p.a_row + kk * p.a_k];
            for l in 0..L {
                row[l] = if FMA {
                    a.mul_add(b[l], row[l])
                } else {
                    row[l] + a * b[l]
                };
            }
        }
    }
    for (r, row) in acc.iter().enumerate() {
        p.c[(r0 + r) * p.c_row + j0..][..L].copy_from_slice(row);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_naive_product() {
        for (rows, k, n) in [
            // One or two rows: blocks of 256 or 128 columns, then of 16,
            // then a masked vector.
            (1, 11, 300),
            (2, 9, 300),
            (1, 4, 600),
            (3, 37, 53),
            (5, 9, 7),
            (6, 3, 15),
            (7, 19, 70),
            (8, 5, 64),
            (19, 37, 70),
            (64, 64, 96),
        ] {
            let a: Vec<f32> = (0..rows * k).map(|i| (i % 7) as f32 - 3.0).collect();
            let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 * 0.5).collect();
            let c: Vec<f32> = (0..rows * n).map(|i| i as f32).collect();
            let mut want = c.clone();
            for r in 0..rows {
                for j in 0..n {
                    for kk in 0..k {
                        want[r * n + j] += a[r * k + kk] * b[kk * n + j];
                    }
                }
            }
            // The baseline kernel, and each this CPU can run.
            let mut kernels: Vec<fn(&mut Panel<'_>)> = vec![by_rows::<16, false>, update, |p| {
                in_strips(p, 16, by_rows::<16, false>)
            }];
            #[cfg(target_arch = "x86_64")]
            if matches!(widest(), Simd::Avx512 | Simd::Avx2) {
                // SAFETY: the CPU has AVX2 and FMA.
                kernels.push(|p| unsafe { update_avx2(p) });
            }
            for kernel in kernels {
                let mut c = c.clone();
                kernel(&mut Panel {
                    c: &mut c,
                    c_row: n,
                    a: &a,
                    a_row: k,
                    a_k: 1,
                    b: &b,
                    b_k: n,
                    rows,
                    k,
                    n,
                });
                for (g, w) in c.iter().zip(&want) {
                    assert!((g - w).abs() <= 1e-3 * w.abs().max(1.0), "{g} vs {w}");
                }
            }
        }
    }
}
