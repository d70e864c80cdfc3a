//! Parts of a tape's expression that read nothing but uniforms, evaluated
//! once per run instead of once per lane: a layer norm's normalizing nest
//! over rows longer than a tile computed `rsqrt(var / n + eps)` and
//! `mean / n` for every lane from its row's two statistics, half of that
//! nest's arithmetic. Over shorter rows, which a run spans several of,
//! the statistics are loads of one element a row (`LaneLoad` with stride
//! 0); parts that read those and uniforms are evaluated once a row, over
//! the run's rows side by side, and their values filled into the lanes as
//! the statistics were (an RMS norm over rows of 64 computed its
//! `rsqrt(ms + eps)` for each of a row's lanes: 40 % of its time).
#![allow(unsafe_code)]

use super::lane_load::{LaneLoad, rows_spanned, spread};
use super::{Offsets, Op, Operand, REGISTERS, SOURCES, TILE, step};
use crate::cpu::memory::RawBuf;

/// A part reads no loads: these stand for them without being built on
/// every run (most runs have no part at all).
const NO_LOADS: [&[f32]; SOURCES] = [&[]; SOURCES];
const NO_WRAPS: [usize; SOURCES] = [usize::MAX; SOURCES];

/// A tape's ops with its lane-invariant parts taken out.
#[derive(Debug, Default)]
pub(super) struct Folded {
    /// Each uniform-only part's ops, run on one lane, and the register
    /// its value ends in: that value becomes the uniform numbered after
    /// the tape's own uniforms and the parts before it.
    parts: Vec<(Vec<Op>, u8)>,
    /// Each part that reads row statistics (and perhaps uniforms), run on
    /// one lane a row, and the register its value ends in: its values
    /// become the load numbered after the tape's own loads and the row
    /// parts before it.
    rows: Vec<(Vec<Op>, u8)>,
    /// The tape's loads that are row statistics of `period` lanes, as
    /// bits (only one period's are: a run's rows are that period's).
    stats: u16,
    period: usize,
    /// The tape's loads that `ops` read, as bits (the others only feed
    /// row parts, and are not gathered).
    reads: u16,
    /// The ops run on every lane, each part replaced by a read of its
    /// uniform or load.
    pub(super) ops: Vec<Op>,
}

impl Folded {
    /// `ops` (over `uniforms` uniforms and `loads`) with each maximal part
    /// that reads only uniforms and row statistics and does some
    /// arithmetic taken out, as many as the slots hold.
    pub(super) fn of(ops: &[Op], uniforms: usize, loads: &[LaneLoad]) -> Folded {
        let is_stat = |l: &LaneLoad| l.stride == 0 && l.wraps();
        let period = loads.iter().find(|l| is_stat(l)).map_or(0, |l| l.period);
        let stats = bits(loads.iter().map(|l| is_stat(l) && l.period == period));
        let mut folded = Folded {
            stats,
            period,
            ..Folded::default()
        };
        let mut out: Vec<Op> = Vec::with_capacity(ops.len());
        let mut at = 0;
        for (start, end, reg) in invariant_parts(ops, |i| stats & (1 << i) != 0) {
            let part = (ops[start..end].to_vec(), reg);
            let src = match part.0.iter().any(reads_a_load) {
                true if loads.len() + folded.rows.len() < SOURCES => {
                    folded.rows.push(part);
                    Operand::Load((loads.len() + folded.rows.len() - 1) as u8)
                }
                false if uniforms + folded.parts.len() < SOURCES => {
                    folded.parts.push(part);
                    Operand::Uniform((uniforms + folded.parts.len() - 1) as u8)
                }
                _ => continue,
            };
            out.extend_from_slice(&ops[at..start]);
            out.push(Op::Set { dst: reg, src });
            at = end;
        }
        out.extend_from_slice(&ops[at..]);
        folded.ops = read_in_place(out);
        let read = |i: usize| {
            folded
                .ops
                .iter()
                .any(|op| operands(op).contains(&Some(Operand::Load(i as u8))))
        };
        folded.reads = bits((0..loads.len()).map(read));
        folded
    }

    /// Whether the lanes read the tape's load `i` (else it is not gathered).
    pub(super) fn reads(&self, i: usize) -> bool {
        self.reads & (1 << i) != 0
    }

