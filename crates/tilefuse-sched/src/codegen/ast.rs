//! A small WGSL AST, printed with `Display`. Passes build trees; only this
//! module knows WGSL's surface syntax.

use std::fmt::{self, Display, Formatter, Write};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scalar {
    F32,
    I32,
    U32,
    Bool,
}

impl Display for Scalar {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scalar::F32 => "f32",
            Scalar::I32 => "i32",
            Scalar::U32 => "u32",
            Scalar::Bool => "bool",
        })
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// A literal or identifier, printed as is.
    Raw(String),
    Binary(&'static str, Box<Expr>, Box<Expr>),
    Unary(&'static str, Box<Expr>),
    Call(String, Vec<Expr>),
    Index(Box<Expr>, Box<Expr>),
}

impl Expr {
    pub fn raw(s: impl Into<String>) -> Expr {
        Expr::Raw(s.into())
    }

    pub fn bin(op: &'static str, a: Expr, b: Expr) -> Expr {
        Expr::Binary(op, Box::new(a), Box::new(b))
    }

    pub fn call(name: impl Into<String>, args: Vec<Expr>) -> Expr {
        Expr::Call(name.into(), args)
    }

    pub fn index(base: Expr, i: Expr) -> Expr {
        Expr::Index(Box::new(base), Box::new(i))
    }
}

impl Display for Expr {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Raw(s) => f.write_str(s),
            Expr::Binary(op, a, b) => write!(f, "({a} {op} {b})"),
            Expr::Unary(op, a) => write!(f, "({op}{a})"),
            Expr::Call(name, args) => {
                write!(f, "{name}(")?;
                for (i, a) in args.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{a}")?;
                }
                f.write_str(")")
            }
            Expr::Index(base, i) => write!(f, "{base}[{i}]"),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    Let(String, Expr),
    /// `var name = e;` (function scope), a value reassigned later.
    Var(String, Expr),
    /// `var name: array<elem, len>;` (function scope); `elem` is a type.
    VarArray(String, String, u64),
    Assign(Expr, Expr),
    If(Expr, Vec<Stmt>),
    /// `for (var v = 0u; v < end; v++) { body }`
    For {
        var: String,
        end: Expr,
        body: Vec<Stmt>,
    },
    /// `{ body }`: a scope for `let`s.
    Scope(Vec<Stmt>),
    /// A call statement, e.g. `workgroupBarrier()`.
    Call(String),
    Comment(String),
}

impl Stmt {
    fn write(&self, out: &mut String, depth: usize) -> fmt::Result {
        let pad = "    ".repeat(depth);
        let body = |out: &mut String, stmts: &[Stmt]| -> fmt::Result {
            for s in stmts {
                s.write(out, depth + 1)?;
            }
            writeln!(out, "{pad}}}")
        };
        match self {
            Stmt::Let(name, e) => writeln!(out, "{pad}let {name} = {e};"),
            Stmt::Var(name, e) => writeln!(out, "{pad}var {name} = {e};"),
            Stmt::VarArray(name, elem, len) => {
                writeln!(out, "{pad}var {name}: array<{elem}, {len}>;")
            }
            Stmt::Assign(lhs, e) => writeln!(out, "{pad}{lhs} = {e};"),
            Stmt::If(c, stmts) => {
                writeln!(out, "{pad}if {c} {{")?;
                body(out, stmts)
            }
            Stmt::For {
                var,
                end,
                body: stmts,
            } => {
                writeln!(out, "{pad}for (var {var} = 0u; {var} < {end}; {var}++) {{")?;
                body(out, stmts)
            }
            Stmt::Scope(stmts) => {
                writeln!(out, "{pad}{{")?;
                body(out, stmts)
            }
            Stmt::Call(name) => writeln!(out, "{pad}{name}();"),
            Stmt::Comment(text) => writeln!(out, "{pad}// {text}"),
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
    pub name: String,
    pub access: Access,
    pub elem: Scalar,
    /// Declared as `array<vec4<elem>>` (for vectorized loops).
    pub vec4: bool,
}

/// `var<workgroup> name: array<elem, len>;`
#[derive(Clone, Debug, PartialEq)]
pub struct WorkgroupArray {
    pub name: String,
    pub elem: Scalar,
    pub len: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct EntryPoint {
    pub name: String,
    pub workgroup_size: [u32; 3],
    pub body: Vec<Stmt>,
}

/// A whole shader module.
#[derive(Clone, Debug, PartialEq)]
pub struct Module {
    /// Hand-written WGSL included verbatim (helpers from `shaders/`).
    pub prelude: Vec<&'static str>,
    pub bindings: Vec<StorageBinding>,
    pub workgroup_arrays: Vec<WorkgroupArray>,
    pub entry_points: Vec<EntryPoint>,
}

impl Display for Module {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        for piece in &self.prelude {
            writeln!(out, "{}", piece.trim_end())?;
            out.push('\n');
        }
        for b in &self.bindings {
            let access = match b.access {
                Access::Read => "read",
                Access::ReadWrite => "read_write",
            };
            let elem = if b.vec4 {
                format!("vec4<{}>", b.elem)
            } else {
                b.elem.to_string()
            };
            writeln!(
                out,
                "@group(0) @binding({}) var<storage, {access}> {}: array<{elem}>;",
                b.binding, b.name
            )?;
        }
        for w in &self.workgroup_arrays {
            writeln!(
                out,
                "var<workgroup> {}: array<{}, {}>;",
                w.name, w.elem, w.len
            )?;
        }
        for e in &self.entry_points {
            let [x, y, z] = e.workgroup_size;
            writeln!(out, "\n@compute @workgroup_size({x}, {y}, {z})")?;
            writeln!(
                out,
                "fn {}(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {{",
                e.name
            )?;
            for s in &e.body {
                s.write(&mut out, 1)?;
            }
            writeln!(out, "}}")?;
        }
        f.write_str(&out)
    }
}
