//! Columns of lane values: the CPU executor evaluates a block for a chunk of
//! consecutive iterations of its innermost loop at once, one op at a time
//! over short arrays that stay in L1 and that the compiler vectorizes.
//!
//! Unsafe code: only the element accesses of `RawBuf` (columns load and store kernel buffers through `RawBuf` views),
//! under the contract in `memory.rs`: a verified schedule keeps concurrent
//! writes disjoint and ordered before their reads.
#![allow(unsafe_code)]

use half::slice::HalfFloatSliceExt;
use tilefuse_ir::{
    BinaryOp, DType, ReduceOp, Scalar, UnaryOp, bf16, binary_scalar, f16, unary_scalar,
};

use super::halves;
use super::memory::{Elem, RawBuf};
use super::simd_math;

/// Lanes of one dtype; halves are held in `F32` lanes (already rounded
/// to their dtype), converted where they are read from and written to
/// buffers.
#[derive(Clone, Debug)]
pub enum Column {
    F32(Vec<f32>),
    I32(Vec<i32>),
    U32(Vec<u32>),
    Bool(Vec<bool>),
}

macro_rules! each_column {
    ($col:expr, $v:ident => $body:expr) => {
        match $col {
            Column::F32($v) => $body,
            Column::I32($v) => $body,
            Column::U32($v) => $body,
            Column::Bool($v) => $body,
        }
    };
}

fn map<T: Copy, U>(a: &[T], f: impl Fn(T) -> U) -> Vec<U> {
    a.iter().map(|&x| f(x)).collect()
}

/// Applies `f` to every element in place; generic so that each use is
/// inlined and vectorized (a function pointer would be called per element).
#[inline(always)]
fn each(a: &mut [f32], f: impl Fn(f32) -> f32) {
    a.iter_mut().for_each(|x| *x = f(*x));
}

/// Applies a unary op to every element in place.
#[inline(always)]
pub fn unary_f32(op: UnaryOp, a: &mut [f32]) {
    match op {
        UnaryOp::Neg => each(a, |x| -x),
        UnaryOp::Abs => each(a, f32::abs),
        UnaryOp::Exp => simd_math::exp_in_place(a),
        UnaryOp::Log => simd_math::ln_in_place(a),
        UnaryOp::Sqrt => each(a, f32::sqrt),
        UnaryOp::Rsqrt => each(a, |x| 1.0 / x.sqrt()),
        UnaryOp::Tanh => simd_math::tanh_in_place(a),
        UnaryOp::Sigmoid => {
            each(a, |x| -x);
            simd_math::exp_in_place(a);
            each(a, |e| 1.0 / (1.0 + e));
        }
        // NaN stays NaN (`!(x <= 0)`), as in the reference.
        UnaryOp::Relu => each(a, |x| if x <= 0.0 { 0.0 } else { x }),
        UnaryOp::Gelu => simd_math::gelu_in_place(a),
        UnaryOp::Sin => simd_math::sin_in_place(a),
        UnaryOp::Cos => simd_math::cos_in_place(a),
        UnaryOp::Reciprocal => each(a, |x| 1.0 / x),
    }
}

/// The other operand of an arithmetic op: a value per lane, or one for all.
#[derive(Clone, Copy)]
pub enum Rhs<'a> {
    Each(&'a [f32]),
    Same(f32),
}

/// `a[i] = a[i] op b[i]` (`b[i] op a[i]` with `swap`) for an arithmetic
/// op; one monomorphized, vectorizable loop per op and operand kind.
#[inline(always)]
pub fn arith(op: BinaryOp, a: &mut [f32], b: Rhs<'_>, swap: bool) {
    arith_from(op, a, None, b, swap);
}

