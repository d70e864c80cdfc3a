//! Kernel buffers as raw, shareable views. Parallel loops write disjoint
//! elements of the same buffers from several threads, which `&mut` slices
//! cannot express; every access here is bounds-checked, and disjointness is
//! what the schedule primitives guarantee (a loop that carries a reduction
//! cannot be made parallel).
//!
//! # Safety of element access
//!
//! [`RawBuf::slice`], [`RawBuf::slice_mut`], [`RawBuf::read`] and
//! [`RawBuf::write`] are `unsafe fn`s with one contract: while the access
//! (or the slice it returns) lives, no other thread or slice writes the
//! elements it reads, and nothing else reads or writes the elements it
//! writes. The executor upholds it by running programs compiled from a
//! lowered, verified schedule: steps run in order, a parallel loop's
//! shares write disjoint elements (no loop carrying a reduction is
//! parallel), and each thread's workgroup and private buffers are its own.
#![allow(unsafe_code)]

use half::slice::HalfFloatSliceExt;
use tilefuse_ir::{DType, Data, DataMut, DataRef, Scalar, bf16, f16};

use crate::error::{Result, RuntimeError};

/// Owned storage of one buffer.
pub struct Storage(pub Data);

impl Storage {
    /// `len` elements for a kernel to write before it reads them, or
    /// `OutOfMemory` naming the bytes when the allocator refuses them
    /// (instead of aborting the process). Zeroed by the allocator
    /// (`calloc`, so pages nothing writes are never touched); in debug
    /// builds [poisoned](Storage::poison) instead, so that tests catch a
    /// kernel that reads an element it has not written.
    pub fn try_new(dtype: DType, len: usize) -> Result<Storage> {
        let refused = || RuntimeError::OutOfMemory {
            what: format!("a buffer of {len} {} elements", dtype.name()),
            bytes: (len as u64).saturating_mul(element_size(dtype) as u64),
        };
        let mut storage = Storage(match dtype {
            DType::F32 => Data::F32(zeroed(len).ok_or_else(refused)?),
            DType::I32 => Data::I32(zeroed(len).ok_or_else(refused)?),
            DType::U32 => Data::U32(zeroed(len).ok_or_else(refused)?),
            DType::Bool => Data::Bool(zeroed(len).ok_or_else(refused)?),
            DType::F16 => Data::F16(zeroed(len).ok_or_else(refused)?),
            DType::BF16 => Data::BF16(zeroed(len).ok_or_else(refused)?),
        });
        storage.poison();
        Ok(storage)
    }

    /// As [`Storage::try_new`], for the small workgroup / private buffers
    /// whose allocation is not worth a recoverable error.
    pub fn new(dtype: DType, len: usize) -> Storage {
        let mut storage = Storage(match dtype {
            DType::F32 => Data::F32(vec![0.0; len]),
            DType::I32 => Data::I32(vec![0; len]),
            DType::U32 => Data::U32(vec![0; len]),
            DType::Bool => Data::Bool(vec![false; len]),
            DType::F16 => Data::F16(vec![f16::ZERO; len]),
            DType::BF16 => Data::BF16(vec![bf16::ZERO; len]),
        });
        storage.poison();
        storage
    }

    /// Fills debug builds' fresh buffers with values no kernel computes by
    /// accident (a NaN payload, 0xA5 bytes, `true`); a no-op in release.
    fn poison(&mut self) {
        if cfg!(debug_assertions) {
            match &mut self.0 {
                Data::F32(v) => v.fill(f32::from_bits(0x7fa5_a5a5)),
                Data::I32(v) => v.fill(0xa5a5_a5a5_u32 as i32),
                Data::U32(v) => v.fill(0xa5a5_a5a5),
                Data::Bool(v) => v.fill(true),
                Data::F16(v) => v.fill(f16::from_bits(0x7ea5)),
                Data::BF16(v) => v.fill(bf16::from_bits(0x7fa5)),
            }
        }
    }