    /// Whether the tape's load `i` is a row statistic that row parts read.
    fn stat(&self, i: usize) -> bool {
        self.stats & (1 << i) != 0
    }

    /// Evaluates the parts into `uniforms` after the tape's `own` ones,
    /// on lane 0 of `tiles`.
    pub(super) fn evaluate(
        &self,
        tiles: &mut [[f32; TILE]; REGISTERS],
        uniforms: &mut [f32; SOURCES],
        own: usize,
    ) {
        // One lane, written out: through `run_part`, whose lanes are not
        // a constant, a layer norm over rows of 1024 (a run a row) took
        // 1.05-1.1x the time, inlined or not.
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

    /// Appends to `into`, for each row part, its value on the lanes
    /// `start..start + n`, each row's value on its lanes: evaluated once a
    /// row, over the rows the lanes span side by side, from the row
    /// statistics gathered one a row into `rows`.
    pub(super) fn fill_rows(
        &self,
        loads: &[LaneLoad],
        (buffers, offsets, uniforms): (&[RawBuf], &Offsets, &[f32; SOURCES]),
        (start, n): (usize, usize),
        (tiles, rows): (&mut [[f32; TILE]; REGISTERS], &mut Vec<f32>),
        into: &mut Vec<f32>,
    ) {
        if self.rows.is_empty() || n == 0 {
            return;
        }
        let count = rows_spanned(self.period, (start, n));
        rows.clear();
        let mut stat_at = [0; SOURCES];
        for (i, load) in loads.iter().enumerate().filter(|&(i, _)| self.stat(i)) {
            stat_at[i] = rows.len();
            let (buf, at) = (&buffers[load.buffer], offsets.loads[i] as usize);
            // SAFETY: the rows' statistics, as the lanes' gather reads them.
            unsafe { load.gather_rows(buf, at, (start, n), rows) };
        }
        let values = rows.len();
        for (ops, reg) in &self.rows {
            for lo in (0..count).step_by(TILE) {
                let len = TILE.min(count - lo);
                let mut stats = NO_LOADS;
                for (i, slot) in stats.iter_mut().enumerate() {
                    if self.stat(i) {
                        *slot = &rows[stat_at[i] + lo..stat_at[i] + lo + len];
                    }
                }
                let value = run_part(ops, *reg, tiles, (&stats, uniforms), len);
                rows.extend_from_slice(value);
            }
        }
        for part in rows[values..].chunks_exact(count) {
            spread(part, self.period, start, n, into);
        }
    }
}

/// Runs a part's `ops` on the first `len` lanes of `tiles` (`loads` one
/// value a lane, none wrapping); its value, in register `reg`.
fn run_part<'t>(
    ops: &[Op],
    reg: u8,
    tiles: &'t mut [[f32; TILE]; REGISTERS],
    (loads, uniforms): (&[&[f32]; SOURCES], &[f32; SOURCES]),
    len: usize,
) -> &'t [f32] {
    let (scratch, above) = tiles.split_first_mut().expect("registers exist");
    for op in ops {
        step(
            op,
            &mut scratch[..len],
            above,
            (loads, &NO_WRAPS),
            uniforms,
            0,
        );
    }
    match reg {
        0 => &scratch[..len],
        r => &above[usize::from(r) - 1][..len],
    }
}

/// The flags as bits, the first lowest.
fn bits(flags: impl Iterator<Item = bool>) -> u16 {
    flags
        .enumerate()
        .fold(0, |acc, (i, f)| acc | (u16::from(f) << i))
}

/// The operands an op reads (`None` where it has fewer than two).
fn operands(op: &Op) -> [Option<Operand>; 2] {
    match *op {
        Op::Set { src, .. } => [Some(src), None],
        Op::Binary { rhs, .. } => [Some(rhs), None],
        Op::Apply { lhs, rhs, .. } => [Some(lhs), Some(rhs)],
        Op::Select {
            on_true, on_false, ..
        } => [Some(on_true), Some(on_false)],
        Op::Unary { .. } | Op::Round { .. } => [None, None],
    }
}

/// Whether an op reads a load.
fn reads_a_load(op: &Op) -> bool {
    operands(op)
        .iter()
        .any(|x| matches!(x, Some(Operand::Load(_))))
}

