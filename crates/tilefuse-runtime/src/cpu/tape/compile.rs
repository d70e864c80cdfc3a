//! Compiling a block's value into a tape: a stack of register-sized ops
//! over f32 lanes. A comparison leaves 1.0 (true) or 0.0 (false) in its
//! register and a select picks by it, so masks (`where(x > 0, x, 0.1 * x)`,
//! `(x > 0).astype(f32)`) run as tapes too: they ran column by column,
//! 20x slower than the arithmetic around them. Values of other dtypes (an
//! integer, a bool buffer) are not a tape's.

use tilefuse_ir::{BinaryOp, DType};

use super::lane_load::LaneLoad;
use super::{Folded, Op, Operand, REGISTERS, SOURCES, Tape, Uniform};
use crate::cpu::loop_index::LoopIndex;
use crate::cpu::value::{Access, Value};

/// What a register holds: f32 arithmetic, or a comparison's 1.0 / 0.0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    F32,
    Bool,
}

/// What the leaves are checked against: the buffer the tape stores to
/// (never one of its loads) and every buffer's dtype.
struct At<'a> {
    store: usize,
    dtypes: &'a [DType],
}

impl Tape {
    /// Compiles `value`, or `None` where it is not f32 arithmetic (with
    /// comparisons and selects) over loads of buffers other than `store`
    /// that step forward or not at all with the lane.
    pub fn compile(value: &Value, store: usize, dtypes: &[DType]) -> Option<Tape> {
        let mut tape = Tape {
            ops: Vec::new(),
            loads: Vec::new(),
            uniforms: Vec::new(),
            folded: Folded::default(),
            ahead: Vec::new(),
        };
        let at = At { store, dtypes };
        (tape.emit(value, 0, &at)? == Kind::F32).then_some(())?;
        tape.folded = Folded::of(&tape.ops, tape.uniforms.len(), &tape.loads);
        let fits = tape.loads.len() <= SOURCES && tape.uniforms.len() <= SOURCES;
        fits.then_some(tape)
    }

    /// A leaf's operand (an f32 load or constant), `Some(None)` for a value
    /// that is not a leaf, `None` for a leaf no tape reads.
    fn leaf(&mut self, v: &Value, at: &At<'_>) -> Option<Option<Operand>> {
        Some(match v {
            // A half constant is held in f32 (already rounded).
            Value::Const(c, d) if d.compute() == DType::F32 => {
                self.uniforms.push(Uniform::Const(c.as_f64() as f32));
                Some(Operand::Uniform(self.uniforms.len() as u8 - 1))
            }
            Value::Const(..) => return None,
            Value::Load(Access {
                buffer,
                linear: Some((coef, rest)),
                ..
            }) if *buffer != at.store && at.dtypes[*buffer].compute() == DType::F32 => match coef {
                0 => {
                    let index = LoopIndex::new(rest.clone());
                    self.uniforms.push(Uniform::Load(*buffer, index));
                    Some(Operand::Uniform(self.uniforms.len() as u8 - 1))
                }
                &stride if stride > 0 => {
                    let index = LoopIndex::new(rest.clone());
                    self.loads.push(LaneLoad {
                        half: at.dtypes[*buffer].is_half(),
                        ..LaneLoad::strided(*buffer, index, stride as usize)
                    });
                    Some(Operand::Load(self.loads.len() as u8 - 1))
                }
                _ => return None,
            },
            Value::Load(_) => return None,
            _ => None,
        })
    }

