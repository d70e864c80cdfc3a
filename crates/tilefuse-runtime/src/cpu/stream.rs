//! Stores that stream past the caches. A plain store first reads its
//! cache line from memory (the core must own the whole line before it
//! writes part of it), so a kernel writing a large output moves its bytes
//! twice; a non-temporal store writes whole lines without reading them.
//! Only outputs too large to stay cached for whoever reads them next
//! stream, and only those the kernel itself never reads back: a streamed
//! line leaves the caches.
#![allow(unsafe_code)] // the intrinsics, behind the alignment they need

use tilefuse_sched::ir::{BufferId, Kernel, Role};

/// Elements an output needs to stream: 32 MB of f32, more than the
/// caches keep for whoever reads it next. A C loop scaling rows of 4096
/// on this VM's two cores (Emerald Rapids), streamed against plain
/// stores: 0.55x the time at 2^24 elements, 0.69x at 2^23 + 2^21, 0.96x
/// at 2^23, alike below. The kernels here (`benches/ab_builds.py`, 2
/// threads, 4096²): a softmax 0.88-0.95x, an RMS norm 0.83-0.88x,
/// `relu(x + b)` 0.70-0.74x, a layer norm 0.98-1.06x; followed by numpy's
/// sum of the output, a softmax still 0.94-0.95x.
const MIN_ELEMENTS: u64 = 1 << 23;

/// Whether a tape storing `buffer` lane by lane streams its stores: a
/// large output that no block of `kernel` reads or combines into.
pub(super) fn streams(kernel: &Kernel, buffer: usize) -> bool {
    let id = BufferId(buffer as u32);
    let b = kernel.buffer(id);
    let written_only = (kernel.blocks.iter())
        .all(|block| !block.reads(id) && (block.buffer != id || block.reduce.is_none()));
    matches!(b.role, Role::Output(_)) && b.numel() >= MIN_ELEMENTS && written_only
}

/// Bytes of a cache line: what one non-temporal store of a line writes.
const LINE: usize = 64;

/// The elements of `dst` before its first cache line's start (all of
/// them where it holds none).
pub(super) fn to_line(dst: &[f32]) -> usize {
    dst.as_ptr().align_offset(LINE).min(dst.len())
}

/// Copies `src` into `dst` (the same length), the whole cache lines of
/// `dst` with non-temporal stores. The caller calls [`fence`] before
/// anything else reads `dst`.
#[inline]
pub(super) fn copy(dst: &mut [f32], src: &[f32]) {
    assert_eq!(dst.len(), src.len(), "a streamed copy of unequal runs");
    let per_line = LINE / size_of::<f32>();
    let head = to_line(dst);
    let body = (dst.len() - head) / per_line * per_line;
    let (dst_head, rest) = dst.split_at_mut(head);
    let (dst_body, dst_tail) = rest.split_at_mut(body);
    dst_head.copy_from_slice(&src[..head]);
    lines(dst_body, &src[head..head + body]);
    dst_tail.copy_from_slice(&src[head + body..]);
}

/// `dst` (whole, aligned cache lines) from `src` with non-temporal stores.
#[cfg(target_arch = "x86_64")]
fn lines(dst: &mut [f32], src: &[f32]) {
    use std::arch::x86_64::{_mm_loadu_ps, _mm_stream_ps};

    use super::simd_math::{Simd, widest};
    if widest() == Simd::Avx512 {
        // SAFETY: the CPU has AVX-512F; `dst` is as `avx512` needs.
        return unsafe { avx512(dst, src) };
    }
    for (d, s) in dst.chunks_exact_mut(4).zip(src.chunks_exact(4)) {
        // SAFETY: `d` and `s` are four f32s each, `d` 16-byte aligned
        // (a line's start plus a multiple of 16 bytes).
        unsafe { _mm_stream_ps(d.as_mut_ptr(), _mm_loadu_ps(s.as_ptr())) };
    }
}

/// [`lines`] a line per store. Safety: `dst` starts on a cache line and
/// holds whole lines; `src` is as long.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn avx512(dst: &mut [f32], src: &[f32]) {
    use std::arch::x86_64::{_mm512_loadu_ps, _mm512_stream_ps};
    for (d, s) in dst.chunks_exact_mut(16).zip(src.chunks_exact(16)) {
        // SAFETY: sixteen f32s each, `d` on a line (the caller's contract).
        unsafe { _mm512_stream_ps(d.as_mut_ptr(), _mm512_loadu_ps(s.as_ptr())) };
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn lines(dst: &mut [f32], src: &[f32]) {
    dst.copy_from_slice(src);
}

/// Orders this thread's streamed stores before its later stores, so that
/// another thread that sees those (the pool's join) sees the streamed
/// elements too.
#[inline]
pub(super) fn fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a fence has no preconditions.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

#[cfg(test)]
mod tests {
    use super::super::simd_math::{Simd, at_most};
    use super::*;

    /// Every start within a cache line and every length up to a few
    /// lines copy exactly, on AVX-512 and on the SSE stores.
    #[test]
    fn a_streamed_copy_copies_every_element() {
        let src: Vec<f32> = (0..100).map(|i| i as f32 * 0.5 - 7.0).collect();
        for simd in [Simd::Avx512, Simd::Baseline] {
            at_most(simd, || {
                for start in 0..16 {
                    for len in 0..80 {
                        let mut dst = vec![f32::NAN; 100];
                        copy(&mut dst[start..start + len], &src[..len]);
                        fence();
                        assert_eq!(&dst[start..start + len], &src[..len], "{start}, {len}");
                        assert!(
                            dst[..start]
                                .iter()
                                .chain(&dst[start + len..])
                                .all(|v| v.is_nan())
                        );
                    }
                }
            });
        }
    }
}
