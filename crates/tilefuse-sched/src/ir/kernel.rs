//! The kernel IR: buffers, loops and blocks arranged in a loop-nest tree
//! with plain sequential semantics (TensorIR's model). Loop kinds and
//! buffer scopes say how the nest maps onto hardware; they never change
//! what it computes, so any schedule can also run on the CPU.

use serde::{Deserialize, Serialize};
use tilefuse_ir::{DType, ReduceOp};

use super::expr::Expr;
use super::index::{BufferId, Index, LoopId, Var};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct BlockId(pub u32);

/// Where a buffer lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Device memory, visible to every workgroup (a storage binding).
    Global,
    /// Shared by the invocations of one workgroup (`var<workgroup>`).
    Workgroup,
    /// One invocation's registers (`var<function>`).
    Private,
}

/// How a loop bound to invocations combines the terms of a reduction it
/// carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrossInvocation {
    /// Each lane's term in its registers, combined by subgroup shuffles.
    Shuffles,
    /// Each lane's term already in a workgroup buffer (the partials of an
    /// `rfactor`), folded there in halves, a barrier per step.
    Tree,
}

/// What a buffer is to the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "role", content = "index")]
pub enum Role {
    Input(usize),
    Output(usize),
    /// An intermediate the runtime allocates.
    Temp,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buffer {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<u64>,
    pub scope: Scope,
    pub role: Role,
    /// Set by software pipelining (`Schedule::pipeline`, lowered after
    /// buffer realization): a leading dimension of `n` rotating stages
    /// over the iterations of the loop, each access's stage a function of
    /// that loop's variable.
    pub stages: Option<(LoopId, u64)>,
}

impl Buffer {
    pub fn numel(&self) -> u64 {
        self.shape.iter().product()
    }
}

/// A GPU thread axis a loop can be bound to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ThreadAxis {
    #[serde(rename = "workgroup.x")]
    WorkgroupX,
    #[serde(rename = "workgroup.y")]
    WorkgroupY,
    #[serde(rename = "workgroup.z")]
    WorkgroupZ,
    #[serde(rename = "invocation.x")]
    InvocationX,
    #[serde(rename = "invocation.y")]
    InvocationY,
    #[serde(rename = "invocation.z")]
    InvocationZ,
}

impl ThreadAxis {
    pub const ALL: [ThreadAxis; 6] = [
        ThreadAxis::WorkgroupX,
        ThreadAxis::WorkgroupY,
        ThreadAxis::WorkgroupZ,
        ThreadAxis::InvocationX,
        ThreadAxis::InvocationY,
        ThreadAxis::InvocationZ,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ThreadAxis::WorkgroupX => "workgroup.x",
            ThreadAxis::WorkgroupY => "workgroup.y",
            ThreadAxis::WorkgroupZ => "workgroup.z",
            ThreadAxis::InvocationX => "invocation.x",
            ThreadAxis::InvocationY => "invocation.y",
            ThreadAxis::InvocationZ => "invocation.z",
        }
    }

    pub fn parse(name: &str) -> Option<ThreadAxis> {
        ThreadAxis::ALL.into_iter().find(|a| a.name() == name)
    }

    pub fn is_workgroup(self) -> bool {
        matches!(
            self,
            ThreadAxis::WorkgroupX | ThreadAxis::WorkgroupY | ThreadAxis::WorkgroupZ
        )
    }

    /// 0, 1, 2 for x, y, z.
    pub fn dim(self) -> usize {
        match self {
            ThreadAxis::WorkgroupX | ThreadAxis::InvocationX => 0,
            ThreadAxis::WorkgroupY | ThreadAxis::InvocationY => 1,
            ThreadAxis::WorkgroupZ | ThreadAxis::InvocationZ => 2,
        }
    }
}

/// How a loop runs. None of these change the sequential meaning.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoopKind {
    Serial,
    Parallel,
    Vectorized,
    Unrolled,
    Bound(ThreadAxis),
    /// Serial (or `unrolled`), with the copies at the front of its body
    /// run `prefetch` iterations ahead into `stages` rotating buffers
    /// (`Schedule::pipeline`). Unrolled, each stage index is a constant:
    /// private stages then stay in registers.
    Pipelined {
        stages: u32,
        prefetch: u32,
        unrolled: bool,
    },
}

