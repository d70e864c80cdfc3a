//! A trace printed as a Python script (TVM's `Trace.as_python`): run with
//! `f` bound to the fusion, it rebuilds the same schedule with the
//! primitives a user calls. Blocks are named by their names; a loop is
//! bound to `l{id}` where a primitive returns it, or fetched with
//! `s.get_loops(block)[depth]` just before its first use.

use std::collections::HashSet;
use std::fmt::Write;

use serde::Serialize;

use super::trace::Instruction;
use super::{Result, Schedule};
use crate::ir::{BlockId, LoopId};

impl Schedule {
    /// The trace as a runnable Python script over `f`, the fusion this
    /// schedule was made for (see the module docs).
    pub fn trace_as_python(&self) -> Result<String> {
        let mut replay = Schedule::new(self.fusion());
        let mut py = Printer {
            out: String::from("s = f.create_schedule()\n"),
            bound: HashSet::new(),
        };
        for inst in self.trace() {
            py.fetch_loops(&replay, inst);
            py.instruction(&mut replay, inst)?;
        }
        Ok(py.out)
    }
}

struct Printer {
    out: String,
    /// Loops with a Python variable.
    bound: HashSet<LoopId>,
}

/// A serde enum as its JSON string (`"workgroup.x"`, `"private"`).
fn tag(value: &impl Serialize) -> String {
    serde_json::to_string(value).expect("a serde enum")
}

fn loops(ls: &[LoopId]) -> String {
    let names: Vec<String> = ls.iter().map(|l| format!("l{}", l.0)).collect();
    names.join(", ")
}

impl Printer {
    fn line(&mut self, text: std::fmt::Arguments<'_>) {
        self.out.write_fmt(text).expect("writing to a String");
        self.out.push('\n');
    }

    /// `l{id} = s.get_loops("block")[depth]` for each loop `inst` uses that
    /// has no variable yet.
    fn fetch_loops(&mut self, s: &Schedule, inst: &Instruction) {
        for l in inst.loops() {
            if !self.bound.insert(l) {
                continue;
            }
            let k = s.kernel();
            let block = k.blocks_under(l)[0];
            let path = s.get_loops(block).expect("a live block");
            let depth = path.iter().position(|&p| p == l).expect("on the path");
            let name = &k.block(block).name;
            self.line(format_args!("l{} = s.get_loops({name:?})[{depth}]", l.0));
        }
    }

    /// Applies `inst` to `s` and prints its call, binding the loops it
    /// returns.
    fn instruction(&mut self, s: &mut Schedule, inst: &Instruction) -> Result<()> {
        let block = |s: &Schedule, b: &BlockId| format!("{:?}", s.block_name(*b));
        match inst {
            Instruction::Split {
                loop_,
                factors,
                names,
            } => {
                let parts = s.split(*loop_, factors, names.as_deref())?;
                self.bound.extend(&parts);
                let factors: Vec<String> = factors
                    .iter()
                    .map(|f| f.map_or("None".into(), |f| f.to_string()))
                    .collect();
                let names = names
                    .as_ref()
                    .map_or(String::new(), |n| format!(", names={n:?}"));
                self.line(format_args!(
                    "{}, = s.split(l{}, [{}]{names})",
                    loops(&parts),
                    loop_.0,
                    factors.join(", ")
                ));
                return Ok(());
            }
            Instruction::Fuse { loops: ls } => {
                let fused = s.fuse(ls)?;
                self.bound.insert(fused);
                self.line(format_args!("l{} = s.fuse({})", fused.0, loops(ls)));
                return Ok(());
            }
            Instruction::Reorder { loops: ls } => {
                self.line(format_args!("s.reorder({})", loops(ls)));
            }
            Instruction::Bind { loop_, axis } => {
                self.line(format_args!("s.bind(l{}, {})", loop_.0, tag(axis)));
            }
            Instruction::Parallel { loop_ } => self.line(format_args!("s.parallel(l{})", loop_.0)),
            Instruction::Vectorize { loop_ } => {
                self.line(format_args!("s.vectorize(l{})", loop_.0));
            }
            Instruction::Unroll { loop_ } => self.line(format_args!("s.unroll(l{})", loop_.0)),
            Instruction::Pipeline {
                loop_,
                stages,
                prefetch_gap,
            } => self.line(format_args!(
                "s.pipeline(l{}, stages={stages}, prefetch_gap={prefetch_gap})",
                loop_.0
            )),
            Instruction::Rfactor { loop_ } => self.line(format_args!("s.rfactor(l{})", loop_.0)),
            Instruction::DecomposeReduction { block: b, loop_ } => self.line(format_args!(
                "s.decompose_reduction({}, l{})",
                block(s, b),
                loop_.0
            )),
            Instruction::CacheRead {
                block: b,
                buffer,
                scope,
            } => self.line(format_args!(
                "s.cache_read({}, {buffer:?}, {})",
                block(s, b),
                tag(scope)
            )),
            Instruction::CacheWrite { block: b, scope } => {
                let b = block(s, b);
                self.line(format_args!("s.cache_write({b}, {})", tag(scope)));
            }
            Instruction::SetScope { block: b, scope } => {
                let b = block(s, b);
                self.line(format_args!("s.set_scope({b}, {})", tag(scope)));
            }
            Instruction::ComputeAt { block: b, loop_ } => {
                let b = block(s, b);
                self.line(format_args!("s.compute_at({b}, l{})", loop_.0));
            }
            Instruction::ReverseComputeAt { block: b, loop_ } => {
                let b = block(s, b);
                self.line(format_args!("s.reverse_compute_at({b}, l{})", loop_.0));
            }
            Instruction::ComputeInline { block: b } => {
                let b = block(s, b);
                self.line(format_args!("s.compute_inline({b})"));
            }
            Instruction::ReverseComputeInline { block: b } => {
                let b = block(s, b);
                self.line(format_args!("s.reverse_compute_inline({b})"));
            }
        }
        s.apply(inst)
    }
}

impl Instruction {
    /// The loops the instruction takes as arguments.
    pub fn loops(&self) -> Vec<LoopId> {
        match self {
            Instruction::Fuse { loops } | Instruction::Reorder { loops } => loops.clone(),
            Instruction::Split { loop_, .. }
            | Instruction::Bind { loop_, .. }
            | Instruction::Parallel { loop_ }
            | Instruction::Vectorize { loop_ }
            | Instruction::Unroll { loop_ }
            | Instruction::Pipeline { loop_, .. }
            | Instruction::Rfactor { loop_ }
            | Instruction::DecomposeReduction { loop_, .. }
            | Instruction::ComputeAt { loop_, .. }
            | Instruction::ReverseComputeAt { loop_, .. } => vec![*loop_],
            Instruction::CacheRead { .. }
            | Instruction::CacheWrite { .. }
            | Instruction::SetScope { .. }
            | Instruction::ComputeInline { .. }
            | Instruction::ReverseComputeInline { .. } => Vec::new(),
        }
    }
}