    /// Emits code leaving `v` in register `dst`; what it holds.
    fn emit(&mut self, v: &Value, dst: u8, at: &At<'_>) -> Option<Kind> {
        if usize::from(dst) >= REGISTERS {
            return None;
        }
        if let Some(src) = self.leaf(v, at)? {
            self.ops.push(Op::Set { dst, src });
            return Some(Kind::F32);
        }
        match v {
            Value::Unary(op, x) => {
                (self.emit(x, dst, at)? == Kind::F32).then_some(())?;
                self.ops.push(Op::Unary { op: *op, dst });
                Some(Kind::F32)
            }
            Value::Binary(op, x, y) => self.binary(*op, (x, y), dst, at),
            Value::Select(c, x, y) => self.select(c, (x, y), dst, at),
            // A comparison's 1.0 / 0.0 is its f32 value already, and a
            // half's f32 is its value.
            Value::Cast(DType::F32, x) => self.emit(x, dst, at).map(|_| Kind::F32),
            Value::Cast(half, x) if half.is_half() => {
                (self.emit(x, dst, at)? == Kind::F32).then_some(())?;
                self.ops.push(Op::Round { dst, half: *half });
                Some(Kind::F32)
            }
            _ => None,
        }
    }

    /// `x op y` in `dst`: arithmetic of two f32 values, or a comparison of
    /// two values of one kind.
    fn binary(
        &mut self,
        op: BinaryOp,
        (x, y): (&Value, &Value),
        dst: u8,
        at: &At<'_>,
    ) -> Option<Kind> {
        // Evaluate the non-leaf side into `dst`; a leaf on the other side
        // is read where it is, never copied.
        let is_leaf = |v: &Value| matches!(v, Value::Const(..) | Value::Load(_));
        let swap = is_leaf(x) && !is_leaf(y);
        let (first, second) = if swap { (y, x) } else { (x, y) };
        // `first` is a leaf only where both are (see `swap`).
        let kinds = match self.leaf(first, at)? {
            Some(lhs) => {
                let rhs = self.leaf(second, at)??;
                self.ops.push(Op::Apply { op, dst, lhs, rhs });
                (Kind::F32, Kind::F32)
            }
            None => {
                let a = self.emit(first, dst, at)?;
                let (rhs, b) = self.operand(second, dst + 1, at)?;
                self.ops.push(Op::Binary { op, dst, rhs, swap });
                (a, b)
            }
        };
        match kinds {
            (a, b) if op.is_comparison() && a == b => Some(Kind::Bool),
            (Kind::F32, Kind::F32) if !op.is_comparison() => Some(Kind::F32),
            _ => None,
        }
    }

    /// `c ? x : y` in `dst`, the condition computed there first.
    fn select(
        &mut self,
        c: &Value,
        (x, y): (&Value, &Value),
        dst: u8,
        at: &At<'_>,
    ) -> Option<Kind> {
        (self.emit(c, dst, at)? == Kind::Bool).then_some(())?;
        let (on_true, a) = self.operand(x, dst + 1, at)?;
        let free = if matches!(on_true, Operand::Reg(_)) {
            dst + 2
        } else {
            dst + 1
        };
        let (on_false, b) = self.operand(y, free, at)?;
        self.ops.push(Op::Select {
            dst,
            on_true,
            on_false,
        });
        (a == b).then_some(a)
    }

    /// `v` read where it is (a leaf), or computed into register `free`.
    fn operand(&mut self, v: &Value, free: u8, at: &At<'_>) -> Option<(Operand, Kind)> {
        Some(match self.leaf(v, at)? {
            Some(leaf) => (leaf, Kind::F32),
            None => (Operand::Reg(free), self.emit(v, free, at)?),
        })
    }
}

#[cfg(test)]
mod tests {
    use tilefuse_ir::{BinaryOp, DType, DataRef, Scalar};
    use tilefuse_sched::ir::Index;

    use super::*;
    use crate::cpu::memory::RawBuf;
    use crate::cpu::tape::{Registers, Sink};

    /// Consecutive elements of buffer `buffer` from 0, one a lane.
    fn load(buffer: usize) -> Box<Value> {
        Box::new(Value::Load(Access {
            buffer,
            offset: Index::Const(0),
            linear: Some((1, Index::Const(0))),
        }))
    }

    fn constant(c: f32) -> Box<Value> {
        Box::new(Value::Const(Scalar::F(f64::from(c)), DType::F32))
    }