/// As [`arith`], with the left operand read from `from` where given
/// (`a[i] = from[i] op b[i]`): no copy of it into `a` first.
#[inline(always)]
pub fn arith_from(op: BinaryOp, a: &mut [f32], from: Option<Rhs<'_>>, b: Rhs<'_>, swap: bool) {
    #[inline(always)]
    fn apply(
        a: &mut [f32],
        from: Option<Rhs<'_>>,
        b: Rhs<'_>,
        swap: bool,
        f: impl Fn(f32, f32) -> f32,
    ) {
        match (from, b, swap) {
            (None, Rhs::Each(b), false) => a.iter_mut().zip(b).for_each(|(x, &y)| *x = f(*x, y)),
            (None, Rhs::Each(b), true) => a.iter_mut().zip(b).for_each(|(x, &y)| *x = f(y, *x)),
            (None, Rhs::Same(c), false) => a.iter_mut().for_each(|x| *x = f(*x, c)),
            (None, Rhs::Same(c), true) => a.iter_mut().for_each(|x| *x = f(c, *x)),
            (Some(Rhs::Each(l)), Rhs::Each(r), _) => {
                (a.iter_mut().zip(l).zip(r)).for_each(|((x, &p), &q)| *x = f(p, q));
            }
            (Some(Rhs::Each(l)), Rhs::Same(c), _) => {
                a.iter_mut().zip(l).for_each(|(x, &p)| *x = f(p, c));
            }
            (Some(Rhs::Same(c)), Rhs::Each(r), _) => {
                a.iter_mut().zip(r).for_each(|(x, &q)| *x = f(c, q));
            }
            (Some(Rhs::Same(p)), Rhs::Same(q), _) => a.fill(f(p, q)),
        }
    }
    match op {
        BinaryOp::Add => apply(a, from, b, swap, |x, y| x + y),
        BinaryOp::Sub => apply(a, from, b, swap, |x, y| x - y),
        BinaryOp::Mul => apply(a, from, b, swap, |x, y| x * y),
        BinaryOp::Div => apply(a, from, b, swap, |x, y| x / y),
        BinaryOp::Max => apply(a, from, b, swap, |x, y| extreme(x, y, true)),
        BinaryOp::Min => apply(a, from, b, swap, |x, y| extreme(x, y, false)),
        // A constant exponent libm need not see: one correctly rounded op
        // each (so the reference's value, and C's specials), vectorized;
        // `powf` is a scalar call (`x ** 2` of 4096²: 60 ms, torch 17).
        BinaryOp::Pow => match exponent(from.is_some(), b, swap) {
            Some(2.0) => apply(a, from, b, swap, |x, _| x * x),
            Some(-1.0) => apply(a, from, b, swap, |x, _| 1.0 / x),
            // pow(-0, 0.5) = +0 (the `+ 0.0`), pow(-inf, 0.5) = inf.
            Some(0.5) => apply(a, from, b, swap, |x, _| {
                if x == f32::NEG_INFINITY {
                    f32::INFINITY
                } else {
                    x.sqrt() + 0.0
                }
            }),
            _ => apply(a, from, b, swap, f32::powf),
        },
        // A comparison's lanes are 1.0 (true) or 0.0, as tapes hold masks.
        BinaryOp::Eq => apply(a, from, b, swap, |x, y| truth(x == y)),
        BinaryOp::Ne => apply(a, from, b, swap, |x, y| truth(x != y)),
        BinaryOp::Lt => apply(a, from, b, swap, |x, y| truth(x < y)),
        BinaryOp::Le => apply(a, from, b, swap, |x, y| truth(x <= y)),
        BinaryOp::Gt => apply(a, from, b, swap, |x, y| truth(x > y)),
        BinaryOp::Ge => apply(a, from, b, swap, |x, y| truth(x >= y)),
    }
}

/// The exponent of `a = from op b` (`a op b`; `b op a` with `swap`)
/// where it is one value for every lane.
#[inline(always)]
fn exponent(from: bool, b: Rhs<'_>, swap: bool) -> Option<f32> {
    match b {
        Rhs::Same(y) if from || !swap => Some(y),
        _ => None,
    }
}

#[inline(always)]
fn truth(b: bool) -> f32 {
    if b { 1.0 } else { 0.0 }
}

