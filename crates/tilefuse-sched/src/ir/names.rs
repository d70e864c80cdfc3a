//! Names for what schedule primitives add: unique, so that a trace that
//! names blocks (`s.get_block("x_rf")`) replays onto the same ones after a
//! primitive ran twice on one block.

use super::Kernel;

/// `base`, else `base1`, `base2`, ...: the first that `taken` refuses.
pub fn fresh_name(base: &str, taken: impl Fn(&str) -> bool) -> String {
    (0..)
        .map(|i| match i {
            0 => base.to_owned(),
            _ => format!("{base}{i}"),
        })
        .find(|n| !taken(n))
        .expect("a free name")
}

impl Kernel {
    /// A name no block and no buffer has yet, from `base`.
    pub fn fresh_block_name(&self, base: &str) -> String {
        fresh_name(base, |n| {
            self.blocks.iter().any(|b| b.name == n) || self.buffers.iter().any(|b| b.name == n)
        })
    }

    /// A name no loop has yet, from `base`.
    pub fn fresh_loop_name(&self, base: &str) -> String {
        fresh_name(base, |n| self.loops.iter().any(|l| l.name == n))
    }
}
