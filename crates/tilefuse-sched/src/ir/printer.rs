//! Readable text of a kernel at any step, TVMScript-like:
//!
//! ```text
//! buffer x: f32[4, 8] global input(0)
//! buffer e: f32[4, 8] global output(0)
//! for i0 in range(4):  # workgroup.x
//!   for i1 in range(8):  # invocation.x
//!     block e [v0 = i0, v1 = i1]:
//!       e[v0, v1] = exp(x[v0, v1])
//! ```

use std::fmt::{self, Write};

use tilefuse_ir::{BinaryOp, ReduceOp};

use super::expr::Expr;
use super::index::{Index, Var};
use super::kernel::{
    Block, BlockId, CrossInvocation, IterKind, Kernel, LoopKind, Node, Role, Scope,
};

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        for b in self.live_buffers() {
            let buf = self.buffer(b);
            let dims: Vec<String> = buf.shape.iter().map(u64::to_string).collect();
            let scope = match buf.scope {
                Scope::Global => "global",
                Scope::Workgroup => "workgroup",
                Scope::Private => "private",
            };
            let role = match buf.role {
                Role::Input(i) => format!(" input({i})"),
                Role::Output(i) => format!(" output({i})"),
                Role::Temp => String::new(),
            };
            writeln!(
                out,
                "buffer {}: {}[{}] {scope}{role}",
                buf.name,
                buf.dtype,
                dims.join(", ")
            )
            .map_err(|_| fmt::Error)?;
        }
        for node in &self.body {
            self.print_node(node, 0, &mut out);
        }
        f.write_str(out.trim_end())
    }
}

impl Kernel {
    fn print_node(&self, node: &Node, depth: usize, out: &mut String) {
        let pad = "  ".repeat(depth);
        match node {
            Node::Loop(id, body) => {
                let l = self.loop_(*id);
                let note = match l.kind {
                    LoopKind::Serial => String::new(),
                    LoopKind::Bound(axis) => match self.cross_invocation_reduction(*id) {
                        Some((_, CrossInvocation::Shuffles)) => {
                            format!("  # {} (subgroup reduction)", axis.name())
                        }
                        Some((_, CrossInvocation::Tree)) => {
                            format!("  # {} (tree reduction)", axis.name())
                        }
                        None => format!("  # {}", axis.name()),
                    },
                    kind => format!("  # {}", kind.describe()),
                };
                let _ = writeln!(out, "{pad}for {} in range({}):{note}", l.name, l.extent);
                for child in body {
                    self.print_node(child, depth + 1, out);
                }
            }
            Node::Block(id) => self.print_block(*id, depth, out),
        }
    }

    /// The name a variable prints as: loops by name, iterators by theirs.
    pub fn var_name<'a>(&'a self, block: &'a Block) -> impl Fn(Var) -> String + 'a {
        move |v| match v {
            Var::Loop(l) => self.loop_(l).name.clone(),
            Var::Iter(i) => block.iters[i as usize].name.clone(),
        }
    }

    fn print_block(&self, id: BlockId, depth: usize, out: &mut String) {
        let pad = "  ".repeat(depth);
        let b = self.block(id);
        let name = self.var_name(b);
        let iters: Vec<String> = b
            .iters
            .iter()
            .zip(&b.bindings)
            .map(|(it, binding)| {
                let kind = if it.kind == IterKind::Reduce {
                    "reduce "
                } else {
                    ""
                };
                format!(
                    "{kind}{}: {} = {}",
                    it.name,
                    it.extent,
                    binding.display(&name)
                )
            })
            .collect();
        let no_init = if b.reduce.is_some() && !b.init {
            " (no init)"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "{pad}block {} [{}]{no_init}:",
            b.name,
            iters.join(", ")
        );
        let mut conds: Vec<String> = self
            .needs_guard(id)
            .iter()
            .map(|&i| format!("{} < {}", b.iters[i].name, b.iters[i].extent))
            .collect();
        conds.extend(
            self.live_predicates(id)
                .iter()
                .map(|(e, bound)| format!("{} < {bound}", e.display(&name))),
        );
        let mut inner = format!("{pad}  ");
        if !conds.is_empty() {
            let _ = writeln!(out, "{inner}if {}:", conds.join(" and "));
            inner.push_str("  ");
        }
        let target = format!(
            "{}[{}]",
            self.buffer(b.buffer).name,
            self.indices(&b.indices, &name)
        );
        let value = self.expr_text(&b.value, &name);
        let line = match b.reduce {
            None => format!("{target} = {value}"),
            Some(ReduceOp::Sum | ReduceOp::Mean) => format!("{target} += {value}"),
            Some(ReduceOp::Max) => format!("{target} max= {value}"),
            Some(ReduceOp::Min) => format!("{target} min= {value}"),
        };
        let _ = writeln!(out, "{inner}{line}");
    }

    fn indices(&self, indices: &[Index], name: &dyn Fn(Var) -> String) -> String {
        let parts: Vec<String> = indices
            .iter()
            .map(|i| i.display(name).to_string())
            .collect();
        parts.join(", ")
    }

    /// An expression as text, with variables named by `name`.
    pub fn expr_text(&self, e: &Expr, name: &dyn Fn(Var) -> String) -> String {
        match e {
            Expr::Const { value, .. } => format!("{value:?}"),
            Expr::Load { buffer, indices } => {
                format!(
                    "{}[{}]",
                    self.buffer(*buffer).name,
                    self.indices(indices, name)
                )
            }
            Expr::Unary(op, a) => format!("{}({})", op.name(), self.expr_text(a, name)),
            Expr::Binary(op, a, b) => {
                let (a, b) = (self.expr_text(a, name), self.expr_text(b, name));
                match infix(*op) {
                    Some(sym) => format!("({a} {sym} {b})"),
                    None => format!("{}({a}, {b})", op.name()),
                }
            }
            Expr::Select(c, a, b) => format!(
                "select({}, {}, {})",
                self.expr_text(c, name),
                self.expr_text(a, name),
                self.expr_text(b, name)
            ),
            Expr::Cast(d, a) => format!("{d}({})", self.expr_text(a, name)),
        }
    }
}

fn infix(op: BinaryOp) -> Option<&'static str> {
    Some(match op {
        BinaryOp::Add => "+",
        BinaryOp::Sub => "-",
        BinaryOp::Mul => "*",
        BinaryOp::Div => "/",
        BinaryOp::Eq => "==",
        BinaryOp::Ne => "!=",
        BinaryOp::Lt => "<",
        BinaryOp::Le => "<=",
        BinaryOp::Gt => ">",
        BinaryOp::Ge => ">=",
        BinaryOp::Max | BinaryOp::Min | BinaryOp::Pow => return None,
    })
}
