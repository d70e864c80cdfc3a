//! The WGSL AST, typed: names, builtins, literals, operators, functions and
//! types are enums printed with `Display`. Translation builds trees; only
//! this module spells WGSL's surface syntax.

use std::fmt::{self, Display, Formatter, Write};
use std::rc::Rc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scalar {
    F32,
    /// Only in a module that enables `f16` (storage of native halves).
    F16,
    I32,
    U32,
    Bool,
}

impl Scalar {
    pub fn name(self) -> &'static str {
        match self {
            Scalar::F32 => "f32",
            Scalar::F16 => "f16",
            Scalar::I32 => "i32",
            Scalar::U32 => "u32",
            Scalar::Bool => "bool",
        }
    }
}

impl Display for Scalar {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A value type: a scalar or a 4-vector of one; or an atomic scalar, the
/// element of a storage array that invocations share words of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ty {
    Scalar(Scalar),
    Vec4(Scalar),
    Atomic(Scalar),
}

impl Ty {
    /// The scalar a value of the type holds (or holds four of).
    pub fn scalar(self) -> Scalar {
        match self {
            Ty::Scalar(s) | Ty::Vec4(s) | Ty::Atomic(s) => s,
        }
    }
}

impl Display for Ty {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Ty::Scalar(s) => write!(f, "{s}"),
            Ty::Vec4(s) => write!(f, "vec4<{s}>"),
            Ty::Atomic(s) => write!(f, "atomic<{s}>"),
        }
    }
}

/// An identifier the translation declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Name {
    /// A loop's variable, `l{id}`.
    Loop(u32),
    /// A block iterator's value, `it{i}`.
    Iter(u32),
    /// A buffer (`b{id}_{name}`, spelled once per buffer).
    Buffer(Rc<str>),
    /// The running value of a subgroup reduction, `tf_sg`.
    Subgroup,
    /// A subexpression bound to bound nesting depth, `tf_d{n}`.
    Bound(u32),
}

impl Display for Name {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Name::Loop(l) => write!(f, "l{l}"),
            Name::Iter(i) => write!(f, "it{i}"),
            Name::Buffer(b) => f.write_str(b),
            Name::Subgroup => f.write_str("tf_sg"),
            Name::Bound(n) => write!(f, "tf_d{n}"),
        }
    }
}

/// The entry point's builtin inputs, by component (0, 1, 2: x, y, z).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Builtin {
    WorkgroupId(usize),
    LocalInvocationId(usize),
}

impl Display for Builtin {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let (var, d) = match self {
            Builtin::WorkgroupId(d) => ("wg", d),
            Builtin::LocalInvocationId(d) => ("lid", d),
        };
        write!(f, "{var}.{}", ["x", "y", "z"][*d])
    }
}

/// A literal; non-finite floats and `i32::MIN` have no literal spelling
/// and print as bit patterns.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Lit {
    U32(u64),
    I32(i32),
    F32(f32),
    Bool(bool),
}

impl Display for Lit {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match *self {
            Lit::U32(x) => write!(f, "{x}u"),
            Lit::I32(i32::MIN) => f.write_str("bitcast<i32>(0x80000000u)"),
            Lit::I32(x) => write!(f, "{x}i"),
            Lit::F32(x) if x.is_finite() => write!(f, "{x:?}f"),
            Lit::F32(x) => write!(f, "bitcast<f32>({:#010x}u)", x.to_bits()),
            Lit::Bool(x) => write!(f, "{x}"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
}

impl BinOp {
    fn as_str(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::And => "&&",
        }
    }
}

/// A function a call names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Func {
    /// A WGSL builtin function (`abs`, `exp`, `select`, `max`, ...).
    Builtin(&'static str),
    /// A helper of `shaders/math.wgsl`, `tf_{name}`, with its `4` form for
    /// `vec4<f32>` when `vec4`.
    Helper {
        name: &'static str,
        vec4: bool,
    },
    /// A type's constructor or conversion (`vec4<f32>(x)`, `u32(x)`).
    Construct(Ty),
    SubgroupShuffleXor,
}

impl Display for Func {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Func::Builtin(name) => f.write_str(name),
            Func::Helper { name, vec4 } => write!(f, "tf_{name}{}", if *vec4 { "4" } else { "" }),
            Func::Construct(ty) => write!(f, "{ty}"),
            Func::SubgroupShuffleXor => f.write_str("subgroupShuffleXor"),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    Lit(Lit),
    Var(Name),
    Builtin(Builtin),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    Neg(Box<Expr>),
    Call(Func, Vec<Expr>),
    Index(Box<Expr>, Box<Expr>),
    /// `&e`: a pointer to a memory location (an atomic's argument).
    Ref(Box<Expr>),
}

impl Expr {
    pub fn u32(x: u64) -> Expr {
        Expr::Lit(Lit::U32(x))
    }