/// Where a register is written by the ops from `start` on and whether
/// what it holds is the same on every lane (of a row).
#[derive(Clone, Copy, Default)]
struct Held {
    start: usize,
    invariant: bool,
}

/// The ranges `start..end` of `ops` that compute a register (the third
/// item) from uniforms and the loads `invariant` names alone and end
/// where a lane-varying value first meets it; a lone copy of one is left
/// out (it is a read already).
/// A tape is compiled as a stack, so a register's value is the ops from
/// where it was set to where it is consumed.
fn invariant_parts(ops: &[Op], invariant: impl Fn(u8) -> bool) -> Vec<(usize, usize, u8)> {
    let mut held = [Held::default(); REGISTERS];
    let mut parts = Vec::new();
    let is_invariant = |x: Operand, held: &[Held; REGISTERS]| match x {
        Operand::Uniform(_) => true,
        Operand::Load(i) => invariant(i),
        Operand::Reg(r) => held[usize::from(r)].invariant,
    };
    let mut take = |reg: u8, end: usize, held: &[Held; REGISTERS]| {
        let h = held[usize::from(reg)];
        let lone_copy = end == h.start + 1 && matches!(ops[h.start], Op::Set { .. });
        if h.invariant && !lone_copy {
            parts.push((h.start, end, reg));
        }
    };
    for (i, op) in ops.iter().enumerate() {
        let (dst, same) = match *op {
            Op::Set { dst, src } => (dst, is_invariant(src, &held)),
            Op::Apply { dst, lhs, rhs, .. } => {
                (dst, is_invariant(lhs, &held) && is_invariant(rhs, &held))
            }
            Op::Unary { dst, .. } | Op::Round { dst, .. } => {
                (dst, held[usize::from(dst)].invariant)
            }
            // Its invariant operands are not taken out on their own (a
            // mask's parts are rarely worth it): computed with each tile.
            Op::Select {
                dst,
                on_true,
                on_false,
            } => (
                dst,
                held[usize::from(dst)].invariant
                    && is_invariant(on_true, &held)
                    && is_invariant(on_false, &held),
            ),
            Op::Binary { dst, rhs, .. } => {
                let (mine, theirs) = (held[usize::from(dst)].invariant, is_invariant(rhs, &held));
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
        held[usize::from(dst)].invariant = same;
    }
    take(0, ops.len(), &held);
    parts.sort_unstable();
    parts
}

/// `ops` where a register set from a uniform or a load only to be
/// consumed by the next op reads it there instead (no tile filled with
/// it: a part's value is one of these).
fn read_in_place(ops: Vec<Op>) -> Vec<Op> {
    let mut out: Vec<Op> = Vec::with_capacity(ops.len());
    for op in ops {
        let merged = match (out.last(), op) {
            (
                Some(&Op::Set {
                    dst: set,
                    src: src @ (Operand::Uniform(_) | Operand::Load(_)),
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
                    src: src @ (Operand::Uniform(_) | Operand::Load(_)),
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
    use tilefuse_ir::{BinaryOp, DataRef, UnaryOp};
    use tilefuse_sched::ir::Index;

    use super::*;
    use crate::cpu::loop_index::LoopIndex;
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
        normalize_over([uniform(0), uniform(1), uniform(2), uniform(3)])
    }

    /// The same over any operands: `(x - a) * rsqrt(b * c + d)`.
    fn normalize_over([a, b, c, d]: [Operand; 4]) -> Vec<Op> {
        vec![
            apply(BinaryOp::Sub, 0, load(0), a),
            apply(BinaryOp::Mul, 1, b, c),
            binary(BinaryOp::Add, 1, d, false),
            Op::Unary {
                op: UnaryOp::Rsqrt,
                dst: 1,
            },
            binary(BinaryOp::Mul, 0, Operand::Reg(1), false),
        ]
    }

    #[test]
    fn a_uniform_operand_is_computed_once_and_read_where_it_is_used() {
        assert_eq!(invariant_parts(&normalize(), |_| false), [(1, 4, 1)]);
        let folded = Folded::of(&normalize(), 4, &[]);
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
        let folded = Folded::of(&ops, 1, &[]);
        let want = [apply(BinaryOp::Mul, 0, load(0), uniform(1))];
        assert_eq!(format!("{:?}", folded.ops), format!("{want:?}"));
        let ops = [
            apply(BinaryOp::Add, 0, uniform(0), uniform(1)),
            apply(BinaryOp::Add, 1, load(0), uniform(1)),
            binary(BinaryOp::Mul, 0, Operand::Reg(1), false),
        ];
        assert_eq!(invariant_parts(&ops, |_| false), [(0, 1, 0)]);
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
        assert!(invariant_parts(&ops, |_| false).is_empty());
        // (The copy is read in place, as `Tape::compile` would for two leaves.)
        let want = [apply(BinaryOp::Add, 0, uniform(0), load(0))];
        assert_eq!(
            format!("{:?}", Folded::of(&ops, 1, &[]).ops),
            format!("{want:?}")
        );
        let ops = [apply(BinaryOp::Mul, 0, uniform(0), uniform(1))];
        let folded = Folded::of(&ops, 2, &[]);
        let want = [Op::Set {
            dst: 0,
            src: uniform(2),
        }];
        assert_eq!(format!("{:?}", folded.ops), format!("{want:?}"));
        // No slot left for a derived uniform: nothing is folded.
        assert_eq!(Folded::of(&ops, SOURCES, &[]).parts.len(), 0);
    }

    /// A load of one element a row of 3 lanes (`step` elements apart).
    fn statistic(step: usize) -> LaneLoad {
        LaneLoad {
            period: 3,
            step,
            ..LaneLoad::strided(1, LoopIndex::new(Index::Const(0)), 0)
        }
    }

    /// `(x - s0) * rsqrt(s1 * u1 + u2)` over a load `x` and two row
    /// statistics: `rsqrt(...)` is a row part, read as the load after the
    /// tape's; `s0` meets `x` alone and stays a load the lanes read, `s1`
    /// feeds only the part and is not gathered.
    #[test]
    fn a_part_over_row_statistics_is_a_load_filled_once_a_row() {
        let ops = normalize_over([load(1), load(2), uniform(1), uniform(2)]);
        let x = LaneLoad::strided(0, LoopIndex::new(Index::Const(0)), 1);
        let loads = [x, statistic(1), statistic(2)];
        let folded = Folded::of(&ops, 3, &loads);
        let want = [
            apply(BinaryOp::Sub, 0, load(0), load(1)),
            binary(BinaryOp::Mul, 0, load(3), false),
        ];
        assert_eq!(format!("{:?}", folded.ops), format!("{want:?}"));
        assert_eq!(
            (0..3).map(|i| folded.reads(i)).collect::<Vec<_>>(),
            [true, true, false]
        );
        // Rows of 3 from lane 2: lanes 2..9 span rows 0 to 2; s1 of row r
        // is element 2r of the statistics' buffer.
        let stats: Vec<f32> = (0..8).map(|i| i as f32).collect();
        let buffers = [
            RawBuf::of_input(DataRef::F32(&[])),
            RawBuf::of_input(DataRef::F32(&stats)),
        ];
        let mut uniforms = [0.0; SOURCES];
        uniforms[1..3].copy_from_slice(&[0.5, 1.0]);
        let (mut regs, mut into) = (Registers::default(), vec![-1.0]);
        let sources = (&buffers[..], &Offsets::default(), &uniforms);
        let scratch = (&mut *regs.tiles, &mut regs.rows);
        folded.fill_rows(&loads, sources, (2, 7), scratch, &mut into);
        let row = |r: usize| 1.0 / (2.0 * r as f32 * 0.5 + 1.0f32).sqrt();
        let want: Vec<f32> = std::iter::once(-1.0)
            .chain((2..9).map(|lane| row(lane / 3)))
            .collect();
        assert_eq!(into, want);
    }

    /// Statistics of another period than the first's are not the run's
    /// rows: parts over them stay on the lanes.
    #[test]
    fn statistics_of_another_period_stay_on_the_lanes() {
        let ops = [apply(BinaryOp::Mul, 0, load(0), load(1))];
        let other = LaneLoad {
            period: 4,
            ..statistic(1)
        };
        let folded = Folded::of(&ops, 0, &[statistic(1), other]);
        assert_eq!(format!("{:?}", folded.ops), format!("{ops:?}"));
        assert!(folded.rows.is_empty());
        let folded = Folded::of(&ops, 0, &[statistic(1), statistic(0)]);
        assert_eq!(folded.rows.len(), 1);
    }
}