impl LoopKind {
    /// In words, as printed: `serial`, `unrolled`, `workgroup.x`,
    /// `pipelined: 3 stages, copies 1 ahead, unrolled`, ...
    pub fn describe(self) -> String {
        match self {
            LoopKind::Serial => "serial".into(),
            LoopKind::Parallel => "parallel".into(),
            LoopKind::Vectorized => "vectorized".into(),
            LoopKind::Unrolled => "unrolled".into(),
            LoopKind::Bound(axis) => axis.name().into(),
            LoopKind::Pipelined {
                stages,
                prefetch,
                unrolled,
            } => {
                let unrolled = if unrolled { ", unrolled" } else { "" };
                format!("pipelined: {stages} stages, copies {prefetch} ahead{unrolled}")
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loop {
    pub name: String,
    pub extent: u64,
    pub kind: LoopKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IterKind {
    Spatial,
    Reduce,
}

/// A block iterator: one axis of the block's iteration domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IterVar {
    pub name: String,
    pub extent: u64,
    pub kind: IterKind,
}

impl IterVar {
    /// Spatial iterators `v0, v1, ...` over `shape`.
    pub fn spatial(shape: &[u64]) -> Vec<IterVar> {
        shape
            .iter()
            .enumerate()
            .map(|(i, &extent)| IterVar {
                name: format!("v{i}"),
                extent,
                kind: IterKind::Spatial,
            })
            .collect()
    }
}

/// One computation: for every point of its iteration domain, store `value`
/// (a function of the iterators) at `indices`. A reduction block combines
/// into the stored value instead, starting from the identity the first time
/// every reduce iterator is 0 (unless `init` is off because another block
/// fills the buffer, as after `rfactor`). Instances whose iterator values fall outside
/// the domain (loop tails after a split) do not run.
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    pub name: String,
    pub iters: Vec<IterVar>,
    /// Each iterator's value as a function of the enclosing loop variables.
    pub bindings: Vec<Index>,
    pub buffer: BufferId,
    pub indices: Vec<Index>,
    pub value: Expr,
    pub reduce: Option<ReduceOp>,
    /// Reductions: start from the identity on the first visit.
    pub init: bool,
    /// Conditions on loop variables (`expr < bound`) left by splits whose
    /// factors overshoot a loop's extent: instances outside them do not run.
    pub predicates: Vec<(Index, u64)>,
}

impl Block {
    pub fn reads(&self, buffer: BufferId) -> bool {
        self.value.reads(buffer)
    }

    /// Rewrites every index expression with `f`: bindings, buffer
    /// indices, predicates and the loads' indices.
    pub fn map_indices(&mut self, f: impl Fn(&Index) -> Index) {
        let exprs = (self.bindings.iter_mut().chain(&mut self.indices))
            .chain(self.predicates.iter_mut().map(|(x, _)| x));
        exprs.for_each(|x| *x = f(x));
        self.value = self.value.map_loads(&mut |buffer, ix| Expr::Load {
            buffer,
            indices: ix.iter().map(&f).collect(),
        });
    }

    /// Substitutes index variables everywhere in the block.
    pub fn subst(&mut self, f: &impl Fn(Var) -> Option<Index>) {
        self.map_indices(|x| x.subst(f));
    }
}

/// A node of the loop-nest tree.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    Loop(LoopId, Vec<Node>),
    Block(BlockId),
}

impl Node {
    /// Appends the blocks in this subtree, in order.
    pub fn blocks(&self, out: &mut Vec<BlockId>) {
        match self {
            Node::Block(b) => out.push(*b),
            Node::Loop(_, body) => body.iter().for_each(|n| n.blocks(out)),
        }
    }
}

/// The whole kernel: arenas of buffers, loops and blocks, and the tree.
/// Loops and blocks removed by a primitive stay in their arena (ids never
/// move) but leave the tree.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Kernel {
    pub buffers: Vec<Buffer>,
    pub loops: Vec<Loop>,
    pub blocks: Vec<Block>,
    pub body: Vec<Node>,
}

impl Kernel {
    pub fn buffer(&self, id: BufferId) -> &Buffer {
        &self.buffers[id.0 as usize]
    }

    pub fn loop_(&self, id: LoopId) -> &Loop {
        &self.loops[id.0 as usize]
    }

    pub fn block(&self, id: BlockId) -> &Block {
        &self.blocks[id.0 as usize]
    }

    pub fn block_mut(&mut self, id: BlockId) -> &mut Block {
        &mut self.blocks[id.0 as usize]
    }

    pub fn loop_mut(&mut self, id: LoopId) -> &mut Loop {
        &mut self.loops[id.0 as usize]
    }

    pub fn new_loop(&mut self, name: String, extent: u64) -> LoopId {
        self.loops.push(Loop {
            name,
            extent,
            kind: LoopKind::Serial,
        });
        LoopId(self.loops.len() as u32 - 1)
    }