    pub fn view(&mut self) -> RawBuf {
        RawBuf::of_output(&mut self.0.view_mut())
    }

    /// A view of `len` elements from `start`, in bounds of the storage.
    pub fn view_of(&mut self, start: usize, len: usize) -> RawBuf {
        let all = self.view();
        assert!(start + len <= all.len, "a view beyond its storage");
        RawBuf {
            // SAFETY: `start` is within the storage (checked above).
            ptr: unsafe { all.ptr.add(start * element_size(all.dtype)) },
            len,
            dtype: all.dtype,
        }
    }

    /// The address of the storage's first element.
    pub fn address(&mut self) -> usize {
        self.view().address()
    }
}

/// The bytes one element of `dtype` takes in a buffer (`bool` as Rust
/// stores it).
pub fn element_size(dtype: DType) -> usize {
    match dtype {
        DType::Bool => size_of::<bool>(),
        _ => dtype.size_bytes(),
    }
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} × {}", self.0.len(), self.0.dtype())
    }
}

impl RawBuf {
    /// A view of a caller's input. The executor never writes an input
    /// buffer (no block stores to one), so the shared borrow is enough.
    pub fn of_input(data: DataRef<'_>) -> RawBuf {
        let (ptr, len) = match data {
            DataRef::F32(v) => (v.as_ptr().cast::<u8>(), v.len()),
            DataRef::I32(v) => (v.as_ptr().cast::<u8>(), v.len()),
            DataRef::U32(v) => (v.as_ptr().cast::<u8>(), v.len()),
            DataRef::Bool(v) => (v.as_ptr().cast::<u8>(), v.len()),
            DataRef::F16(v) => (v.as_ptr().cast::<u8>(), v.len()),
            DataRef::BF16(v) => (v.as_ptr().cast::<u8>(), v.len()),
        };
        RawBuf {
            ptr: ptr.cast_mut(),
            len,
            dtype: data.dtype(),
        }
    }

    /// A view of a caller's output (or of storage).
    pub fn of_output(data: &mut DataMut<'_>) -> RawBuf {
        let dtype = data.dtype();
        let (ptr, len) = match data {
            DataMut::F32(v) => (v.as_mut_ptr().cast::<u8>(), v.len()),
            DataMut::I32(v) => (v.as_mut_ptr().cast::<u8>(), v.len()),
            DataMut::U32(v) => (v.as_mut_ptr().cast::<u8>(), v.len()),
            DataMut::Bool(v) => (v.as_mut_ptr().cast::<u8>(), v.len()),
            DataMut::F16(v) => (v.as_mut_ptr().cast::<u8>(), v.len()),
            DataMut::BF16(v) => (v.as_mut_ptr().cast::<u8>(), v.len()),
        };
        RawBuf { ptr, len, dtype }
    }
}

/// Marks the element types whose all-zero bit pattern is a valid zero.
trait ZeroBits: Copy {}
impl ZeroBits for f32 {}
impl ZeroBits for i32 {}
impl ZeroBits for u32 {}
impl ZeroBits for bool {}
impl ZeroBits for f16 {}
impl ZeroBits for bf16 {}

/// `len` zero elements from the allocator's zeroed memory, or `None` when
/// it refuses them.
fn zeroed<T: ZeroBits>(len: usize) -> Option<Vec<T>> {
    let layout = std::alloc::Layout::array::<T>(len).ok()?;
    if layout.size() == 0 {
        return Some(Vec::new());
    }
    // SAFETY: the layout has a non-zero size; a null pointer is a refusal.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<T>();
    if ptr.is_null() {
        return None;
    }
    // SAFETY: `ptr` was allocated by the global allocator with the layout of
    // `len` elements of `T`, and zero bits are a valid `T` (`ZeroBits`).
    Some(unsafe { Vec::from_raw_parts(ptr, len, len) })
}

/// A view of a [`Storage`] that outlives no call of the executor.
#[derive(Clone, Copy)]
pub struct RawBuf {
    ptr: *mut u8,
    len: usize,
    pub dtype: DType,
}