    pub fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
        Expr::Binary(op, Box::new(a), Box::new(b))
    }

    pub fn call(func: Func, args: Vec<Expr>) -> Expr {
        Expr::Call(func, args)
    }

    pub fn index(base: Expr, i: Expr) -> Expr {
        Expr::Index(Box::new(base), Box::new(i))
    }
}

impl Expr {
    /// Appends the expression's text to `out` (the module's hot loop:
    /// strings are pushed, not formatted).
    fn write(&self, out: &mut String) {
        match self {
            Expr::Lit(l) => write_display(out, l),
            Expr::Var(n) => write_display(out, n),
            Expr::Builtin(b) => write_display(out, b),
            Expr::Binary(op, a, b) => {
                out.push('(');
                a.write(out);
                out.push(' ');
                out.push_str(op.as_str());
                out.push(' ');
                b.write(out);
                out.push(')');
            }
            Expr::Neg(a) => {
                out.push_str("(-");
                a.write(out);
                out.push(')');
            }
            Expr::Call(func, args) => {
                write_display(out, func);
                out.push('(');
                for (i, a) in args.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    a.write(out);
                }
                out.push(')');
            }
            Expr::Index(base, i) => {
                base.write(out);
                out.push('[');
                i.write(out);
                out.push(']');
            }
            Expr::Ref(e) => {
                out.push('&');
                e.write(out);
            }
        }
    }
}

fn write_display(out: &mut String, x: &impl Display) {
    write!(out, "{x}").expect("writing to a String");
}

impl Display for Expr {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        self.write(&mut out);
        f.write_str(&out)
    }
}

/// A barrier builtin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Barrier {
    Storage,
    Workgroup,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    Let(Name, Expr),
    /// `var name = e;` (function scope), a value reassigned later.
    Var(Name, Expr),
    /// `var name: array<elem, len>;` (function scope).
    VarArray(Name, Ty, u64),
    Assign(Expr, Expr),
    /// A call for its effect (an atomic update): `f(args);`.
    Call(Expr),
    If(Expr, Vec<Stmt>),
    /// `for (var v = 0u; v < end; v++) { body }`
    For {
        var: Name,
        end: Expr,
        body: Vec<Stmt>,
    },
    /// `{ body }`: a scope for `let`s.
    Scope(Vec<Stmt>),
    /// An unrolled loop: `{ let var = ku; body }` for each `k` below
    /// `count` (the body is held once and printed `count` times).
    Unrolled {
        var: Name,
        count: u64,
        body: Vec<Stmt>,
    },
    Barrier(Barrier),
    Comment(String),
}