    /// Adds `block` to the arena with a fresh nest of one loop per iterator
    /// (`i0, i1, ...`, binding each iterator to its loop) and returns the
    /// nest, for the caller to place in the tree.
    pub fn add_nest(&mut self, mut block: Block) -> Node {
        let loops: Vec<LoopId> = block
            .iters
            .iter()
            .enumerate()
            .map(|(i, it)| self.new_loop(format!("i{i}"), it.extent))
            .collect();
        block.bindings = loops.iter().map(|&l| Index::var(Var::Loop(l))).collect();
        self.blocks.push(block);
        let mut node = Node::Block(BlockId(self.blocks.len() as u32 - 1));
        for &l in loops.iter().rev() {
            node = Node::Loop(l, vec![node]);
        }
        node
    }

    pub fn buffer_dtype(&self) -> impl Fn(BufferId) -> DType + '_ {
        |b| self.buffer(b).dtype
    }

    /// The path of loops from the root down to `target` (a block or loop),
    /// or `None` when it is not in the tree.
    pub fn path_to(&self, target: &Node) -> Option<Vec<LoopId>> {
        fn walk(nodes: &[Node], target: &Node, path: &mut Vec<LoopId>) -> bool {
            for node in nodes {
                match node {
                    Node::Block(b) => {
                        if matches!(target, Node::Block(t) if t == b) {
                            return true;
                        }
                    }
                    Node::Loop(l, body) => {
                        if matches!(target, Node::Loop(t, _) if t == l) {
                            return true;
                        }
                        path.push(*l);
                        if walk(body, target, path) {
                            return true;
                        }
                        path.pop();
                    }
                }
            }
            false
        }
        let mut path = Vec::new();
        walk(&self.body, target, &mut path).then_some(path)
    }

    /// Blocks in tree (execution) order.
    pub fn blocks_in_order(&self) -> Vec<BlockId> {
        let mut out = Vec::new();
        self.body.iter().for_each(|n| n.blocks(&mut out));
        out
    }

    /// The children list that holds loop `id`, and its position there.
    pub fn find_loop_mut(&mut self, id: LoopId) -> Option<(&mut Vec<Node>, usize)> {
        fn walk(nodes: &mut Vec<Node>, id: LoopId) -> Option<(&mut Vec<Node>, usize)> {
            if let Some(pos) = nodes
                .iter()
                .position(|n| matches!(n, Node::Loop(l, _) if *l == id))
            {
                return Some((nodes, pos));
            }
            nodes.iter_mut().find_map(|n| match n {
                Node::Loop(_, body) => walk(body, id),
                Node::Block(_) => None,
            })
        }
        walk(&mut self.body, id)
    }

    /// The children list that holds block `id`, and its position there.
    pub fn find_block_mut(&mut self, id: BlockId) -> Option<(&mut Vec<Node>, usize)> {
        fn walk(nodes: &mut Vec<Node>, id: BlockId) -> Option<(&mut Vec<Node>, usize)> {
            if let Some(pos) = nodes
                .iter()
                .position(|n| matches!(n, Node::Block(b) if *b == id))
            {
                return Some((nodes, pos));
            }
            nodes.iter_mut().find_map(|n| match n {
                Node::Loop(_, body) => walk(body, id),
                Node::Block(_) => None,
            })
        }
        walk(&mut self.body, id)
    }

    /// The block that loop `l` reduces across invocations, and how: `l`
    /// is bound to an invocation axis and holds only that block, whose
    /// reduction it carries, or serial or unrolled loops each holding
    /// only the next, then that block (its rows, combined together at each
    /// step; see [`Kernel::reduction_chain`] and `Schedule::bind`).
    pub fn cross_invocation_reduction(&self, l: LoopId) -> Option<(BlockId, CrossInvocation)> {
        if !matches!(self.loop_(l).kind, LoopKind::Bound(a) if !a.is_workgroup()) {
            return None;
        }
        let (_, b) = self.reduction_chain(l)?;
        Some((b, self.combining(l, b)?))
    }

    /// The loops inside `l`, outermost first, and the one block they hold,
    /// when `l` holds a chain of serial or unrolled loops each holding
    /// only the next, ending in a single block, and each of those loops
    /// walks the block's rows: it drives spatial iterators only (no loops
    /// for a block directly under `l`).
    pub fn reduction_chain(&self, l: LoopId) -> Option<(Vec<LoopId>, BlockId)> {
        let Some(Node::Loop(_, body)) = self.loop_node(l) else {
            return None;
        };
        let (mut body, mut inner): (&[Node], _) = (body, Vec::new());
        loop {
            match body {
                [Node::Block(b)] => {
                    let block = self.block(*b);
                    let drives = |i: LoopId, kind| {
                        (block.iters.iter().zip(&block.bindings))
                            .any(|(it, x)| it.kind == kind && x.mentions(Var::Loop(i)))
                    };
                    let rows =
                        |&i: &LoopId| drives(i, IterKind::Spatial) && !drives(i, IterKind::Reduce);
                    return inner.iter().all(rows).then_some((inner, *b));
                }
                [Node::Loop(i, next)]
                    if matches!(self.loop_(*i).kind, LoopKind::Serial | LoopKind::Unrolled) =>
                {
                    inner.push(*i);
                    body = next;
                }
                _ => return None,
            }
        }
    }

