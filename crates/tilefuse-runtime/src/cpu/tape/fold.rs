//! Parts of a tape's expression that read nothing but uniforms, evaluated
//! once per run instead of once per lane: a layer norm's normalizing nest
//! over rows longer than a tile computed `rsqrt(var / n + eps)` and
//! `mean / n` for every lane from its row's two statistics, half of that
//! nest's arithmetic.

use super::{Op, Operand, REGISTERS, SOURCES, TILE, step};

/// A part reads no loads: these stand for them without being built on
/// every run (most runs have no part at all).
const NO_LOADS: [&[f32]; SOURCES] = [&[]; SOURCES];
const NO_WRAPS: [usize; SOURCES] = [usize::MAX; SOURCES];

/// A tape's ops with its uniform-only parts taken out.
#[derive(Debug, Default)]
pub(super) struct Folded {
    /// Each part's ops, run on one lane, and the register its value ends
    /// in: that value becomes the uniform numbered after the tape's own
    /// uniforms and the parts before it.
    parts: Vec<(Vec<Op>, u8)>,
    /// The ops run on every lane, each part replaced by a read of its
    /// uniform.
    pub(super) ops: Vec<Op>,
}

impl Folded {
    /// `ops` (over `uniforms` uniforms) with each maximal part that reads
    /// only uniforms and does some arithmetic taken out, as many as the
    /// uniform slots hold.
    pub(super) fn of(ops: &[Op], uniforms: usize) -> Folded {
        let mut parts = Vec::new();
        let mut out: Vec<Op> = Vec::with_capacity(ops.len());
        let mut at = 0;
        for (start, end, reg) in uniform_parts(ops) {
            let derived = uniforms + parts.len();
            if derived >= SOURCES {
                break;
            }
            out.extend_from_slice(&ops[at..start]);
            out.push(Op::Set {
                dst: reg,
                src: Operand::Uniform(derived as u8),
            });
            parts.push((ops[start..end].to_vec(), reg));
            at = end;
        }
        out.extend_from_slice(&ops[at..]);
        Folded {
            parts,
            ops: read_in_place(out),
        }
    }

    /// Evaluates the parts into `uniforms` after the tape's `own` ones,
    /// on lane 0 of `tiles`.
    pub(super) fn evaluate(
        &self,
        tiles: &mut [[f32; TILE]; REGISTERS],
        uniforms: &mut [f32; SOURCES],
        own: usize,
    ) {
        for (i, (ops, reg)) in self.parts.iter().enumerate() {
            let (scratch, above) = tiles.split_first_mut().expect("registers exist");
            for op in ops {
                step(
                    op,
                    &mut scratch[..1],
                    above,
                    (&NO_LOADS, &NO_WRAPS),
                    uniforms,
                    0,
                );
            }
            uniforms[own + i] = match reg {
                0 => scratch[0],
                r => above[usize::from(*r) - 1][0],
            };
        }
    }
}

/// Where a register is written by the ops from `start` on and whether
/// what it holds reads only uniforms.
#[derive(Clone, Copy, Default)]
struct Held {
    start: usize,
    uniform: bool,
}

/// The ranges `start..end` of `ops` that compute a register (the third
/// item) from uniforms alone and end where a lane-varying value first
/// meets it; a lone copy of a uniform is left out (it is a read already).
/// A tape is compiled as a stack, so a register's value is the ops from
/// where it was set to where it is consumed.
fn uniform_parts(ops: &[Op]) -> Vec<(usize, usize, u8)> {
    let mut held = [Held::default(); REGISTERS];
    let mut parts = Vec::new();
    let is_uniform = |x: Operand, held: &[Held; REGISTERS]| match x {
        Operand::Uniform(_) => true,
        Operand::Load(_) => false,
        Operand::Reg(r) => held[usize::from(r)].uniform,
    };
    let mut take = |reg: u8, end: usize, held: &[Held; REGISTERS]| {
        let h = held[usize::from(reg)];
        let lone_copy = end == h.start + 1 && matches!(ops[h.start], Op::Set { .. });
        if h.uniform && !lone_copy {
            parts.push((h.start, end, reg));
        }
    };
    for (i, op) in ops.iter().enumerate() {
        let (dst, uniform) = match *op {
            Op::Set { dst, src } => (dst, is_uniform(src, &held)),
            Op::Apply { dst, lhs, rhs, .. } => {
                (dst, is_uniform(lhs, &held) && is_uniform(rhs, &held))
            }
            Op::Unary { dst, .. } => (dst, held[usize::from(dst)].uniform),
            Op::Binary { dst, rhs, .. } => {
                let (mine, theirs) = (held[usize::from(dst)].uniform, is_uniform(rhs, &held));
                if mine && !theirs {
                    // Up to the ops computing `rhs`, where there are.
                    let end = match rhs {
                        Operand::Reg(r) => held[usize::from(r)].start,
                        _ => i,
                    };
                    take(dst, end, &held);
                }
                if let Operand::Reg(r) = rhs
                    && theirs
                    && !mine
                {
                    take(r, i, &held);
                }
                (dst, mine && theirs)
            }
        };
        if matches!(op, Op::Set { .. } | Op::Apply { .. }) {
            held[usize::from(dst)].start = i;
        }
        held[usize::from(dst)].uniform = uniform;
    }
    take(0, ops.len(), &held);
    parts.sort_unstable();
    parts
}