/// `mask[i] = if mask[i] != 0 { t[i] } else { f[i] }` over a mask of
/// comparisons' 1.0 / 0.0 (see [`arith_from`]).
#[inline(always)]
pub fn select(mask: &mut [f32], t: Rhs<'_>, f: Rhs<'_>) {
    #[inline(always)]
    fn pick(m: f32, t: f32, f: f32) -> f32 {
        if m != 0.0 { t } else { f }
    }
    match (t, f) {
        (Rhs::Each(t), Rhs::Each(f)) => {
            (mask.iter_mut().zip(t).zip(f)).for_each(|((m, &t), &f)| *m = pick(*m, t, f))
        }
        (Rhs::Each(t), Rhs::Same(f)) => mask
            .iter_mut()
            .zip(t)
            .for_each(|(m, &t)| *m = pick(*m, t, f)),
        (Rhs::Same(t), Rhs::Each(f)) => mask
            .iter_mut()
            .zip(f)
            .for_each(|(m, &f)| *m = pick(*m, t, f)),
        (Rhs::Same(t), Rhs::Same(f)) => mask.iter_mut().for_each(|m| *m = pick(*m, t, f)),
    }
}

fn zip<T: Copy, U>(a: &[T], b: &[T], f: impl Fn(T, T) -> U) -> Vec<U> {
    a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect()
}

/// `dst[k] = dst[k] op v[k]`, or `dst[k] = v[k]` on the first visit of
/// the reduction (the identity combined with x is x, NaN included).
#[inline(always)]
pub fn combine_into(dst: &mut [f32], v: &[f32], op: ReduceOp, first: bool) {
    let v = &v[..dst.len()];
    match (first, op) {
        (true, _) => dst.copy_from_slice(v),
        (false, ReduceOp::Sum | ReduceOp::Mean) => dst.iter_mut().zip(v).for_each(|(d, x)| *d += x),
        (false, ReduceOp::Max) => dst
            .iter_mut()
            .zip(v)
            .for_each(|(d, &x)| *d = extreme(*d, x, true)),
        (false, ReduceOp::Min) => dst
            .iter_mut()
            .zip(v)
            .for_each(|(d, &x)| *d = extreme(*d, x, false)),
    }
}

/// All of `v` combined with `op`; sums use eight partial sums so they
/// vectorize. (Inlined into the callers compiled for wider vectors.)
#[inline]
pub fn fold_f32(v: &[f32], op: ReduceOp) -> f32 {
    match op {
        ReduceOp::Sum | ReduceOp::Mean => {
            // From -0, the sum's identity (`reduce_identity`): +0 would turn
            // a sum of -0 terms into +0.
            let mut partial = [-0f32; 8];
            let chunks = v.chunks_exact(8);
            let tail = chunks.remainder().iter().fold(-0f32, |a, &x| a + x);
            for c in chunks {
                for (p, x) in partial.iter_mut().zip(c) {
                    *p += x;
                }
            }
            partial.iter().fold(-0f32, |a, &x| a + x) + tail
        }
        ReduceOp::Max => fold_extreme(v, true),
        ReduceOp::Min => fold_extreme(v, false),
    }
}

/// The maximum (or minimum) of `v`, NaN if any element is: eight
/// independent lanes and a NaN flag, which vectorize, where a running
/// `extreme` would wait on each comparison in turn.
#[inline]
fn fold_extreme(v: &[f32], take_max: bool) -> f32 {
    let identity = if take_max {
        f32::NEG_INFINITY
    } else {
        f32::INFINITY
    };
    let mut partial = [identity; 8];
    let mut nan = [false; 8];
    let chunks = v.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for ((p, n), &x) in partial.iter_mut().zip(&mut nan).zip(c) {
            *p = if take_max { p.max(x) } else { p.min(x) };
            *n |= x.is_nan();
        }
    }
    let lanes = partial.iter().chain(tail);
    if nan.iter().any(|&n| n) || tail.iter().any(|x| x.is_nan()) {
        return f32::NAN;
    }
    let folded = lanes.fold(identity, |a, &x| extreme(a, x, take_max));
    if folded == 0.0 {
        // `max` / `min` above may pick either zero; the sign is settled here.
        let sign = if take_max {
            v.iter().all(|x| *x != 0.0 || x.is_sign_negative())
        } else {
            v.iter().any(|x| *x == 0.0 && x.is_sign_negative())
        };
        return if sign { -0.0 } else { 0.0 };
    }
    folded
}