    fn binary(op: BinaryOp, a: Box<Value>, b: Box<Value>) -> Box<Value> {
        Box::new(Value::Binary(op, a, b))
    }

    /// The tape of `v` over `x` (buffer 0) and `y` (buffer 1), run.
    fn run(v: &Value, x: &[f32], y: &[f32]) -> Vec<f32> {
        let dtypes = [DType::F32; 3];
        let tape = Tape::compile(v, 2, &dtypes).expect("a tape");
        let buffers = [DataRef::F32(x), DataRef::F32(y)].map(RawBuf::of_input);
        let mut out = vec![f32::NAN; x.len()];
        let offsets = tape.offsets(&[]);
        let mut regs = Registers::default();
        tape.run_from(
            &buffers,
            &offsets,
            (0, x.len()),
            &mut regs,
            Sink::Store(&mut out),
        );
        out
    }

    const SPECIAL: [f32; 8] = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        1.5,
        -2.0,
        3.0,
    ];

    fn same_bits(got: &[f32], want: impl Iterator<Item = f32>) {
        let want: Vec<f32> = want.collect();
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(got), bits(&want), "got {got:?}, want {want:?}");
    }

    #[test]
    fn a_mask_selects_lane_by_lane() {
        // where(x > 0, x, x * 0.1): NaN is not > 0, so it takes x * 0.1.
        let v = Value::Select(
            binary(BinaryOp::Gt, load(0), constant(0.0)),
            load(0),
            binary(BinaryOp::Mul, load(0), constant(0.1)),
        );
        let got = run(&v, &SPECIAL, &SPECIAL);
        same_bits(
            &got,
            SPECIAL.iter().map(|&x| if x > 0.0 { x } else { x * 0.1 }),
        );
        // where(x < y, 1.0, y) with both operands computed, then leaves.
        let y: Vec<f32> = SPECIAL.iter().rev().copied().collect();
        let v = Value::Select(
            binary(BinaryOp::Lt, load(0), load(1)),
            constant(1.0),
            load(1),
        );
        let got = run(&v, &SPECIAL, &y);
        same_bits(
            &got,
            SPECIAL
                .iter()
                .zip(&y)
                .map(|(&a, &b)| if a < b { 1.0 } else { b }),
        );
    }

    #[test]
    fn a_comparison_cast_to_f32_is_one_or_zero() {
        for op in [BinaryOp::Eq, BinaryOp::Ne, BinaryOp::Le, BinaryOp::Ge] {
            let cmp = binary(op, load(0), binary(BinaryOp::Add, load(1), constant(0.0)));
            let v = Value::Cast(DType::F32, cmp);
            let y: Vec<f32> = SPECIAL.iter().rev().copied().collect();
            let got = run(&v, &SPECIAL, &y);
            let want = SPECIAL.iter().zip(&y).map(|(&a, &b)| {
                let t = tilefuse_ir::binary_scalar(op, Scalar::F(a.into()), Scalar::F(b.into()));
                if t == Scalar::B(true) { 1.0 } else { 0.0 }
            });
            same_bits(&got, want);
        }
    }

    #[test]
    fn masks_are_not_arithmetic_and_stores_are_f32() {
        let dtypes = [DType::F32; 3];
        let mask = || binary(BinaryOp::Gt, load(0), constant(0.0));
        // A bool is neither added nor stored as f32 without a cast.
        assert!(Tape::compile(&binary(BinaryOp::Add, mask(), load(0)), 2, &dtypes).is_none());
        assert!(Tape::compile(&mask(), 2, &dtypes).is_none());
        // Nor is an integer load a tape's, in a comparison or not.
        let ints = [DType::F32, DType::I32, DType::F32];
        let v = Value::Cast(DType::F32, binary(BinaryOp::Gt, load(1), load(1)));
        assert!(Tape::compile(&v, 2, &ints).is_none());
    }
}