/// `ops` where a register set from a uniform only to be consumed by the
/// next op reads the uniform there instead (no tile filled with it).
fn read_in_place(ops: Vec<Op>) -> Vec<Op> {
    let mut out: Vec<Op> = Vec::with_capacity(ops.len());
    for op in ops {
        let merged = match (out.last(), op) {
            (
                Some(&Op::Set {
                    dst: set,
                    src: src @ Operand::Uniform(_),
                }),
                Op::Binary {
                    op,
                    dst,
                    rhs: Operand::Reg(r),
                    swap,
                },
            ) if r == set && dst < set => Some(Op::Binary {
                op,
                dst,
                rhs: src,
                swap,
            }),
            (
                Some(&Op::Set {
                    dst: set,
                    src: src @ Operand::Uniform(_),
                }),
                Op::Binary { op, dst, rhs, swap },
            ) if dst == set && !matches!(rhs, Operand::Reg(_)) => {
                let (lhs, rhs) = if swap { (rhs, src) } else { (src, rhs) };
                Some(Op::Apply { op, dst, lhs, rhs })
            }
            _ => None,
        };
        match merged {
            Some(m) => *out.last_mut().expect("merged with it") = m,
            None => out.push(op),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use tilefuse_ir::{BinaryOp, UnaryOp};

    use super::*;
    use crate::cpu::tape::Registers;

    const fn load(i: u8) -> Operand {
        Operand::Load(i)
    }

    const fn uniform(i: u8) -> Operand {
        Operand::Uniform(i)
    }

    fn binary(op: BinaryOp, dst: u8, rhs: Operand, swap: bool) -> Op {
        Op::Binary { op, dst, rhs, swap }
    }

    fn apply(op: BinaryOp, dst: u8, lhs: Operand, rhs: Operand) -> Op {
        Op::Apply { op, dst, lhs, rhs }
    }

    /// The ops `Tape::compile` emits for `(x - u0) * rsqrt(u1 * u2 + u3)`.
    fn normalize() -> Vec<Op> {
        vec![
            apply(BinaryOp::Sub, 0, load(0), uniform(0)),
            apply(BinaryOp::Mul, 1, uniform(1), uniform(2)),
            binary(BinaryOp::Add, 1, uniform(3), false),
            Op::Unary {
                op: UnaryOp::Rsqrt,
                dst: 1,
            },
            binary(BinaryOp::Mul, 0, Operand::Reg(1), false),
        ]
    }

    #[test]
    fn a_uniform_operand_is_computed_once_and_read_where_it_is_used() {
        assert_eq!(uniform_parts(&normalize()), [(1, 4, 1)]);
        let folded = Folded::of(&normalize(), 4);
        let want = [
            apply(BinaryOp::Sub, 0, load(0), uniform(0)),
            binary(BinaryOp::Mul, 0, uniform(4), false),
        ];
        assert_eq!(format!("{:?}", folded.ops), format!("{want:?}"));
        let mut uniforms = [0.0; SOURCES];
        uniforms[..4].copy_from_slice(&[7.0, 2.0, 8.0, 0.0]);
        let mut regs = Registers::default();
        folded.evaluate(&mut regs.tiles, &mut uniforms, 4);
        assert_eq!(uniforms[4], 0.25);
    }

    #[test]
    fn a_uniform_value_meeting_a_load_is_folded_up_to_it() {
        // rsqrt(u0) * x, then (1 + u0) * (x + 1): each left operand once.
        let ops = [
            Op::Set {
                dst: 0,
                src: uniform(0),
            },
            Op::Unary {
                op: UnaryOp::Rsqrt,
                dst: 0,
            },
            binary(BinaryOp::Mul, 0, load(0), true),
        ];
        let folded = Folded::of(&ops, 1);
        let want = [apply(BinaryOp::Mul, 0, load(0), uniform(1))];
        assert_eq!(format!("{:?}", folded.ops), format!("{want:?}"));
        let ops = [
            apply(BinaryOp::Add, 0, uniform(0), uniform(1)),
            apply(BinaryOp::Add, 1, load(0), uniform(1)),
            binary(BinaryOp::Mul, 0, Operand::Reg(1), false),
        ];
        assert_eq!(uniform_parts(&ops), [(0, 1, 0)]);
    }

    #[test]
    fn copies_and_lane_values_stay_and_a_wholly_uniform_tape_is_one_read() {
        let ops = [
            Op::Set {
                dst: 0,
                src: uniform(0),
            },
            binary(BinaryOp::Add, 0, load(0), false),
        ];
        assert!(uniform_parts(&ops).is_empty());
        // (The copy is read in place, as `Tape::compile` would for two leaves.)
        let want = [apply(BinaryOp::Add, 0, uniform(0), load(0))];
        assert_eq!(
            format!("{:?}", Folded::of(&ops, 1).ops),
            format!("{want:?}")
        );
        let ops = [apply(BinaryOp::Mul, 0, uniform(0), uniform(1))];
        let folded = Folded::of(&ops, 2);
        let want = [Op::Set {
            dst: 0,
            src: uniform(2),
        }];
        assert_eq!(format!("{:?}", folded.ops), format!("{want:?}"));
        // No slot left for a derived uniform: nothing is folded.
        assert_eq!(Folded::of(&ops, SOURCES).parts.len(), 0);
    }
}