// SAFETY: the memory outlives every view (views live inside one launch,
// over storage or a caller's borrows that the launch holds), and concurrent
// writers touch disjoint elements (see the module docs).
unsafe impl Send for RawBuf {}
unsafe impl Sync for RawBuf {}

/// Element types a buffer can hold.
pub trait Elem: Copy {
    const DTYPE: DType;
}

impl Elem for f32 {
    const DTYPE: DType = DType::F32;
}
impl Elem for i32 {
    const DTYPE: DType = DType::I32;
}
impl Elem for u32 {
    const DTYPE: DType = DType::U32;
}
impl Elem for bool {
    const DTYPE: DType = DType::Bool;
}
impl Elem for f16 {
    const DTYPE: DType = DType::F16;
}
impl Elem for bf16 {
    const DTYPE: DType = DType::BF16;
}

/// Float elements read as f32: f32 itself, and the halves widened.
pub trait Widen: Copy {
    fn to_f32(self) -> f32;

    /// Appends `from`, widened, to `into` (SIMD conversions where the CPU
    /// has them).
    fn widen_into(from: &[Self], into: &mut Vec<f32>);
}

impl Widen for f32 {
    fn to_f32(self) -> f32 {
        self
    }

    fn widen_into(from: &[f32], into: &mut Vec<f32>) {
        into.extend_from_slice(from);
    }
}

macro_rules! widen_half {
    ($t:ty) => {
        impl Widen for $t {
            fn to_f32(self) -> f32 {
                <$t>::to_f32(self)
            }

            fn widen_into(from: &[$t], into: &mut Vec<f32>) {
                let at = into.len();
                into.resize(at + from.len(), 0.0);
                from.convert_to_f32_slice(&mut into[at..]);
            }
        }
    };
}
widen_half!(f16);
widen_half!(bf16);

/// Asks for the cache line at `p` (a hint: any address is allowed; a
/// no-op off x86-64). Inlined: its users call it a cache line at a time.
#[inline]
pub fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch does not access memory; it cannot fault.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

impl RawBuf {
    pub fn len(&self) -> usize {
        self.len
    }

    /// Asks for the cache lines of elements `start..start + n` (those
    /// within the buffer): a hint that accesses nothing, so outside the
    /// module's contract.
    #[inline]
    pub fn prefetch(&self, start: usize, n: usize) {
        let size = element_size(self.dtype);
        let (lo, hi) = (start.min(self.len) * size, (start + n).min(self.len) * size);
        for byte in (lo..hi).step_by(64) {
            prefetch(self.ptr.wrapping_add(byte));
        }
    }

    /// The address of the first element.
    pub fn address(&self) -> usize {
        self.ptr as usize
    }

    fn check<T: Elem>(&self, start: usize, n: usize) {
        assert_eq!(
            T::DTYPE,
            self.dtype,
            "typed access of the wrong element type"
        );
        assert!(
            start + n <= self.len,
            "access {start}..{} beyond buffer of {}",
            start + n,
            self.len
        );
    }