impl Stmt {
    fn write(&self, out: &mut String, depth: usize) {
        let pad = |out: &mut String| (0..depth).for_each(|_| out.push_str("    "));
        // After the opening line, which ends with `{`.
        let body = |out: &mut String, stmts: &[Stmt]| {
            out.push('\n');
            stmts.iter().for_each(|s| s.write(out, depth + 1));
            pad(out);
            out.push_str("}\n");
        };
        pad(out);
        match self {
            Stmt::Let(name, e) | Stmt::Var(name, e) => {
                out.push_str(if matches!(self, Stmt::Let(..)) {
                    "let "
                } else {
                    "var "
                });
                write_display(out, name);
                out.push_str(" = ");
                e.write(out);
                out.push_str(";\n");
            }
            Stmt::VarArray(name, elem, len) => {
                write_display(out, &format_args!("var {name}: array<{elem}, {len}>;\n"));
            }
            Stmt::Assign(lhs, e) => {
                lhs.write(out);
                out.push_str(" = ");
                e.write(out);
                out.push_str(";\n");
            }
            Stmt::Call(e) => {
                e.write(out);
                out.push_str(";\n");
            }
            Stmt::If(c, stmts) => {
                out.push_str("if ");
                c.write(out);
                out.push_str(" {");
                body(out, stmts);
            }
            Stmt::For {
                var,
                end,
                body: stmts,
            } => {
                write_display(out, &format_args!("for (var {var} = 0u; {var} < "));
                end.write(out);
                write_display(out, &format_args!("; {var}++) {{"));
                body(out, stmts);
            }
            Stmt::Scope(stmts) => {
                out.push('{');
                body(out, stmts);
            }
            Stmt::Unrolled {
                var,
                count,
                body: stmts,
            } => {
                for k in 0..*count {
                    if k > 0 {
                        pad(out);
                    }
                    out.push_str("{\n");
                    Stmt::Let(var.clone(), Expr::u32(k)).write(out, depth + 1);
                    stmts.iter().for_each(|s| s.write(out, depth + 1));
                    pad(out);
                    out.push_str("}\n");
                }
            }
            Stmt::Barrier(Barrier::Storage) => out.push_str("storageBarrier();\n"),
            Stmt::Barrier(Barrier::Workgroup) => out.push_str("workgroupBarrier();\n"),
            Stmt::Comment(text) => {
                out.push_str("// ");
                out.push_str(text);
                out.push('\n');
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    ReadWrite,
}

/// `@group(0) @binding(n) var<storage, access> name: array<elem>;`
#[derive(Clone, Debug, PartialEq)]
pub struct StorageBinding {
    pub binding: u32,
    pub name: Name,
    pub access: Access,
    pub elem: Ty,
}

/// `var<workgroup> name: array<elem, len>;`
#[derive(Clone, Debug, PartialEq)]
pub struct WorkgroupArray {
    pub name: Name,
    pub elem: Scalar,
    pub len: u64,
}

/// `@compute @workgroup_size(x, y, z) fn name(<builtins>) { body }`.
#[derive(Clone, Debug, PartialEq)]
pub struct EntryPoint {
    pub name: String,
    pub workgroup_size: [u32; 3],
    pub body: Vec<Stmt>,
}

/// A whole shader module.
#[derive(Clone, Debug, PartialEq)]
pub struct Module {
    /// Extensions the module enables (`enable f16;`), first in its source.
    pub enables: Vec<&'static str>,
    /// Hand-written WGSL included verbatim (helpers from `shaders/`).
    pub prelude: Vec<&'static str>,
    pub bindings: Vec<StorageBinding>,
    pub workgroup_arrays: Vec<WorkgroupArray>,
    pub entry_points: Vec<EntryPoint>,
}

impl Module {
    /// The module's source, and the bytes of each entry point's function.
    pub fn source(&self) -> (String, Vec<usize>) {
        let mut out = String::new();
        let bytes = self.write(&mut out).expect("writing to a String");
        (out, bytes)
    }

    fn write(&self, out: &mut String) -> Result<Vec<usize>, fmt::Error> {
        for extension in &self.enables {
            writeln!(out, "enable {extension};")?;
        }
        for piece in &self.prelude {
            writeln!(out, "{}", piece.trim_end())?;
            out.push('\n');
        }
        for b in &self.bindings {
            let access = match b.access {
                Access::Read => "read",
                Access::ReadWrite => "read_write",
            };
            writeln!(
                out,
                "@group(0) @binding({}) var<storage, {access}> {}: array<{}>;",
                b.binding, b.name, b.elem
            )?;
        }
        for w in &self.workgroup_arrays {
            writeln!(
                out,
                "var<workgroup> {}: array<{}, {}>;",
                w.name, w.elem, w.len
            )?;
        }
        let mut bytes = Vec::with_capacity(self.entry_points.len());
        for e in &self.entry_points {
            let start = out.len();
            let [x, y, z] = e.workgroup_size;
            writeln!(out, "\n@compute @workgroup_size({x}, {y}, {z})")?;
            writeln!(
                out,
                "fn {}(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {{",
                e.name
            )?;
            for s in &e.body {
                s.write(out, 1);
            }
            writeln!(out, "}}")?;
            bytes.push(out.len() - start);
        }
        Ok(bytes)
    }
}
