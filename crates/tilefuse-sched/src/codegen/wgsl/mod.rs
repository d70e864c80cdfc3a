//! Kernel IR → WGSL, from a kernel lowered for [`Target::Wgsl`]. Each root
//! loop nest becomes one entry point (`stage0`, `stage1`, ...) dispatched
//! in order; global buffers are storage bindings numbered once for the
//! whole module.
//!
//! Lowering decided what the code does (which loops are `vec4` steps, each
//! stage's launch, where barriers go); translation only spells it, split by
//! family: statements and loops (`stmt`), expressions and ops (`expr`),
//! reductions across invocations (`reduction`). The AST (`ast`) is the
//! only place WGSL's syntax is written.

mod ast;
mod depth;
mod expr;
mod reduction;
mod stmt;

use tilefuse_ir::DType;

use crate::ir::{BufferId, Kernel, Node, Role, Scope};
use crate::lowering::{Launch, LowerError, Lowered, Target, lower};
use ast::{Access, EntryPoint, Module, Name, Scalar, Stmt, StorageBinding, Ty, WorkgroupArray};

const MATH: &str = include_str!("../../../../../shaders/math.wgsl");

/// One storage binding of the generated module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindingInfo {
    pub binding: u32,
    pub buffer: BufferId,
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<u64>,
    /// `true` when some stage writes the buffer.
    pub writes: bool,
    pub role: Role,
    /// Halves laid out as the host's arrays lay them out, two bytes each
    /// (a half input or output): in `u32` words, two to a word (lane 0
    /// the low half), or as `array<f16>` where the module enables f16. A
    /// half intermediate is stored as f32.
    pub packed: bool,
    /// The WGSL type of the array's elements (`"f32"`, `"u32"` for masks
    /// and for halves in words, `"f16"`, ...).
    pub storage: &'static str,
}

/// One dispatch: an entry point, its grid and the bindings it uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageInfo {
    pub entry_point: String,
    pub workgroups: [u32; 3],
    pub workgroup_size: [u32; 3],
    pub bindings: Vec<u32>,
    /// Most `for`-loop iterations one invocation runs (some drivers cap it).
    pub loop_iterations: u64,
    /// Bytes of `var<workgroup>` arrays the stage uses.
    pub workgroup_bytes: u64,
    /// Lanes (invocation.x) of its widest subgroup reduction (0 for none):
    /// the device needs subgroups at least this large.
    pub subgroup_lanes: u64,
    /// Bytes of the entry point's WGSL function (the helpers it calls not
    /// counted); see [`crate::lowering::MAX_STAGE_BYTES`].
    pub source_bytes: usize,
}

/// A kernel as WGSL, with what a WebGPU host needs to run it.
#[derive(Clone, Debug, PartialEq)]
pub struct WgslKernel {
    pub source: String,
    pub bindings: Vec<BindingInfo>,
    pub stages: Vec<StageInfo>,
    /// The WebGPU features a device needs for the module, by their WebGPU
    /// names (`"shader-f16"`, `"subgroups"`).
    pub features: Vec<&'static str>,
}

/// What a device offers beyond core WGSL that modules may use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Extensions {
    /// `shader-f16`: f16 inputs and outputs are `array<f16>`, read and
    /// written an element at a time, instead of packed in `u32` words
    /// (stored by two atomics each, as the word's other half may be
    /// another invocation's).
    pub f16: bool,
}

/// Lowers a scheduled kernel for WGSL and generates its module for any
/// WebGPU device (no [`Extensions`]).
pub fn generate(kernel: &Kernel) -> Result<WgslKernel, LowerError> {
    Ok(emit(&lower(kernel, Target::Wgsl)?, Extensions::default()))
}

/// The WGSL module of a kernel lowered for [`Target::Wgsl`], using
/// `extensions` where the kernel has use for them.
pub fn emit(lowered: &Lowered, extensions: Extensions) -> WgslKernel {
    assert_eq!(lowered.target, Target::Wgsl, "WGSL needs a WGSL lowering");
    let kernel = &lowered.kernel;
    let live = kernel.live_buffers();
    let globals: Vec<BufferId> = live
        .iter()
        .copied()
        .filter(|&b| kernel.buffer(b).scope == Scope::Global)
        .collect();
    let written: Vec<BufferId> = kernel
        .blocks_in_order()
        .iter()
        .map(|&b| kernel.block(b).buffer)
        .collect();
    let mut bindings: Vec<BindingInfo> = globals
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            let buf = kernel.buffer(b);
            BindingInfo {
                binding: i as u32,
                buffer: b,
                name: buf.name.clone(),
                dtype: buf.dtype,
                shape: buf.shape.clone(),
                writes: written.contains(&b),
                role: buf.role,
                packed: buf.dtype.is_half() && matches!(buf.role, Role::Input(_) | Role::Output(_)),
                storage: "",
            }
        })
        .collect();
    let native_f16 = extensions.f16 && bindings.iter().any(|b| b.packed && b.dtype == DType::F16);
    let emitter = Gen {
        l: lowered,
        kernel,
        native_f16,
        bindings: &bindings,
        names: kernel
            .buffers
            .iter()
            .enumerate()
            .map(|(i, b)| Name::Buffer(format!("b{i}_{}", b.name).into()))
            .collect(),
    };
    let (entry_points, mut stages): (_, Vec<StageInfo>) = kernel
        .body
        .iter()
        .zip(&lowered.launches)
        .enumerate()
        .map(|(i, (root, launch))| emitter.stage(i, root, launch))
        .unzip();
    let module = Module {
        enables: if native_f16 { vec!["f16"] } else { vec![] },
        prelude: vec![MATH],
        bindings: bindings
            .iter()
            .map(|b| StorageBinding {
                binding: b.binding,
                name: emitter.name(b.buffer),
                access: if b.writes {
                    Access::ReadWrite
                } else {
                    Access::Read
                },
                elem: emitter.element_type(b.buffer),
            })
            .collect(),
        workgroup_arrays: live
            .iter()
            .filter(|&&b| kernel.buffer(b).scope == Scope::Workgroup)
            .map(|&b| WorkgroupArray {
                name: emitter.name(b),
                elem: storage_scalar(kernel.buffer(b).dtype),
                len: kernel.buffer(b).numel().max(1),
            })
            .collect(),
        entry_points,
    };
    let (source, bytes) = module.source();
    for (stage, bytes) in stages.iter_mut().zip(bytes) {
        stage.source_bytes = bytes;
    }
    for (binding, declared) in bindings.iter_mut().zip(&module.bindings) {
        binding.storage = declared.elem.scalar().name();
    }
    let features = [
        (native_f16, "shader-f16"),
        (stages.iter().any(|s| s.subgroup_lanes > 0), "subgroups"),
    ];
    WgslKernel {
        source,
        bindings,
        stages,
        features: features.iter().filter(|f| f.0).map(|f| f.1).collect(),
    }
}