/// numpy's `maximum` / `minimum` on f32: NaN wins.
fn extreme(a: f32, b: f32, take_max: bool) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else if a == b {
        // Equal, or +0 and -0: max takes +0, min -0 (IEEE 754-2019).
        let bits = if take_max {
            a.to_bits() & b.to_bits()
        } else {
            a.to_bits() | b.to_bits()
        };
        f32::from_bits(bits)
    } else if (a > b) == take_max {
        a
    } else {
        b
    }
}

impl Column {
    pub fn len(&self) -> usize {
        each_column!(self, v => v.len())
    }

    pub fn splat(value: Scalar, dtype: DType, n: usize) -> Column {
        let v = value.to(dtype);
        match dtype {
            DType::F32 | DType::F16 | DType::BF16 => Column::F32(vec![v.as_f64() as f32; n]),
            DType::I32 => Column::I32(vec![v.as_i32(); n]),
            DType::U32 => Column::U32(vec![v.as_u32(); n]),
            DType::Bool => Column::Bool(vec![v.as_bool(); n]),
        }
    }

    pub fn get(&self, i: usize) -> Scalar {
        match self {
            Column::F32(v) => Scalar::F(f64::from(v[i])),
            Column::I32(v) => Scalar::I(v[i]),
            Column::U32(v) => Scalar::U(v[i]),
            Column::Bool(v) => Scalar::B(v[i]),
        }
    }

    /// Reads `n` consecutive elements of `buf` from `start`.
    pub fn read(buf: &RawBuf, start: usize, n: usize) -> Column {
        fn copy<T: Elem>(buf: &RawBuf, start: usize, n: usize) -> Vec<T> {
            unsafe { buf.slice::<T>(start, n).to_vec() }
        }
        match buf.dtype {
            DType::F32 => Column::F32(copy(buf, start, n)),
            DType::I32 => Column::I32(copy(buf, start, n)),
            DType::U32 => Column::U32(copy(buf, start, n)),
            DType::Bool => Column::Bool(copy(buf, start, n)),
            DType::F16 => Column::F32(unsafe { buf.slice::<f16>(start, n) }.to_f32_vec()),
            DType::BF16 => Column::F32(unsafe { buf.slice::<bf16>(start, n) }.to_f32_vec()),
        }
    }

    /// Reads `buf[offsets[k]]` for lanes where `mask` holds (other lanes
    /// read element 0, or nothing from an empty buffer).
    pub fn gather(buf: &RawBuf, offsets: &[i64], mask: Option<&[bool]>) -> Column {
        fn pick<T: Elem + Default>(buf: &RawBuf, offsets: &[i64], mask: Option<&[bool]>) -> Vec<T> {
            let data = unsafe { buf.slice::<T>(0, buf.len()) };
            offsets
                .iter()
                .enumerate()
                .map(|(k, &o)| {
                    if mask.is_none_or(|m| m[k]) {
                        data[o as usize]
                    } else {
                        T::default()
                    }
                })
                .collect()
        }
        match buf.dtype {
            DType::F32 => Column::F32(pick(buf, offsets, mask)),
            DType::I32 => Column::I32(pick(buf, offsets, mask)),
            DType::U32 => Column::U32(pick(buf, offsets, mask)),
            DType::Bool => Column::Bool(pick(buf, offsets, mask)),
            DType::F16 => Column::F32(pick::<f16>(buf, offsets, mask).to_f32_vec()),
            DType::BF16 => Column::F32(pick::<bf16>(buf, offsets, mask).to_f32_vec()),
        }
    }