    /// How loop `l`, which carries block `b`'s reduction, combines its
    /// terms once bound to invocations: a tree where each lane's term is
    /// its entry of a workgroup buffer, else shuffles. `None` when `l`
    /// carries no reduction of `b`. (The load's indices are read over
    /// loops, so this holds before and after lowering localizes them.)
    pub fn combining(&self, l: LoopId, b: BlockId) -> Option<CrossInvocation> {
        self.carried_iter(l, b)?;
        let block = self.block(b);
        Some(match &block.value {
            Expr::Load { buffer, indices }
                if self.buffer(*buffer).scope == Scope::Workgroup
                    && block
                        .over_loops(indices)
                        .iter()
                        .any(|ix| ix.mentions(Var::Loop(l))) =>
            {
                CrossInvocation::Tree
            }
            _ => CrossInvocation::Shuffles,
        })
    }

    /// The reduce iterator of block `b` whose reduction loop `l` carries:
    /// one whose binding uses `l` while no spatial iterator moves with it
    /// (as one does after `rfactor`), so that `l` visits one output element
    /// several times, in order. A loop of one iteration carries nothing.
    pub fn carried_iter(&self, l: LoopId, b: BlockId) -> Option<usize> {
        if self.loop_(l).extent == 1 {
            return None;
        }
        let var = Var::Loop(l);
        let block = self.block(b);
        let pairs = || block.iters.iter().zip(&block.bindings);
        let spatial_moves = pairs().any(|(it, binding)| {
            it.kind == IterKind::Spatial && binding.linear_in(var).is_some_and(|(c, _)| c != 0)
        });
        if spatial_moves {
            return None;
        }
        pairs().position(|(it, binding)| it.kind == IterKind::Reduce && binding.mentions(var))
    }

    /// The subtree of loop `id`.
    pub fn loop_node(&self, id: LoopId) -> Option<&Node> {
        fn walk(nodes: &[Node], id: LoopId) -> Option<&Node> {
            nodes.iter().find_map(|n| match n {
                Node::Loop(l, _) if *l == id => Some(n),
                Node::Loop(_, body) => walk(body, id),
                Node::Block(_) => None,
            })
        }
        walk(&self.body, id)
    }

    /// Blocks under loop `id`.
    pub fn blocks_under(&self, id: LoopId) -> Vec<BlockId> {
        let mut out = Vec::new();
        if let Some(node) = self.loop_node(id) {
            node.blocks(&mut out);
        }
        out
    }

    /// Inclusive range of a loop variable.
    pub fn loop_range(&self, v: Var) -> (i64, i64) {
        match v {
            Var::Loop(l) => (0, self.loop_(l).extent as i64 - 1),
            Var::Iter(_) => (0, 0),
        }
    }

    /// Whether some instance of `block` can fall outside its domain, so a
    /// guard must check it (a split whose factors overshoot the extent).
    /// The predicates of `block` that some loop values can violate and that
    /// no iterator guard already checks.
    pub fn live_predicates(&self, block: BlockId) -> Vec<(Index, u64)> {
        let b = self.block(block);
        let covered = |e: &Index, bound: u64| {
            b.bindings
                .iter()
                .zip(&b.iters)
                .any(|(x, it)| x == e && it.extent == bound)
        };
        b.predicates
            .iter()
            .filter(|(e, bound)| {
                e.bounds(&|v| self.loop_range(v)).1 >= *bound as i64 && !covered(e, *bound)
            })
            .cloned()
            .collect()
    }

    pub fn needs_guard(&self, block: BlockId) -> Vec<usize> {
        let b = self.block(block);
        b.bindings
            .iter()
            .zip(&b.iters)
            .enumerate()
            .filter(|(_, (binding, iter))| {
                binding.bounds(&|v| self.loop_range(v)).1 >= iter.extent as i64
            })
            .map(|(i, _)| i)
            .collect()
    }
}

impl Kernel {
    /// Buffers that some block in the tree reads or writes, plus inputs and
    /// outputs, in id order.
    pub fn live_buffers(&self) -> Vec<BufferId> {
        let mut used = vec![false; self.buffers.len()];
        for b in self.blocks_in_order() {
            let block = self.block(b);
            used[block.buffer.0 as usize] = true;
            let mut loads = Vec::new();
            block.value.loads(&mut loads);
            for (buf, _) in loads {
                used[buf.0 as usize] = true;
            }
        }
        (0..self.buffers.len())
            .filter(|&i| used[i] || self.buffers[i].role != Role::Temp)
            .map(|i| BufferId(i as u32))
            .collect()
    }
}
