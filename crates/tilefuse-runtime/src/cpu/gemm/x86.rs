//! The micro-kernel in AVX-512 and in AVX2 + FMA: one generic kernel over
//! a vector extension's f32 vectors ([`Lanes`]), inlined whole into an
//! entry point per extension that enables its target features, so that
//! every intrinsic compiles to the extension's instructions.
//!
//! Register blocks: with AVX-512, 6 rows × 64 columns, 24 of the 32 vector
//! registers accumulating, so that each step's 4 loads of B and 6
//! broadcasts of A feed 24 FMAs (8 × 32 fed 16 FMAs with 10: 1024^3 on one
//! core of a 2-core AVX-512 Xeon, 64 rows a call, B in strips: 121 GFLOP/s
//! against 108, and 105 for 8 × 32 on B in place, 8 rows a call; numpy's
//! OpenBLAS on that core: 145). With AVX2, 6 rows × 16 columns, 12 of the
//! 16 registers accumulating (BLIS's Haswell shape). The auto-vectorized
//! 4 × 16 it replaced left 8 accumulators, just what two FMA units of
//! latency 4 keep busy: 1024^3 took 36.9 ms on a 2-core Zen 3, 21.8 so
//! (numpy 15.3; `benches/run.py`, case matmul).

#![allow(unsafe_code)] // raw-pointer k loops behind `assert_within`

use std::arch::x86_64::{
    __m256, __m512, _MM_HINT_T0, _mm_prefetch, _mm256_cmpgt_epi32, _mm256_fmadd_ps,
    _mm256_loadu_ps, _mm256_maskload_ps, _mm256_maskstore_ps, _mm256_set1_epi32, _mm256_set1_ps,
    _mm256_setr_epi32, _mm256_storeu_ps, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_mask_storeu_ps,
    _mm512_maskz_loadu_ps, _mm512_set1_ps, _mm512_storeu_ps,
};

use super::{GROUP, MAX_ROWS, Panel};