    /// Writes the lanes to `n` consecutive elements from `start`.
    pub fn write(&self, buf: &RawBuf, start: usize) {
        match (self, buf.dtype) {
            (Column::F32(v), DType::F16) => unsafe {
                buf.slice_mut::<f16>(start, v.len())
                    .convert_from_f32_slice(v)
            },
            (Column::F32(v), DType::BF16) => unsafe {
                buf.slice_mut::<bf16>(start, v.len())
                    .convert_from_f32_slice(v)
            },
            _ => {
                each_column!(self, v => unsafe { buf.slice_mut(start, v.len()).copy_from_slice(v) })
            }
        }
    }

    /// Writes f32 lanes to `lanes.len()` consecutive halves of `buf` from
    /// `start`, rounding each to nearest even.
    pub fn narrow_into(lanes: &[f32], buf: &RawBuf, start: usize) {
        let n = lanes.len();
        match buf.dtype {
            DType::F16 => halves::narrow_f16(lanes, unsafe { buf.slice_mut::<f16>(start, n) }),
            DType::BF16 => halves::narrow_bf16(lanes, unsafe { buf.slice_mut::<bf16>(start, n) }),
            other => unreachable!("narrowing into {other}, not a half"),
        }
    }

    /// Writes lane `k` to `buf[offsets[k]]` where `mask` holds.
    pub fn scatter(&self, buf: &RawBuf, offsets: &[i64], mask: Option<&[bool]>) {
        fn put<T: Elem>(v: &[T], buf: &RawBuf, offsets: &[i64], mask: Option<&[bool]>) {
            let data = unsafe { buf.slice_mut::<T>(0, buf.len()) };
            for (k, &o) in offsets.iter().enumerate() {
                if mask.is_none_or(|m| m[k]) {
                    data[o as usize] = v[k];
                }
            }
        }
        match (self, buf.dtype) {
            (Column::F32(v), DType::F16) => put(
                &v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>(),
                buf,
                offsets,
                mask,
            ),
            (Column::F32(v), DType::BF16) => put(
                &v.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>(),
                buf,
                offsets,
                mask,
            ),
            _ => each_column!(self, v => put(v, buf, offsets, mask)),
        }
    }

    /// Combines lane `k` into `buf[start + k]` (or, on the first
    /// iteration of the reduction, stores it). Returns `false` where there
    /// is no typed fast path, for the caller to go lane by lane.
    pub fn reduce_into(&self, buf: &RawBuf, start: usize, op: ReduceOp, first: bool) -> bool {
        let Column::F32(v) = self else { return false };
        if buf.dtype != DType::F32 {
            return false;
        }
        combine_into(
            unsafe { buf.slice_mut::<f32>(start, v.len()) },
            v,
            op,
            first,
        );
        true
    }

    /// All lanes combined with `op`, for reductions whose lanes all land on
    /// one element.
    pub fn fold(&self, op: ReduceOp) -> Option<f32> {
        let Column::F32(v) = self else { return None };
        Some(fold_f32(v, op))
    }

    /// Applies a unary op, reusing the column's storage for f32.
    pub fn unary(self, op: UnaryOp) -> Column {
        let Column::F32(mut a) = self else {
            return self.per_lane(self.dtype(), |x| unary_scalar(op, x));
        };
        unary_f32(op, &mut a);
        Column::F32(a)
    }

    /// `self op rhs` lane by lane; f32 arithmetic reuses `self`'s storage.
    pub fn binary(self, op: BinaryOp, rhs: &Column) -> Column {
        match (self, rhs) {
            (Column::F32(mut a), Column::F32(b)) if !op.is_comparison() => {
                arith(op, &mut a, Rhs::Each(b), false);
                Column::F32(a)
            }
            (Column::F32(a), Column::F32(b)) => Column::Bool(match op {
                BinaryOp::Eq => zip(&a, b, |x, y| x == y),
                BinaryOp::Ne => zip(&a, b, |x, y| x != y),
                BinaryOp::Lt => zip(&a, b, |x, y| x < y),
                BinaryOp::Le => zip(&a, b, |x, y| x <= y),
                BinaryOp::Gt => zip(&a, b, |x, y| x > y),
                _ => zip(&a, b, |x, y| x >= y),
            }),
            (lhs, _) => {
                let dtype = if op.is_comparison() {
                    DType::Bool
                } else {
                    lhs.dtype()
                };
                Column::from_fn(dtype, lhs.len(), |k| {
                    binary_scalar(op, lhs.get(k), rhs.get(k))
                })
            }
        }
    }

