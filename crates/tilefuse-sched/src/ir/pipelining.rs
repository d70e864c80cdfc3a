//! Software pipelining's precondition, an analysis of the kernel IR that
//! both the `pipeline` primitive (to refuse a loop) and lowering's
//! `software_pipeline` pass (to rewrite it) read.

use std::collections::HashSet;

use super::{BlockId, BufferId, Kernel, LoopId, Node, Scope};

impl Kernel {
    /// How many of loop `l`'s leading children are copies that can run ahead
    /// of the rest of its body: nests of blocks that do not reduce, write
    /// workgroup- or private-scope buffers that only blocks under `l` use, no
    /// later sibling writes and some later sibling reads, and read nothing a
    /// block under `l` writes. Otherwise, why there are none (or nothing
    /// after them).
    pub fn copies_ahead(&self, l: LoopId) -> Result<usize, String> {
        let k = self;
        let Some(Node::Loop(_, body)) = k.loop_node(l) else {
            unreachable!("a live loop")
        };
        let name = &k.loop_(l).name;
        let under: HashSet<BlockId> = k.blocks_under(l).into_iter().collect();
        let written: HashSet<BufferId> = under.iter().map(|&b| k.block(b).buffer).collect();
        let mut used_outside = HashSet::new();
        for b in k
            .blocks_in_order()
            .into_iter()
            .filter(|b| !under.contains(b))
        {
            let block = k.block(b);
            used_outside.insert(block.buffer);
            let mut loads = Vec::new();
            block.value.loads(&mut loads);
            used_outside.extend(loads.into_iter().map(|(buf, _)| buf));
        }
        let nested: Vec<Vec<BlockId>> = body
            .iter()
            .map(|n| {
                let mut out = Vec::new();
                n.blocks(&mut out);
                out
            })
            .collect();
        let why_not = |i: usize| -> Option<String> {
            nested[i].iter().find_map(|&b| {
                let block = k.block(b);
                let buf = k.buffer(block.buffer);
                let later = || nested[i + 1..].iter().flatten().map(|&x| k.block(x));
                let mut loads = Vec::new();
                block.value.loads(&mut loads);
                let reads_written = loads.iter().find(|(x, _)| written.contains(x));
                if block.reduce.is_some() {
                    Some(format!("block {} reduces", block.name))
                } else if buf.scope == Scope::Global {
                    Some(format!(
                        "block {} writes {}, a global buffer",
                        block.name, buf.name
                    ))
                } else if used_outside.contains(&block.buffer) {
                    Some(format!("{} is also used outside loop {name}", buf.name))
                } else if let Some((x, _)) = reads_written {
                    Some(format!(
                        "block {} reads {}, which loop {name} writes",
                        block.name,
                        k.buffer(*x).name
                    ))
                } else if later().any(|x| x.buffer == block.buffer) {
                    Some(format!("{} is written again later in the loop", buf.name))
                } else if !later().any(|x| x.reads(block.buffer)) {
                    Some(format!("nothing later in the loop reads {}", buf.name))
                } else {
                    None
                }
            })
        };
        let count = (0..body.len())
            .position(|i| why_not(i).is_some())
            .unwrap_or(body.len());
        match count {
            0 => Err(format!(
                "the body of loop {name} does not start with a copy to pipeline: {}",
                why_not(0).expect("not a copy")
            )),
            n if n == body.len() => Err(format!(
                "loop {name} holds only copies; nothing in it uses them"
            )),
            n => Ok(n),
        }
    }
}
