//! A micro-kernel call (`Step::Gemm`) as the interpreter runs it: the
//! call's extents cut short by its guards, its operands read where they
//! lie (f32) or widened a call at a time (halves), B packed into rows
//! where its columns are apart (`pack.rs`), then `gemm::update`.

#![allow(unsafe_code)] // buffer views, under the contract of `memory.rs`

use std::cell::RefCell;

use tilefuse_sched::ir::Index;

use super::code::{Dim, GemmCode};
use super::ctx::Ctx;
use super::loop_index::loop_value;

thread_local! {
    /// Half operands of a micro-kernel call widened to f32 (A, B).
    static WIDENED: RefCell<[Vec<f32>; 2]> = const { RefCell::new([Vec::new(), Vec::new()]) };
}

impl Ctx<'_> {
    pub(super) fn gemm(&self, g: &GemmCode, env: &mut [i64]) {
        for &v in &g.loops {
            env[v] = 0;
        }
        let value = |ix: &Index| ix.eval(&|v| loop_value(env, v));
        let at = |ix: &Index| value(ix) as usize;
        let (mut k, mut rows, mut n) = (g.k, g.rows, g.lanes);
        for cut in &g.cuts {
            let count = match cut.dim {
                Dim::K => &mut k,
                Dim::Rows => &mut rows,
                Dim::Lanes => &mut n,
                Dim::Whole if value(&cut.start) < cut.bound => continue,
                Dim::Whole => return,
            };
            *count = (*count).min(cut.bound - value(&cut.start));
        }
        if k <= 0 || rows <= 0 || n <= 0 {
            return;
        }
        let (rows, k, n) = (rows as usize, k as usize, n as usize);
        let (c_row, a_row, a_k, b_k) = (
            g.c.per_row as usize,
            g.a.per_row as usize,
            g.a.per_k as usize,
            g.b.per_k as usize,
        );
        let span = |first: usize, strides: &[(usize, usize)]| {
            first + strides.iter().map(|&(s, n)| s * (n - 1)).sum::<usize>()
        };
        let c = unsafe {
            self.buffers[g.c.buffer].slice_mut::<f32>(at(&g.c.offset), span(n, &[(c_row, rows)]))
        };
        let b_lane = g.b.per_lane as usize;
        WIDENED.with_borrow_mut(|[wide_a, wide_b]| {
            let a_at = [(a_row, rows), (a_k, k)];
            let (a, [a_row, a_k]) = self.f32_matrix(g.a.buffer, at(&g.a.offset), a_at, wide_a);
            let b_at = [(b_k, k), (b_lane, n)];
            let (b, [b_k, b_lane]) = self.f32_matrix(g.b.buffer, at(&g.b.offset), b_at, wide_b);
            super::pack::with_rows_of_b(b, b_k, b_lane, k, n, |b, b_k| {
                super::gemm::update(&mut super::gemm::Panel {
                    c,
                    c_row,
                    a,
                    a_row,
                    a_k,
                    b,
                    b_k,
                    rows,
                    k,
                    n,
                });
            });
        });
    }

    /// The matrix of buffer `i` whose element `(r, c)` lies at `start +
    /// r * at[0].0 + c * at[1].0` (`at[0].1` rows, `at[1].1` columns), as
    /// f32, with its strides: an f32 buffer in place; halves widened into
    /// `scratch`, each run along a stride of 1 converted at once (the
    /// micro-kernel's reads are a call's `rows x k` of A and `k x n` of B,
    /// against its `rows x n x k` multiply-adds).
    fn f32_matrix<'s>(
        &'s self,
        i: usize,
        start: usize,
        at: [(usize, usize); 2],
        scratch: &'s mut Vec<f32>,
    ) -> (&'s [f32], [usize; 2]) {
        let buf = &self.buffers[i];
        if !buf.dtype.is_half() {
            let span = 1 + at.iter().map(|&(s, n)| s * (n - 1)).sum::<usize>();
            // SAFETY: the kernel's loads of A and B read these elements, no
            // block of the nest writes them (`gemm_match`).
            return (unsafe { buf.slice::<f32>(start, span) }, at.map(|x| x.0));
        }
        let inner = usize::from(!(at[0].0 == 1 && at[1].0 != 1));
        let ((outer_stride, outer_n), (inner_stride, inner_n)) = (at[1 - inner], at[inner]);
        scratch.clear();
        for o in 0..outer_n {
            // SAFETY: as above.
            unsafe { buf.gather_f32(start + o * outer_stride, inner_stride, inner_n, scratch) };
        }
        let mut strides = [inner_n; 2];
        strides[inner] = 1;
        (scratch, strides)
    }
}