    /// `n` elements from `start` (bounds and element type checked).
    ///
    /// # Safety
    ///
    /// Nothing writes these elements while the slice lives (module docs).
    pub unsafe fn slice<T: Elem>(&self, start: usize, n: usize) -> &[T] {
        self.check::<T>(start, n);
        // SAFETY: in bounds of live storage of `T`s; no writer, per the
        // caller's contract.
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<T>().add(start), n) }
    }

    /// `n` mutable elements from `start` (bounds and element type checked).
    ///
    /// # Safety
    ///
    /// Nothing else reads or writes these elements while the slice lives
    /// (module docs).
    #[allow(clippy::mut_from_ref)] // the view is shared; exclusivity is the contract
    pub unsafe fn slice_mut<T: Elem>(&self, start: usize, n: usize) -> &mut [T] {
        self.check::<T>(start, n);
        // SAFETY: in bounds of live storage of `T`s; exclusive, per the
        // caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.cast::<T>().add(start), n) }
    }

    /// Appends the `n` elements `start`, `start + stride`, ... to `into`
    /// as f32 (halves widened; bounds and element type checked once;
    /// consecutive ones copied or converted as one run).
    ///
    /// # Safety
    ///
    /// As [`RawBuf::slice`], for those elements only: the ones between
    /// them may be written meanwhile.
    pub unsafe fn gather_f32(&self, start: usize, stride: usize, n: usize, into: &mut Vec<f32>) {
        match self.dtype {
            DType::F16 => unsafe { self.gather_as::<f16>(start, stride, n, into) },
            DType::BF16 => unsafe { self.gather_as::<bf16>(start, stride, n, into) },
            _ => unsafe { self.gather_as::<f32>(start, stride, n, into) },
        }
    }

    /// [`RawBuf::gather_f32`] of a buffer of `T`s.
    unsafe fn gather_as<T: Elem + Widen>(
        &self,
        start: usize,
        stride: usize,
        n: usize,
        into: &mut Vec<f32>,
    ) {
        if n == 0 {
            return;
        }
        if stride == 1 {
            return T::widen_into(unsafe { self.slice::<T>(start, n) }, into);
        }
        self.check::<T>(start, (n - 1) * stride + 1);
        let at = |k: usize| self.ptr.cast::<T>().wrapping_add(start + k * stride);
        // SAFETY: in bounds, checked above; no writer, per the contract.
        into.extend((0..n).map(|k| unsafe { at(k).read() }.to_f32()));
    }

    /// Float element `i` as f32 (a half widened).
    ///
    /// # Safety
    ///
    /// As [`RawBuf::slice`], for that element.
    pub unsafe fn read_f32(&self, i: usize) -> f32 {
        match self.dtype {
            DType::F32 => unsafe { self.slice::<f32>(i, 1)[0] },
            _ => unsafe { self.read(i) }.as_f64() as f32,
        }
    }

    /// Element `i` as a scalar.
    ///
    /// # Safety
    ///
    /// As [`RawBuf::slice`], for that element.
    pub unsafe fn read(&self, i: usize) -> Scalar {
        // SAFETY: the caller's contract, for element `i`.
        unsafe {
            match self.dtype {
                DType::F32 => Scalar::F(f64::from(self.slice::<f32>(i, 1)[0])),
                DType::I32 => Scalar::I(self.slice::<i32>(i, 1)[0]),
                DType::U32 => Scalar::U(self.slice::<u32>(i, 1)[0]),
                DType::Bool => Scalar::B(self.slice::<bool>(i, 1)[0]),
                DType::F16 => Scalar::F(f64::from(self.slice::<f16>(i, 1)[0])),
                DType::BF16 => Scalar::F(f64::from(self.slice::<bf16>(i, 1)[0])),
            }
        }
    }

    /// Stores `v` (converted to the buffer's dtype) at element `i`.
    ///
    /// # Safety
    ///
    /// As [`RawBuf::slice_mut`], for that element.
    pub unsafe fn write(&self, i: usize, v: Scalar) {
        // SAFETY: the caller's contract, for element `i`.
        unsafe {
            match self.dtype {
                DType::F32 => self.slice_mut::<f32>(i, 1)[0] = v.as_f64() as f32,
                DType::I32 => self.slice_mut::<i32>(i, 1)[0] = v.as_i32(),
                DType::U32 => self.slice_mut::<u32>(i, 1)[0] = v.as_u32(),
                DType::Bool => self.slice_mut::<bool>(i, 1)[0] = v.as_bool(),
                DType::F16 => self.slice_mut::<f16>(i, 1)[0] = f16::from_f64(v.as_f64()),
                DType::BF16 => self.slice_mut::<bf16>(i, 1)[0] = bf16::from_f64(v.as_f64()),
            }
        }
    }
}
