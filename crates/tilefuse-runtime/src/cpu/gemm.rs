//! A register-blocked rank-k update, the CPU executor's matmul
//! micro-kernel: `C[r, j] += sum_k A[r, k] * B[k, j]` for a few rows `r`
//! and a strip of columns `j`, keeping a block of `C` (up to 4 rows × 16
//! columns: eight AVX registers) in registers across the whole `k` loop,
//! so that each step loads one row of B and broadcasts one value of A per
//! row. The program recognizes the loop nest it replaces (see
//! `program.rs`, `Step::Gemm`).

#![allow(unsafe_code)] // AVX2 + FMA dispatch, as in simd_math

/// Columns per register block.
const LANES: usize = 16;

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

/// Runs the update over the whole panel (`rows` ≤ 4).
pub fn update(p: &mut Panel<'_>) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports the features the function was compiled for.
        unsafe { update_fma(p) };
        return;
    }
    by_rows::<false>(p);
}

#[target_feature(enable = "avx2,fma")]
#[cfg(target_arch = "x86_64")]
fn update_fma(p: &mut Panel<'_>) {
    by_rows::<true>(p);
}

/// `FMA`: fuse the multiply-add (only where the CPU has it: `mul_add` is a
/// library call otherwise).
#[inline(always)]
fn by_rows<const FMA: bool>(p: &mut Panel<'_>) {
    match p.rows {
        1 => blocks::<1, FMA>(p),
        2 => blocks::<2, FMA>(p),
        3 => blocks::<3, FMA>(p),
        _ => blocks::<4, FMA>(p),
    }
}

#[inline(always)]
fn blocks<const R: usize, const FMA: bool>(p: &mut Panel<'_>) {
    let full = p.n / LANES * LANES;
    for j0 in (0..full).step_by(LANES) {
        block::<R, FMA>(p, j0);
    }
    // The last columns, one at a time.
    for j in full..p.n {
        for r in 0..R {
            let mut acc = p.c[r * p.c_row + j];
            for kk in 0..p.k {
                acc += p.a[r * p.a_row + kk * p.a_k] * p.b[kk * p.b_k + j];
            }
            p.c[r * p.c_row + j] = acc;
        }
    }
}

#[inline(always)]
fn block<const R: usize, const FMA: bool>(p: &mut Panel<'_>, j0: usize) {
    let mut acc = [[0f32; LANES]; R];
    for (r, row) in acc.iter_mut().enumerate() {
        row.copy_from_slice(&p.c[r * p.c_row + j0..][..LANES]);
    }
    for kk in 0..p.k {
        let b: &[f32; LANES] = p.b[kk * p.b_k + j0..][..LANES]
            .try_into()
            .expect("LANES elements");
        for (r, row) in acc.iter_mut().enumerate() {
            let a = p.a[r * p.a_row + kk * p.a_k];
            for l in 0..LANES {
                row[l] = if FMA {
                    a.mul_add(b[l], row[l])
                } else {
                    row[l] + a * b[l]
                };
            }
        }
    }
    for (r, row) in acc.iter().enumerate() {
        p.c[r * p.c_row + j0..][..LANES].copy_from_slice(row);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_naive_product() {
        let (rows, k, n) = (3, 37, 53);
        let a: Vec<f32> = (0..rows * k).map(|i| (i % 7) as f32 - 3.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 * 0.5).collect();
        let mut c: Vec<f32> = (0..rows * n).map(|i| i as f32).collect();
        let mut want = c.clone();
        for r in 0..rows {
            for j in 0..n {
                for kk in 0..k {
                    want[r * n + j] += a[r * k + kk] * b[kk * n + j];
                }
            }
        }
        update(&mut Panel {
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
