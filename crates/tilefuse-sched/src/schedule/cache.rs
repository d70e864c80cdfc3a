//! `cache_read` and `cache_write`: stage a buffer through a copy in another
//! scope (workgroup or private memory). The copy starts as a full-size
//! buffer in its own loop nest; `compute_at` / `reverse_compute_at` then
//! move the copy next to its user, and buffer realization shrinks it to
//! what one workgroup (or invocation) touches. `set_scope` moves a block's
//! own output instead.

use super::{Instruction, Result, Schedule, ScheduleError};
use crate::ir::{Block, BlockId, Buffer, BufferId, Expr, Index, IterVar, Role, Scope, Var};

fn scope_suffix(scope: Scope) -> &'static str {
    match scope {
        Scope::Global => "global",
        Scope::Workgroup => "wg",
        Scope::Private => "local",
    }
}

impl Schedule {
    /// Makes `block` read `buffer` through a copy in `scope`, filled by a
    /// new copy block in its own nest just before `block`'s. Other readers
    /// keep reading `buffer`. Returns the copy block.
    ///
    /// Preconditions: `block` is in the schedule and reads `buffer`; for a
    /// copy in global memory, no block in `block`'s loop nest writes
    /// `buffer` (the copy, before the nest, would read it unwritten; a copy
    /// elsewhere is refused by buffer realization until `compute_at` moves
    /// it into the nest).
    pub fn cache_read(&mut self, block: BlockId, buffer: &str, scope: Scope) -> Result<BlockId> {
        const P: &str = "cache_read";
        self.check_block(block)?;
        let b = self.kernel.block(block).clone();
        let source = self.buffer_read_by(P, &b, buffer)?;
        let writer = match scope {
            Scope::Global => self.nest_mate(block, |m| m.buffer == source),
            _ => None,
        };
        if let Some(writer) = writer {
            return Err(ScheduleError::pre(
                P,
                format!(
                    "block {writer} writes {buffer} inside block {}'s loop nest, and a copy in \
                     global memory would run before the nest",
                    b.name
                ),
            )
            .blocks([b.name, writer]));
        }
        let cache = self.add_cache_buffer(source, scope);
        let value = b.value.map_loads(&mut |buf, indices| Expr::Load {
            buffer: if buf == source { cache } else { buf },
            indices: indices.to_vec(),
        });
        self.kernel.block_mut(block).value = value;
        let copy = self.copy_block(source, cache, self.kernel.buffer(cache).name.clone());
        let node = self.kernel.add_nest(copy);
        let root = self.root_index(block);
        self.kernel.body.insert(root, node);
        self.record(Instruction::CacheRead {
            block,
            buffer: buffer.to_owned(),
            scope,
        });
        Ok(self.last_block())
    }

    /// Makes `block` write into a copy in `scope`, copied to its buffer by
    /// a new block in its own nest just after `block`'s. Returns the copy
    /// block.
    ///
    /// Preconditions: `block` is in the schedule and the only writer of
    /// its buffer (another, such as a reduction's init, would write the
    /// buffer while `block` writes the copy), and no block in its loop nest
    /// reads the buffer (the copy back, after the nest, would come late).
    pub fn cache_write(&mut self, block: BlockId, scope: Scope) -> Result<BlockId> {
        const P: &str = "cache_write";
        self.check_block(block)?;
        self.check_sole_writer(P, block)?;
        let target = self.kernel.block(block).buffer;
        if let Some(reader) = self.nest_mate(block, |m| m.reads(target)) {
            let name = self.block_name(block);
            return Err(ScheduleError::pre(
                P,
                format!(
                    "block {reader} reads {} inside block {name}'s loop nest, before the copy \
                     back would run (cache_write before compute_at / reverse_compute_at)",
                    self.kernel.buffer(target).name
                ),
            )
            .blocks([name, reader]));
        }
        let cache = self.add_cache_buffer(target, scope);
        self.kernel.block_mut(block).buffer = cache;
        let copy = self.copy_block(cache, target, self.kernel.buffer(cache).name.clone());
        let node = self.kernel.add_nest(copy);
        let root = self.root_index(block);
        self.kernel.body.insert(root + 1, node);
        self.record(Instruction::CacheWrite { block, scope });
        Ok(self.last_block())
    }