/// WGSL storage has no `bool`: masks are stored as `u32` 0 / 1. Halves
/// are f32 in workgroup and private arrays, and in global ones [packed]
/// (Gen::packed) two to a `u32` word.
fn storage_scalar(dtype: DType) -> Scalar {
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 => Scalar::F32,
        DType::I32 => Scalar::I32,
        DType::U32 | DType::Bool => Scalar::U32,
    }
}

/// The type a value of `dtype` has in a shader (halves are held in f32).
fn scalar_of(dtype: DType) -> Scalar {
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 => Scalar::F32,
        DType::I32 => Scalar::I32,
        DType::U32 => Scalar::U32,
        DType::Bool => Scalar::Bool,
    }
}

/// How a global buffer of halves is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Packed {
    /// `array<f16>`, in a module that enables f16.
    Native,
    /// Two to a `u32` word, lane 0 the low half; `atomic` where the kernel
    /// writes it, as neighbouring elements may be different invocations'
    /// (a whole-word store would undo the other's).
    Words { dtype: DType, atomic: bool },
}

/// The translation of one lowered kernel.
struct Gen<'a> {
    l: &'a Lowered,
    kernel: &'a Kernel,
    bindings: &'a [BindingInfo],
    /// Whether f16 inputs and outputs are `array<f16>` ([`Packed::Native`]).
    native_f16: bool,
    /// Each buffer's identifier, by id.
    names: Vec<Name>,
}

impl Gen<'_> {
    fn name(&self, b: BufferId) -> Name {
        self.names[b.0 as usize].clone()
    }

    /// The packing of buffer `b` where its binding is
    /// [packed](BindingInfo::packed).
    fn packed(&self, b: BufferId) -> Option<Packed> {
        let binding = self.bindings.iter().find(|x| x.buffer == b && x.packed)?;
        Some(if self.native_f16 && binding.dtype == DType::F16 {
            Packed::Native
        } else {
            Packed::Words {
                dtype: binding.dtype,
                atomic: binding.writes,
            }
        })
    }

    /// The element type of buffer `b`'s array: `vec4` where lowering made
    /// its accesses `vec4` steps.
    fn element_type(&self, b: BufferId) -> Ty {
        match self.packed(b) {
            Some(Packed::Native) => return Ty::Scalar(Scalar::F16),
            Some(Packed::Words { atomic: true, .. }) => return Ty::Atomic(Scalar::U32),
            Some(Packed::Words { atomic: false, .. }) => return Ty::Scalar(Scalar::U32),
            None => {}
        }
        let scalar = storage_scalar(self.kernel.buffer(b).dtype);
        if self.l.vectors.buffers.contains(&b) {
            Ty::Vec4(scalar)
        } else {
            Ty::Scalar(scalar)
        }
    }

    fn stage(&self, i: usize, root: &Node, launch: &Launch) -> (EntryPoint, StageInfo) {
        let used = &launch.buffers;
        let mut body: Vec<Stmt> = used
            .iter()
            .filter(|&&b| self.kernel.buffer(b).scope == Scope::Private)
            .map(|&b| {
                let numel = self.kernel.buffer(b).numel();
                let ty = self.element_type(b);
                let len = match ty {
                    Ty::Vec4(_) => (numel / 4).max(1),
                    Ty::Scalar(_) | Ty::Atomic(_) => numel.max(1),
                };
                Stmt::VarArray(self.name(b), ty, len)
            })
            .collect();
        body.extend(self.node(root, launch));
        let bindings: Vec<u32> = self
            .bindings
            .iter()
            .filter(|b| used.contains(&b.buffer))
            .map(|b| b.binding)
            .collect();
        let name = format!("stage{i}");
        depth::bound_depth(&mut body);
        // Lowering checked that the launch fits in u32 (`launch`).
        let narrow = |d: [u64; 3]| d.map(|x| x as u32);
        let workgroup_size = narrow(launch.workgroup_size);
        (
            EntryPoint {
                name: name.clone(),
                workgroup_size,
                body,
            },
            StageInfo {
                entry_point: name,
                workgroups: narrow(launch.workgroups),
                workgroup_size,
                bindings,
                loop_iterations: launch.loop_iterations,
                subgroup_lanes: launch.subgroup_lanes,
                workgroup_bytes: launch.workgroup_bytes,
                source_bytes: 0, // set once the module is written
            },
        )
    }
}