    /// `self op c` (or `c op self` with `const_left`) for an f32 column and
    /// constant, in place; hands the column back where that does not apply.
    pub fn binary_const(self, op: BinaryOp, c: f32, const_left: bool) -> Result<Column, Column> {
        match self {
            Column::F32(mut a) if !op.is_comparison() => {
                arith(op, &mut a, Rhs::Same(c), const_left);
                Ok(Column::F32(a))
            }
            other => Err(other),
        }
    }

    pub fn select(&self, a: &Column, b: &Column) -> Column {
        let Column::Bool(c) = self else {
            unreachable!("verified: conditions are bool")
        };
        match (a, b) {
            (Column::F32(x), Column::F32(y)) => Column::F32(
                c.iter()
                    .zip(x.iter().zip(y))
                    .map(|(&c, (&x, &y))| if c { x } else { y })
                    .collect(),
            ),
            _ => Column::from_fn(
                a.dtype(),
                c.len(),
                |k| if c[k] { a.get(k) } else { b.get(k) },
            ),
        }
    }

    /// The lanes as `dtype`; a half rounds f32 lanes to its precision.
    pub fn cast(&self, dtype: DType) -> Column {
        match (self, dtype) {
            (Column::F32(a), DType::F32) => Column::F32(a.clone()),
            (Column::F32(a), half) if half.is_half() => {
                let mut a = a.clone();
                halves::round_to(half, &mut a);
                Column::F32(a)
            }
            (Column::I32(a), DType::F32) => Column::F32(map(a, |x| x as f32)),
            (Column::F32(a), DType::I32) => Column::I32(map(a, |x| x as i32)),
            _ => self.per_lane(dtype, |x| x.to(dtype)),
        }
    }

    pub fn dtype(&self) -> DType {
        match self {
            Column::F32(_) => DType::F32,
            Column::I32(_) => DType::I32,
            Column::U32(_) => DType::U32,
            Column::Bool(_) => DType::Bool,
        }
    }

    fn per_lane(&self, dtype: DType, f: impl Fn(Scalar) -> Scalar) -> Column {
        Column::from_fn(dtype, self.len(), |k| f(self.get(k)))
    }

    pub fn from_fn(dtype: DType, n: usize, f: impl Fn(usize) -> Scalar) -> Column {
        match dtype {
            DType::F32 | DType::F16 | DType::BF16 => {
                Column::F32((0..n).map(|k| f(k).to(dtype).as_f64() as f32).collect())
            }
            DType::I32 => Column::I32((0..n).map(|k| f(k).as_i32()).collect()),
            DType::U32 => Column::U32((0..n).map(|k| f(k).as_u32()).collect()),
            DType::Bool => Column::Bool((0..n).map(|k| f(k).as_bool()).collect()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fold_extreme;

    #[test]
    fn extremes_fold_lane_wise_and_keep_nan() {
        let v: Vec<f32> = (0..37).map(|i| ((i * 7919) % 101) as f32 - 50.0).collect();
        let (hi, lo) = (
            v.iter().copied().fold(f32::MIN, f32::max),
            v.iter().copied().fold(f32::MAX, f32::min),
        );
        assert_eq!(fold_extreme(&v, true), hi);
        assert_eq!(fold_extreme(&v, false), lo);
        for at in [3, 35] {
            // In a full chunk of eight, and in the tail.
            let mut w = v.clone();
            w[at] = f32::NAN;
            assert!(fold_extreme(&w, true).is_nan() && fold_extreme(&w, false).is_nan());
        }
        assert_eq!(fold_extreme(&[], true), f32::NEG_INFINITY);
        assert_eq!(fold_extreme(&[f32::INFINITY; 9], false), f32::INFINITY);
    }
}