    /// Moves the buffer `block` writes to `scope` (TVM's `set_scope`):
    /// buffer realization then sizes it to what its users share, e.g. a
    /// row of partial sums in workgroup memory, or a per-invocation copy of
    /// a row statistic every invocation computes.
    ///
    /// Preconditions: `block` is in the schedule and writes an
    /// intermediate (not a fusion input or output).
    pub fn set_scope(&mut self, block: BlockId, scope: Scope) -> Result<()> {
        self.check_block(block)?;
        let buffer = self.kernel.block(block).buffer;
        let buf = self.kernel.buffer(buffer);
        if buf.role != Role::Temp {
            return Err(ScheduleError::pre(
                "set_scope",
                format!(
                    "block {} writes {}, a fusion {}; only intermediates can change scope",
                    self.block_name(block),
                    buf.name,
                    if matches!(buf.role, Role::Input(_)) {
                        "input"
                    } else {
                        "output"
                    }
                ),
            )
            .blocks([self.block_name(block)]));
        }
        self.kernel.buffers[buffer.0 as usize].scope = scope;
        self.record(Instruction::SetScope { block, scope });
        Ok(())
    }

    /// The name of a block other than `block` in `block`'s root loop nest
    /// for which `f` holds.
    fn nest_mate(&self, block: BlockId, f: impl Fn(&Block) -> bool) -> Option<String> {
        let mut mates = Vec::new();
        self.kernel.body[self.root_index(block)].blocks(&mut mates);
        mates
            .into_iter()
            .find(|&m| m != block && f(self.kernel.block(m)))
            .map(|m| self.block_name(m))
    }

    fn buffer_read_by(&self, primitive: &'static str, b: &Block, name: &str) -> Result<BufferId> {
        let mut loads = Vec::new();
        b.value.loads(&mut loads);
        let mut names: Vec<&str> = loads
            .iter()
            .map(|(buf, _)| self.kernel.buffer(*buf).name.as_str())
            .collect();
        names.dedup();
        loads
            .iter()
            .map(|(buf, _)| *buf)
            .find(|&buf| self.kernel.buffer(buf).name == name)
            .ok_or_else(|| {
                ScheduleError::pre(
                    primitive,
                    format!(
                        "block {} does not read {name:?}; it reads {}",
                        b.name,
                        names.join(", ")
                    ),
                )
                .blocks([b.name.clone()])
            })
    }

    fn add_cache_buffer(&mut self, of: BufferId, scope: Scope) -> BufferId {
        let src = self.kernel.buffer(of).clone();
        let base = format!("{}_{}", src.name, scope_suffix(scope));
        // The copy block takes the buffer's name: neither may be taken.
        let name = self.kernel.fresh_block_name(&base);
        self.kernel.buffers.push(Buffer {
            name,
            dtype: src.dtype,
            shape: src.shape,
            scope,
            role: Role::Temp,
            stages: None,
        });
        BufferId(self.kernel.buffers.len() as u32 - 1)
    }

    /// `to[v...] = from[v...]` over the whole buffer, named after the
    /// cache buffer (TVM's convention: `A_shared` fills `A_shared`, and
    /// `C_local` drains `C_local` into `C`).
    fn copy_block(&self, from: BufferId, to: BufferId, name: String) -> Block {
        let shape = &self.kernel.buffer(from).shape;
        let indices: Vec<Index> = (0..shape.len())
            .map(|i| Index::var(Var::Iter(i as u32)))
            .collect();
        Block {
            name,
            iters: IterVar::spatial(shape),
            bindings: Vec::new(),
            buffer: to,
            indices: indices.clone(),
            value: Expr::Load {
                buffer: from,
                indices,
            },
            reduce: None,
            init: false,
            predicates: Vec::new(),
        }
    }

    fn last_block(&self) -> BlockId {
        BlockId(self.kernel.blocks.len() as u32 - 1)
    }
}
