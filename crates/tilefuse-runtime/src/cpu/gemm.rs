//! A register-blocked rank-k update, the CPU executor's matmul
//! micro-kernel: `C[r, j] += sum_k A[r, k] * B[k, j]` for a few rows `r`
//! and a strip of columns `j`, keeping a block of `C` (see [`update`]) in
//! registers across the whole `k` loop,
//! so that each step loads one row of B and broadcasts one value of A per
//! row. The program recognizes the loop nest it replaces (see
//! `program.rs`, `Step::Gemm`).

#![allow(unsafe_code)] // calls into the AVX2 and AVX-512 entry points (`x86`)

use super::simd_math::{Simd, widest};

mod blocked;
#[cfg(target_arch = "x86_64")]
mod x86;

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

/// Runs the update over the whole panel: in register blocks of up to 6
/// rows × 64 columns with AVX-512, 6 × 16 with AVX2 (see `x86`), 4 × 16
/// without either, so that the accumulators, a row of B and a broadcast
/// value of A stay in registers. A panel of more rows than one block runs
/// in cache blocks (see `blocked`).
pub fn update(p: &mut Panel<'_>) {
    match widest() {
        // SAFETY: the CPU supports the features the function was compiled for.
        #[cfg(target_arch = "x86_64")]
        Simd::Avx512 => by_width::<64>(p, |p| unsafe { x86::update_avx512(p) }),
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Simd::Avx2 => by_width::<16>(p, |p| unsafe { x86::update_avx2(p) }),
        _ => by_width::<16>(p, by_rows::<16>),
    }
}

/// `blocks` on the panel, in cache blocks with B in strips of `W` columns
/// where it has more rows than one register block and a whole strip.
fn by_width<const W: usize>(p: &mut Panel<'_>, blocks: fn(&mut Panel<'_>)) {
    if p.rows > MAX_ROWS && p.n >= W {
        blocked::in_blocks::<W>(p, blocks);
    } else {
        blocks(p);
    }
}

/// Rows of A a packed group holds (see `blocked`): the AVX2 and AVX-512
/// register blocks' rows.
const GROUP: usize = 6;

impl Panel<'_> {
    /// Rows `r0..r0 + rows`, every column.
    fn rows_at(&mut self, r0: usize, rows: usize) -> Panel<'_> {
        Panel {
            c: &mut self.c[r0 * self.c_row..],
            a: &self.a[r0 * self.a_row..],
            rows,
            ..*self
        }
    }

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

/// Groups of up to 4 rows, each in register blocks of `L` columns: the
/// portable kernel, for CPUs without AVX2 and FMA (unfused: `mul_add` is a
/// library call there).
fn by_rows<const L: usize>(p: &mut Panel<'_>) {
    for r0 in (0..p.rows).step_by(4) {
        match p.rows - r0 {
            1 => blocks::<1, L>(p, r0),
            2 => blocks::<2, L>(p, r0),
            3 => blocks::<3, L>(p, r0),
            _ => blocks::<4, L>(p, r0),
        }
    }
}

/// Rows `r0..r0 + R` of the panel.
#[inline(always)]
fn blocks<const R: usize, const L: usize>(p: &mut Panel<'_>, r0: usize) {
    let full = p.n / L * L;
    for j0 in (0..full).step_by(L) {
        block::<R, L>(p, r0, j0);
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
fn block<const R: usize, const L: usize>(p: &mut Panel<'_>, r0: usize, j0: usize) {
    let mut acc = [[0f32; L]; R];
    for (r, row) in acc.iter_mut().enumerate() {
        row.copy_from_slice(&p.c[(r0 + r) * p.c_row + j0..][..L]);
    }
    for kk in 0..p.k {
        let b: &[f32; L] = p.b[kk * p.b_k + j0..][..L].try_into().expect("L elements");
        for (r, row) in acc.iter_mut().enumerate() {
            let a = p.a[(r0 + r) * p.a_row + kk * p.a_k];
            for l in 0..L {
                row[l] += a * b[l];
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
            // A few rows on more than `x86::STREAM_BYTES` of B: streamed,
            // then a masked vector a row.
            (5, 301, 500),
            (8, 256, 530),
            // Cache blocks (`blocked`): A packed over 18 strips, 4 rows
            // after the groups, 12 columns after the strips.
            (100, 40, 300),
            // Blocks of 96 rows; chunks of 432 columns (packed A) and 64
            // (A in place); 4 columns after.
            (200, 600, 500),
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
            let mut kernels: Vec<fn(&mut Panel<'_>)> = vec![by_rows::<16>, update, |p| {
                blocked::in_blocks::<16>(p, by_rows::<16>)
            }];
            #[cfg(target_arch = "x86_64")]
            if matches!(widest(), Simd::Avx512 | Simd::Avx2) {
                // SAFETY: the CPU has AVX2 and FMA.
                kernels.push(|p| unsafe { x86::update_avx2(p) });
            }
            // A row-major, and transposed (A's rows one value apart).
            let a_t: Vec<f32> = (0..rows * k).map(|i| a[i % rows * k + i / rows]).collect();
            let layouts = [(&a, k, 1), (&a_t, 1, rows)];
            for (kernel, (a, a_row, a_k)) in kernels.iter().flat_map(|f| layouts.map(|l| (f, l))) {
                let mut c = c.clone();
                kernel(&mut Panel {
                    c: &mut c,
                    c_row: n,
                    a,
                    a_row,
                    a_k,
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
