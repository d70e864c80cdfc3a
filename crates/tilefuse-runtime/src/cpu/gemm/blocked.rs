//! A panel of many rows in cache blocks, BLIS's loops: B packed into
//! strips of the register block's width, A packed in groups of its rows,
//! each block of A's rows run over every strip before the next. Read in
//! place, B's rows lie a row of the matrix apart (4 KB for 1024 columns,
//! the stride at which every row falls into the same L1 set) and A's rows
//! too, so a strip of B left L1 between row blocks and each step's values
//! of A came from rows apart. 1024^3 on one Zen 3 core (AVX2), best of 30
//! interleaved runs: 66 % of the FMA peak with each strip copied in turn
//! and A in place, 84 % so.

use super::{GROUP, Panel};
use crate::cpu::memory::prefetch;

/// A's rows in a block ([`in_blocks`]): 96 rows of k 512 (AVX2's k step)
/// are 192 KB of packed A, which stays in L2 across the strips (72-144
/// rows ran alike; 256 took 60 % of the peak against 69 %).
const BLOCK_ROWS: usize = 16 * GROUP;
/// The fewest strips over which a block's rows of A are packed: the copy
/// costs as much as a few strips' FMAs per value. With AVX2 on 2 Zen 3
/// cores, A in place against packed at 8 strips (128 columns): 128^3,
/// 256^3, 300 x 129 x 300 and 1024 x 128 x 1024 took 0.92-0.94x the time;
/// at 4 strips, 2048 x 64 x 2048 0.83x; at 16 and 32 alike. AVX-512's
/// 64-column strips count the same: on a 2-core Emerald Rapids, A packed
/// at 4 strips took 1024^3 (tiles of 8 strips) in 1.07x the time (one
/// paired run of 20 rounds of `benches/ab_builds.py`).
const PACK_A_STRIPS: usize = 16;
/// The most bytes of packed B at once: the panel's columns are taken in
/// chunks of this much (a 4096-column panel of k 512 would be 8 MB).
const CHUNK_BYTES: usize = 1 << 20;

thread_local! {
    /// B packed in strips ([`pack_b`]).
    static STRIPS: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
    /// A packed in groups ([`pack_a`]).
    static GROUPS: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `blocks` over the panel's whole strips of `W` columns, chunk by
/// chunk of columns, each chunk's blocks of rows in turn, each block's
/// groups of rows strip by strip; the rows past the last whole group (all
/// rows, in a chunk of fewer than [`PACK_A_STRIPS`] strips) run with A in
/// place, and the last columns (fewer than `W`) with B in place.
pub(super) fn in_blocks<const W: usize>(p: &mut Panel<'_>, blocks: fn(&mut Panel<'_>)) {
    if p.k == 0 {
        return; // nothing to add
    }
    let full = p.n / W * W;
    let chunk = (CHUNK_BYTES / (4 * W * p.k)).max(1) * W;
    let (b, b_k, rows) = (p.b, p.b_k, p.rows);
    STRIPS.with_borrow_mut(|strips| {
        GROUPS.with_borrow_mut(|groups| {
            for j0 in (0..full).step_by(chunk) {
                let mut columns = p.columns(j0, chunk.min(full - j0), &b[j0..], b_k);
                pack_b::<W>(&columns, strips);
                for r0 in (0..rows).step_by(BLOCK_ROWS) {
                    let mut block = columns.rows_at(r0, BLOCK_ROWS.min(rows - r0));
                    if block.n / W >= PACK_A_STRIPS {
                        pack_a(&block, groups);
                    } else {
                        groups.clear();
                    }
                    strip_by_strip::<W>(&mut block, strips, groups, blocks);
                }
            }
        });
    });
    if full < p.n {
        blocks(&mut p.columns(full, p.n - full, &b[full..], b_k));
    }
}

/// The block's rows over each strip of packed B: its whole groups from
/// packed A, C's rows of the next group prefetched while one runs (they
/// come from L3 at each strip; without it 68 % of the peak, 84 % with),
/// then the rows past them with A in place.
fn strip_by_strip<const W: usize>(
    block: &mut Panel<'_>,
    strips: &[f32],
    groups: &[f32],
    blocks: fn(&mut Panel<'_>),
) {
    let k = block.k;
    let grouped = groups.len() / k;
    for (s, strip) in strips.chunks_exact(k * W).enumerate() {
        let j0 = s * W;
        for (g, a) in groups.chunks_exact(GROUP * k).enumerate() {
            prefetch_c::<W>(block, (g + 1) * GROUP, j0);
            blocks(&mut Panel {
                a,
                a_row: 1,
                a_k: GROUP,
                ..block.rows_at(g * GROUP, GROUP).columns(j0, W, strip, W)
            });
        }
        if grouped < block.rows {
            let rest = block.rows - grouped;
            blocks(&mut block.rows_at(grouped, rest).columns(j0, W, strip, W));
        }
    }
}

/// The panel's columns (a whole number of `W`) strip after strip, each
/// strip k-major: B read row after row, each row once, end to end.
fn pack_b<const W: usize>(p: &Panel<'_>, strips: &mut Vec<f32>) {
    let k = p.k;
    strips.resize(k * p.n, 0.0);
    for kk in 0..k {
        let row = &p.b[kk * p.b_k..][..p.n];
        for (s, from) in row.chunks_exact(W).enumerate() {
            let to: &mut [f32; W] = (&mut strips[(s * k + kk) * W..][..W]).try_into().unwrap();
            *to = from.try_into().unwrap();
        }
    }
}

/// The panel's whole groups of [`GROUP`] rows of A, each group k-major:
/// its `A[r, kk]` at `kk * GROUP + r`, so that the register block reads
/// each step's values at fixed offsets from one pointer.
fn pack_a(p: &Panel<'_>, groups: &mut Vec<f32>) {
    let (k, grouped) = (p.k, p.rows / GROUP * GROUP);
    groups.resize(grouped * k, 0.0);
    for (g, group) in groups.chunks_exact_mut(GROUP * k).enumerate() {
        let rows: [&[f32]; GROUP] = std::array::from_fn(|r| {
            let first = (g * GROUP + r) * p.a_row;
            &p.a[first..=first + (k - 1) * p.a_k]
        });
        if p.a_k == 1 {
            for (kk, step) in group.chunks_exact_mut(GROUP).enumerate() {
                let step: &mut [f32; GROUP] = step.try_into().unwrap();
                *step = std::array::from_fn(|r| rows[r][kk]);
            }
        } else {
            for (kk, step) in group.chunks_exact_mut(GROUP).enumerate() {
                for (x, row) in step.iter_mut().zip(rows) {
                    *x = row[kk * p.a_k];
                }
            }
        }
    }
}

/// Prefetches columns `j0..j0 + W` of C's rows `r0..r0 + GROUP` that the
/// panel has.
fn prefetch_c<const W: usize>(p: &Panel<'_>, r0: usize, j0: usize) {
    for r in r0..(r0 + GROUP).min(p.rows) {
        for j in (j0..j0 + W).step_by(16) {
            prefetch(p.c[r * p.c_row + j..].as_ptr().cast());
        }
    }
}