/// One extension's f32 vectors. Every function is unsafe to call: the
/// caller's target features must include the extension's, and pointers
/// must be valid for the lanes read or written.
trait Lanes {
    type V: Copy;
    /// Lanes a vector.
    const N: usize;
    unsafe fn load(at: *const f32) -> Self::V;
    unsafe fn store(at: *mut f32, v: Self::V);
    unsafe fn splat(x: f32) -> Self::V;
    /// `a * b + c`, fused.
    unsafe fn fmadd(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// The first `n` (< N) lanes from `at`, zeros after; the rest unread.
    unsafe fn load_first(at: *const f32, n: usize) -> Self::V;
    /// The first `n` (< N) lanes of `v` to `at`; the rest untouched.
    unsafe fn store_first(at: *mut f32, n: usize, v: Self::V);
}

struct Avx512;

impl Lanes for Avx512 {
    type V = __m512;
    const N: usize = 16;
    #[inline(always)]
    unsafe fn load(at: *const f32) -> __m512 {
        unsafe { _mm512_loadu_ps(at) }
    }
    #[inline(always)]
    unsafe fn store(at: *mut f32, v: __m512) {
        unsafe { _mm512_storeu_ps(at, v) }
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m512 {
        unsafe { _mm512_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn fmadd(a: __m512, b: __m512, c: __m512) -> __m512 {
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn load_first(at: *const f32, n: usize) -> __m512 {
        unsafe { _mm512_maskz_loadu_ps(((1u32 << n) - 1) as u16, at) }
    }
    #[inline(always)]
    unsafe fn store_first(at: *mut f32, n: usize, v: __m512) {
        unsafe { _mm512_mask_storeu_ps(at, ((1u32 << n) - 1) as u16, v) }
    }
}

struct Avx2;

impl Avx2 {
    /// All bits set in the first `n` lanes (`maskload`'s mask).
    #[inline(always)]
    unsafe fn first(n: usize) -> std::arch::x86_64::__m256i {
        unsafe {
            _mm256_cmpgt_epi32(
                _mm256_set1_epi32(n as i32),
                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
            )
        }
    }
}

impl Lanes for Avx2 {
    type V = __m256;
    const N: usize = 8;
    #[inline(always)]
    unsafe fn load(at: *const f32) -> __m256 {
        unsafe { _mm256_loadu_ps(at) }
    }
    #[inline(always)]
    unsafe fn store(at: *mut f32, v: __m256) {
        unsafe { _mm256_storeu_ps(at, v) }
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m256 {
        unsafe { _mm256_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn fmadd(a: __m256, b: __m256, c: __m256) -> __m256 {
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn load_first(at: *const f32, n: usize) -> __m256 {
        unsafe { _mm256_maskload_ps(at, Self::first(n)) }
    }
    #[inline(always)]
    unsafe fn store_first(at: *mut f32, n: usize, v: __m256) {
        unsafe { _mm256_maskstore_ps(at, Self::first(n), v) }
    }
}

/// The update with AVX-512: two rows in blocks of 8 vectors (128
/// columns), more rows in blocks of 4.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) fn update_avx512(p: &mut Panel<'_>) {
    by_groups::<Avx512, 8, 4>(p);
}

/// The update with AVX2 + FMA: two rows in blocks of 4 vectors (32
/// columns), more rows in blocks of 2.
#[target_feature(enable = "avx2,fma")]
pub(super) fn update_avx2(p: &mut Panel<'_>) {
    by_groups::<Avx2, 4, 2>(p);
}

/// The panel in groups of up to 6 rows: two rows take `PAIR` vectors a
/// block, more take `WIDE`. A few rows on more of B than L2 holds stream
/// B instead, each row of it read once (see [`stream`]): in register
/// blocks, a 6-row group read B's rows a strip at a time, from memory, and
/// the rest again. With AVX2 on 2 Zen 3 cores: 4 x 4096 x 4096 0.37x the
/// time, 5 x 2048 x 2048 0.45x, 8 x 1024 x 1024 0.72x, 7 x 8192 x 1024
/// 0.60x (1024-column panels, in cache blocks before); panels of 256 KB of
/// B took 1.16-1.19x so (6 x 512 x 512, 8 x 512 x 2048).
#[inline(always)]
fn by_groups<L: Lanes, const PAIR: usize, const WIDE: usize>(p: &mut Panel<'_>) {
    // Wider than a block: not one of `blocked`'s strips, whose B is packed.
    let in_place = p.n > L::N * WIDE;
    if in_place && (3..=MAX_ROWS).contains(&p.rows) && 4 * p.k * p.n >= STREAM_BYTES {
        let full = stream::<L>(p, 0, p.rows);
        for r in 0..p.rows {
            masked::<L, 1>(p, r, full);
        }
        return;
    }
    for r0 in (0..p.rows).step_by(GROUP) {
        match p.rows - r0 {
            1 => rows::<L, 1, PAIR, WIDE>(p, r0),
            2 => rows::<L, 2, PAIR, WIDE>(p, r0),
            3 => rows::<L, 3, PAIR, WIDE>(p, r0),
            4 => rows::<L, 4, PAIR, WIDE>(p, r0),
            5 => rows::<L, 5, PAIR, WIDE>(p, r0),
            _ => rows::<L, 6, PAIR, WIDE>(p, r0),
        }
    }
}

/// Rows `r0..r0 + R`: blocks of `WIDE` vectors (`PAIR` for two rows),
/// then of one, then the last columns in one masked vector; one row
/// streams B instead (see [`stream`]). Two rows take B's rows half a
/// kilobyte at a time, not 256 bytes from rows a row of B apart.
#[inline(always)]
fn rows<L: Lanes, const R: usize, const PAIR: usize, const WIDE: usize>(
    p: &mut Panel<'_>,
    r0: usize,
) {
    let widest = match R {
        1 => stream::<L>(p, r0, 1),
        2 => blocks::<L, R, PAIR, false>(p, r0, 0),
        _ => 0,
    };
    // A group packed k-major (or A so laid out).
    let wide = if R == GROUP && (p.a_row, p.a_k) == (1, GROUP) {
        blocks::<L, R, WIDE, true>(p, r0, widest)
    } else {
        blocks::<L, R, WIDE, false>(p, r0, widest)
    };
    let narrow = blocks::<L, R, 1, false>(p, r0, wide);
    masked::<L, R>(p, r0, narrow);
}

/// Rows `r0..r0 + rows` (a vector-matrix product where one): four rows of
/// B at a time added into the whole rows of C, each read from end to end,
/// so that the hardware prefetchers see a few long streams; the four rows
/// of B stay in L1 across the rows of C. Blocks of 256 columns, k inner,
/// read a kilobyte from each row of B in turn: 1 x 4096 x 4096 on one core
/// ran at 14 GB/s so, at OpenBLAS's 26 (its gemv reads B this way) in whole
/// rows. Returns where the whole vectors end.
#[inline(always)]
fn stream<L: Lanes>(p: &mut Panel<'_>, r0: usize, rows: usize) -> usize {
    let full = p.n / L::N * L::N;
    if full == 0 {
        return 0;
    }
    assert_within(p, r0 + rows - 1, full);
    let quads = p.k / 4 * 4;
    // SAFETY: `assert_within` bounds every offset: rows below r0 + rows,
    // columns below `full`, steps below k.
    unsafe {
        // Plain loops: a closure would not take the caller's target features.
        for k in (0..quads).step_by(4) {
            for r in r0..r0 + rows {
                add_rows::<L, 4>(p, r, k, full);
            }
        }
        for k in quads..p.k {
            for r in r0..r0 + rows {
                add_rows::<L, 1>(p, r, k, full);
            }
        }
    }
    full
}

/// `C[r0, ..full] += sum over q < Q of A[r0, k + q] * B[k + q, ..full]`.
///
/// # Safety
/// The caller enables `L`'s extension; row `r0`, columns below `full` and
/// steps below `k + Q` lie within the panel.
#[inline(always)]
unsafe fn add_rows<L: Lanes, const Q: usize>(p: &mut Panel<'_>, r0: usize, k: usize, full: usize) {
    // SAFETY: the caller bounds every offset (see above).
    unsafe {
        let c = p.c.as_mut_ptr().add(r0 * p.c_row);
        let a = p.a.as_ptr().add(r0 * p.a_row + k * p.a_k);
        let x: [L::V; Q] = std::array::from_fn(|q| L::splat(*a.add(q * p.a_k)));
        let rows: [*const f32; Q] = std::array::from_fn(|q| p.b.as_ptr().add((k + q) * p.b_k));
        for j in (0..full).step_by(L::N) {
            let mut acc = L::load(c.add(j));
            for q in 0..Q {
                acc = L::fmadd(x[q], L::load(rows[q].add(j)), acc);
            }
            L::store(c.add(j), acc);
        }
    }
}

/// Rows of B ahead of the k loop that two rows' blocks prefetch: their
/// kilobyte of each row is too short for the hardware prefetchers (2 x
/// 4096 x 4096: 3.2 ms without, 2.65 with).
const PREFETCH_ROWS: usize = 8;
/// The bytes of B from which a panel of a few rows streams it (see
/// [`by_groups`]): an L2's worth.
const STREAM_BYTES: usize = 512 << 10;

/// Asserts that C's rows to `last_row` and columns below `end`, and the
/// parts of A and B their k steps read, lie within the panel: the vector
/// loops run on raw pointers (A and B are read only when there are k
/// steps; C is loaded and stored regardless).
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

/// Rows `r0..r0 + R`, the fewer than `L::N` columns from `from` to the end
/// in one vector whose lanes past the end are masked off (neither read nor
/// written). One column at a time, the last 10 of 250 columns took two
/// thirds of a 256 x 250 x 1024 matmul's time.
#[inline(always)]
fn masked<L: Lanes, const R: usize>(p: &mut Panel<'_>, r0: usize, from: usize) {
    let left = p.n - from;
    if left == 0 {
        return;
    }
    assert!(left < L::N, "whole vectors go through blocks");
    assert_within(p, r0 + R - 1, p.n);
    let (a, b, c) = (p.a.as_ptr(), p.b.as_ptr(), p.c.as_mut_ptr());
    // SAFETY: `assert_within` bounds every unmasked lane's offset: rows
    // below r0 + R, columns below n, steps below k.
    unsafe {
        let mut acc: [L::V; R] =
            std::array::from_fn(|r| L::load_first(c.add((r0 + r) * p.c_row + from), left));
        let (mut a_k, mut b_k) = (a.add(r0 * p.a_row), b.add(from));
        for _ in 0..p.k {
            let b = L::load_first(b_k, left);
            for (r, acc) in acc.iter_mut().enumerate() {
                *acc = L::fmadd(L::splat(*a_k.add(r * p.a_row)), b, *acc);
            }
            a_k = a_k.wrapping_add(p.a_k);
            b_k = b_k.wrapping_add(p.b_k);
        }
        for (r, acc) in acc.iter().enumerate() {
            L::store_first(c.add((r0 + r) * p.c_row + from), left, *acc);
        }
    }
}

/// Rows `r0..r0 + R`, columns from `from` in blocks of `V` vectors as far
/// as whole blocks go; returns where they end. `PACKED`: A is a packed
/// group (`blocked::pack_a`), its strides known here. Written with intrinsics
/// (LLVM leaves a wide array loop scalar). The k loop runs on raw
/// pointers: a bounds check per access there costs about as many
/// instructions as the FMAs, and this loop is limited by how many
/// instructions a cycle the core issues (1024^3 on a 2-core AVX-512 Xeon:
/// 14.2–16.1 ms with checks; `benches/run.py`, case matmul, without).
#[inline(always)]
fn blocks<L: Lanes, const R: usize, const V: usize, const PACKED: bool>(
    p: &mut Panel<'_>,
    r0: usize,
    from: usize,
) -> usize {
    let width = L::N * V;
    let full = from + (p.n - from) / width * width;
    if full > from {
        assert_within(p, r0 + R - 1, full);
    }
    let (a, b, c) = (p.a.as_ptr(), p.b.as_ptr(), p.c.as_mut_ptr());
    let (a_row, a_k) = if PACKED { (1, GROUP) } else { (p.a_row, p.a_k) };
    for j0 in (from..full).step_by(width) {
        // SAFETY: `assert_within` bounds every offset: rows below r0 + R,
        // columns below `full`, steps below k.
        unsafe {
            let mut acc: [[L::V; V]; R] = std::array::from_fn(|r| {
                let row = c.add((r0 + r) * p.c_row + j0);
                std::array::from_fn(|v| L::load(row.add(L::N * v)))
            });
            let rows: [*const f32; R] = std::array::from_fn(|r| a.add((r0 + r) * a_row));
            // Packed, each step's values lie at fixed offsets from the
            // first row's. In place, LLVM computes the rows' addresses from
            // each other, a chain of adds one long per row each step, as
            // long as the FMAs it feeds (a 6 x 16 block in L1 on a Zen 3
            // core: 66 % of the FMA peak, 81 % with the rows kept apart).
            let a_rows = if PACKED {
                rows
            } else {
                std::hint::black_box(rows)
            };
            let (mut at, mut b_k) = (0, b.add(j0));
            for _ in 0..p.k {
                if R == 2 {
                    let ahead = b_k.wrapping_add(PREFETCH_ROWS * p.b_k);
                    // One prefetch a cache line of the block's columns.
                    for line in (0..width).step_by(16) {
                        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line).cast());
                    }
                }
                let b: [L::V; V] = std::array::from_fn(|v| L::load(b_k.add(L::N * v)));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let a = L::splat(*a_rows[r].add(at));
                    for v in 0..V {
                        acc[v] = L::fmadd(a, b[v], acc[v]);
                    }
                }
                // Past the last step this points beyond the panel, unread.
                b_k = b_k.wrapping_add(p.b_k);
                at += a_k;
            }
            for (r, acc) in acc.iter().enumerate() {
                let row = c.add((r0 + r) * p.c_row + j0);
                for (v, acc) in acc.iter().enumerate() {
                    L::store(row.add(L::N * v), *acc);
                }
            }
        }
    }
    full
}
