//! IEEE arithmetic on Vulkan.
//!
//! WGSL lets a shader compiler assume finite math, and drivers take the
//! license: lavapipe folds `x * 0`, `x / 0`, `0 / x` and `x - x` to `0` for
//! NaN and infinite `x`. SPIR-V's float controls
//! (`SignedZeroInfNanPreserve`) forbid that, but naga does not emit them, so
//! where the device supports them this module translates the WGSL itself and
//! adds the capability and one execution mode per entry point; the module is
//! then handed to the driver as passthrough SPIR-V. It also decorates float
//! arithmetic `NoContraction`, which WGSL cannot say either: drivers
//! reassociate it otherwise (NVIDIA's folded `(x + 1) - x` to 1).

#![allow(unsafe_code)] // hal access and passthrough shaders

use naga::back::spv;
use spirv::{Capability, Decoration, ExecutionMode, Op};
use tilefuse_sched::codegen::WgslKernel;

/// What kernels are translated to where the driver takes them as SPIR-V.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SpirvTarget {
    pub lang_version: (u8, u8),
    /// Whether workgroup memory is zeroed by the driver
    /// (`shaderZeroInitializeWorkgroupMemory`, which wgpu enables where the
    /// device has it) rather than by stores naga writes into the shader.
    /// llvmpipe turns those stores into one per array element, so a
    /// 1024-invocation reduction took it 20-45 s to compile.
    pub native_zero_init: bool,
}

/// The SPIR-V to translate kernels to with float controls, where the
/// adapter is a Vulkan 1.2+ device with robust buffer access that takes
/// passthrough SPIR-V and can preserve signed zeros, infinities and NaNs in
/// f32 arithmetic.
pub(super) fn float_controls(adapter: &wgpu::Adapter) -> Option<SpirvTarget> {
    use ash::{khr, vk};
    if !adapter
        .features()
        .contains(wgpu::Features::PASSTHROUGH_SHADERS)
    {
        return None;
    }
    // SAFETY: the hal adapter is only read, while `adapter` lives.
    let hal = unsafe { adapter.as_hal::<wgpu::hal::api::Vulkan>() }?;
    let instance = hal.shared_instance();
    let capabilities = hal.physical_device_capabilities();
    let api = (capabilities.properties().api_version).min(instance.instance_api_version());
    let raw = instance.raw_instance();
    // SAFETY: a valid physical device of this instance.
    let features = unsafe { raw.get_physical_device_features(hal.raw_physical_device()) };
    if api < vk::API_VERSION_1_2 || features.robust_buffer_access != vk::TRUE {
        return None;
    }
    let mut controls = vk::PhysicalDeviceFloatControlsProperties::default();
    let mut properties = vk::PhysicalDeviceProperties2::default().push_next(&mut controls);
    // SAFETY: a valid physical device of this instance, Vulkan 1.1+.
    unsafe { raw.get_physical_device_properties2(hal.raw_physical_device(), &mut properties) };
    if controls.shader_signed_zero_inf_nan_preserve_float32 != vk::TRUE {
        return None;
    }
    // Asked only where wgpu asks for it too (core in 1.3, else the extension).
    let zero_init = api >= vk::API_VERSION_1_3
        || capabilities.supports_extension(khr::zero_initialize_workgroup_memory::NAME);
    let mut zeroing = vk::PhysicalDeviceZeroInitializeWorkgroupMemoryFeatures::default();
    if zero_init {
        let mut features = vk::PhysicalDeviceFeatures2::default().push_next(&mut zeroing);
        // SAFETY: as above; the chained struct is core or its extension is supported.
        unsafe { raw.get_physical_device_features2(hal.raw_physical_device(), &mut features) };
    }
    Some(SpirvTarget {
        lang_version: lang_version(api),
        native_zero_init: zeroing.shader_zero_initialize_workgroup_memory == vk::TRUE,
    })
}

/// The SPIR-V version a Vulkan 1.2+ device of `api_version` accepts, as
/// wgpu picks it.
fn lang_version(api_version: u32) -> (u8, u8) {
    if api_version < ash::vk::API_VERSION_1_3 {
        (1, 5)
    } else {
        (1, 6)
    }
}

/// Per stage of `wgsl`, a SPIR-V module for `target` of its entry point
/// alone (as wgpu translates them) preserving signed zeros, infinities and
/// NaNs in 32-bit float arithmetic.
fn ieee_spirv(wgsl: &WgslKernel, target: SpirvTarget) -> Result<Vec<Vec<u32>>, String> {
    let source = &wgsl.source;
    let module = naga::front::wgsl::parse_str(source).map_err(|e| e.emit_to_string(source))?;
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .map_err(|e| e.emit_to_string(source))?;
    wgsl.stages
        .iter()
        .map(|stage| {
            // As wgpu translates WGSL for Vulkan. Buffer accesses are not
            // clamped: this path is taken only where the driver's
            // robustBufferAccess (which wgpu enables) keeps them in bounds,
            // and clamping every access made LLVM take minutes on lavapipe's
            // large unrolled matmuls.
            let options = spv::Options {
                lang_version: target.lang_version,
                flags: spv::WriterFlags::empty(),
                zero_initialize_workgroup_memory: if target.native_zero_init {
                    spv::ZeroInitializeWorkgroupMemoryMode::Native
                } else {
                    spv::ZeroInitializeWorkgroupMemoryMode::Polyfill
                },
                binding_map: binding_map(&stage.bindings),
                fake_missing_bindings: false,
                bounds_check_policies: naga::proc::BoundsCheckPolicies {
                    index: naga::proc::BoundsCheckPolicy::Restrict,
                    buffer: naga::proc::BoundsCheckPolicy::Unchecked,
                    ..Default::default()
                },
                ..Default::default()
            };
            let pipeline = spv::PipelineOptions {
                shader_stage: naga::ShaderStage::Compute,
                entry_point: stage.entry_point.clone(),
            };
            let words = spv::write_vec(&module, &info, &options, Some(&pipeline))
                .map_err(|e| e.to_string())?;
            Ok(forbid_contraction(&preserve_special_floats(&words)))
        })
        .collect()
}

/// A stage's bindings in the order of its layout's entries: wgpu's Vulkan
/// backend numbers those entries from 0 in that order, so the SPIR-V's
/// bindings ([`binding_map`]) and the layout ([`stage_layout`]) both follow
/// it.
fn layout_order(bindings: &[u32]) -> Vec<u32> {
    let mut sorted = bindings.to_vec();
    sorted.sort_unstable();
    sorted
}

/// Where wgpu's Vulkan backend puts a stage's bindings.
fn binding_map(bindings: &[u32]) -> spv::BindingMap {
    let slot = |(i, &binding)| {
        let resource = naga::ResourceBinding { group: 0, binding };
        let target = spv::BindingInfo {
            descriptor_set: 0,
            binding: i as u32,
            binding_array_size: None,
        };
        (resource, target)
    };
    layout_order(bindings)
        .iter()
        .enumerate()
        .map(slot)
        .collect()
}

/// The pipeline layout of a stage binding `bindings` of `wgsl`'s buffers.
/// Every stage gets one: wgpu derives layouts only from WGSL it translates
/// itself, and only with the bindings the code touches, which a stage whose
/// loops run zero times may not (its bind group still binds them).
pub(super) fn stage_layout(
    device: &wgpu::Device,
    wgsl: &WgslKernel,
    bindings: &[u32],
) -> wgpu::PipelineLayout {
    let entries: Vec<_> = layout_order(bindings)
        .into_iter()
        .map(|b| wgpu::BindGroupLayoutEntry {
            binding: b,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage {
                    read_only: !wgsl.bindings.iter().any(|i| i.binding == b && i.writes),
                },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        })
        .collect();
    let group = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: None,
        entries: &entries,
    });
    device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: None,
        bind_group_layouts: &[Some(&group)],
        immediate_size: 0,
    })
}

/// Per stage of `wgsl`, its entry point as a passthrough module of IEEE
/// SPIR-V, with its layout.
pub(super) fn passthrough_modules(
    device: &wgpu::Device,
    wgsl: &WgslKernel,
    target: SpirvTarget,
) -> Result<Vec<super::StageModule>, String> {
    let modules = ieee_spirv(wgsl, target)?;
    let modules = wgsl.stages.iter().zip(modules).map(|(stage, words)| {
        let entry_point = wgpu::PassthroughShaderEntryPoint {
            name: stage.entry_point.as_str().into(),
            workgroup_size: stage.workgroup_size.into(),
        };
        // SAFETY: the words are naga's translation of WGSL it validated,
        // with float-control declarations the adapter reported supporting.
        let module = unsafe {
            device.create_shader_module_passthrough(wgpu::ShaderModuleDescriptorPassthrough {
                label: Some(&stage.entry_point),
                entry_points: vec![entry_point].into(),
                spirv: Some(words.into()),
                ..Default::default()
            })
        };
        (module, stage_layout(device, wgsl, &stage.bindings))
    });
    Ok(modules.collect())
}

/// An instruction's words: its opcode and length, then its operands.
fn instruction(op: Op, operands: &[u32]) -> Vec<u32> {
    let mut words = vec![((operands.len() as u32 + 1) << 16) | op as u32];
    words.extend_from_slice(operands);
    words
}

/// The module's instructions after its five-word header.
fn instructions(words: &[u32]) -> impl Iterator<Item = &[u32]> {
    let mut rest = &words[5.min(words.len())..];
    std::iter::from_fn(move || {
        let len = ((*rest.first()? >> 16) as usize).clamp(1, rest.len());
        let (head, tail) = rest.split_at(len);
        rest = tail;
        Some(head)
    })
}

fn opcode(instruction: &[u32]) -> u32 {
    instruction[0] & 0xffff
}

/// `words` with the `SignedZeroInfNanPreserve` capability declared and
/// the mode set for 32-bit floats on every entry point, each where SPIR-V's
/// module layout puts it (float controls are core from SPIR-V 1.4; devices
/// get this path from Vulkan 1.2, SPIR-V 1.5). Existing instructions keep
/// their order and ids.
fn preserve_special_floats(words: &[u32]) -> Vec<u32> {
    let entry_points: Vec<u32> = instructions(words)
        .filter(|i| opcode(i) == Op::EntryPoint as u32 && i.len() > 2)
        .map(|i| i[2])
        .collect();
    let mut out = words[..5].to_vec();
    out.extend(instruction(
        Op::Capability,
        &[Capability::SignedZeroInfNanPreserve as u32],
    ));
    let mut all = instructions(words).peekable();
    while let Some(i) = all.next() {
        out.extend_from_slice(i);
        let next_op = all.peek().map(|n| opcode(n));
        if opcode(i) == Op::EntryPoint as u32 && next_op != Some(Op::EntryPoint as u32) {
            for &entry in &entry_points {
                let mode = ExecutionMode::SignedZeroInfNanPreserve as u32;
                out.extend(instruction(Op::ExecutionMode, &[entry, mode, 32]));
            }
        }
    }
    out
}

/// Float arithmetic the driver could fuse with another instruction or
/// reassociate.
const FLOAT_ARITHMETIC: [Op; 7] = [
    Op::FAdd,
    Op::FSub,
    Op::FMul,
    Op::FDiv,
    Op::FRem,
    Op::FMod,
    Op::VectorTimesScalar,
];

/// The instructions SPIR-V's module layout puts before the types: modes,
/// debug names and annotations.
const BEFORE_TYPES: [Op; 22] = [
    Op::Capability,
    Op::Extension,
    Op::ExtInstImport,
    Op::MemoryModel,
    Op::EntryPoint,
    Op::ExecutionMode,
    Op::ExecutionModeId,
    Op::String,
    Op::SourceExtension,
    Op::Source,
    Op::SourceContinued,
    Op::Name,
    Op::MemberName,
    Op::ModuleProcessed,
    Op::Decorate,
    Op::MemberDecorate,
    Op::DecorationGroup,
    Op::GroupDecorate,
    Op::GroupMemberDecorate,
    Op::DecorateId,
    Op::DecorateString,
    Op::MemberDecorateString,
];

fn is_one_of(instruction: &[u32], ops: &[Op]) -> bool {
    ops.iter().any(|&op| opcode(instruction) == op as u32)
}

/// `words` with every float add, subtract, multiply, divide and remainder
/// decorated `NoContraction`, so that the driver neither fuses it with
/// another (a multiply and an add into an FMA) nor reassociates it: each
/// rounds to f32, as on the CPU. Without it NVIDIA's driver gave `(x + 1)
/// - x` as 1 for `x = 1e20`, where f32 gives 0. Sums of products still
/// step by FMAs, which the WGSL asks for (`fma`).
fn forbid_contraction(words: &[u32]) -> Vec<u32> {
    let decorations: Vec<u32> = instructions(words)
        .filter(|i| is_one_of(i, &FLOAT_ARITHMETIC) && i.len() > 2)
        .flat_map(|i| instruction(Op::Decorate, &[i[2], Decoration::NoContraction as u32]))
        .collect();
    let types_at = 5 + instructions(words)
        .take_while(|i| is_one_of(i, &BEFORE_TYPES))
        .map(<[u32]>::len)
        .sum::<usize>();
    [&words[..types_at], &decorations, &words[types_at..]].concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_STAGES: &str = "
        @group(0) @binding(0) var<storage, read> x: array<f32>;
        @group(0) @binding(3) var<storage, read_write> y: array<f32>;
        @group(0) @binding(5) var<storage, read_write> z: array<f32>;
        var<workgroup> w: array<f32, 64>;
        @compute @workgroup_size(64) fn stage0(@builtin(global_invocation_id) i: vec3<u32>) {
            y[i.x] = x[i.x] - x[i.x];
        }
        @compute @workgroup_size(64) fn stage1(@builtin(global_invocation_id) i: vec3<u32>) {
            w[i.x % 64u] = x[i.x] * 0.0;
            workgroupBarrier();
            z[i.x] = w[63u - i.x % 64u];
        }";

    const TARGET: SpirvTarget = SpirvTarget {
        lang_version: (1, 5),
        native_zero_init: false,
    };

    fn kernel() -> WgslKernel {
        let stage = |name: &str, bindings: Vec<u32>| tilefuse_sched::codegen::StageInfo {
            entry_point: name.into(),
            workgroups: [1, 1, 1],
            workgroup_size: [64, 1, 1],
            bindings,
            loop_iterations: 1,
            workgroup_bytes: 0,
            subgroup_lanes: 0,
            source_bytes: 0,
        };
        WgslKernel {
            source: TWO_STAGES.into(),
            bindings: Vec::new(),
            stages: vec![stage("stage0", vec![0, 3]), stage("stage1", vec![5, 0])],
            features: Vec::new(),
        }
    }

    fn ops(words: &[u32]) -> Vec<u32> {
        instructions(words).map(opcode).collect()
    }

    #[test]
    fn each_stage_is_its_own_module_preserving_special_floats() {
        let modules = ieee_spirv(&kernel(), TARGET).unwrap();
        assert_eq!(modules.len(), 2);
        for words in &modules {
            let ops = ops(words);
            assert_eq!(ops[0], Op::Capability as u32);
            assert_eq!(instructions(words).next().unwrap()[1], 4466);
            let entry = ops
                .iter()
                .position(|&o| o == Op::EntryPoint as u32)
                .unwrap();
            assert_eq!(
                ops.iter().filter(|&&o| o == Op::EntryPoint as u32).count(),
                1
            );
            let mode = instructions(words).nth(entry + 1).unwrap();
            assert_eq!(opcode(mode), Op::ExecutionMode as u32);
            assert_eq!(
                &mode[2..],
                &[ExecutionMode::SignedZeroInfNanPreserve as u32, 32]
            );
        }
    }

    #[test]
    fn float_arithmetic_is_decorated_so_that_it_is_neither_fused_nor_reassociated() {
        for words in ieee_spirv(&kernel(), TARGET).unwrap() {
            let arithmetic: Vec<u32> = instructions(&words)
                .filter(|i| is_one_of(i, &FLOAT_ARITHMETIC))
                .map(|i| i[2])
                .collect();
            assert_eq!(arithmetic.len(), 1, "x - x, then x * 0");
            let no_contraction = |i: &[u32]| {
                opcode(i) == Op::Decorate as u32 && i[2] == Decoration::NoContraction as u32
            };
            let decorated: Vec<u32> = (instructions(&words).filter(|i| no_contraction(i)))
                .map(|i| i[1])
                .collect();
            assert_eq!(decorated, arithmetic);
            // Among the annotations, which come before the types.
            let decoration = instructions(&words).position(no_contraction).unwrap();
            let first_type =
                (instructions(&words).position(|i| !is_one_of(i, &BEFORE_TYPES))).unwrap();
            assert_eq!(decoration + 1, first_type);
        }
    }

    #[test]
    fn workgroup_memory_is_zeroed_by_the_driver_where_it_can() {
        let stage1 = |native_zero_init| {
            let target = SpirvTarget {
                native_zero_init,
                ..TARGET
            };
            ieee_spirv(&kernel(), target).unwrap().remove(1)
        };
        let workgroup_variables = |words: &[u32]| -> Vec<usize> {
            let workgroup = spirv::StorageClass::Workgroup as u32;
            instructions(words)
                .filter(|i| opcode(i) == Op::Variable as u32 && i[3] == workgroup)
                .map(<[u32]>::len)
                .collect()
        };
        let barriers = |words: &[u32]| {
            ops(words)
                .iter()
                .filter(|&&o| o == Op::ControlBarrier as u32)
                .count()
        };
        // Native: an initializer on the variable, only the kernel's barrier.
        let native = stage1(true);
        assert_eq!(workgroup_variables(&native), [5]);
        assert_eq!(barriers(&native), 1);
        // Polyfill: naga's stores, behind a barrier of their own.
        let polyfill = stage1(false);
        assert_eq!(workgroup_variables(&polyfill), [4]);
        assert_eq!(barriers(&polyfill), 2);
    }

    #[test]
    fn the_patch_only_adds_instructions() {
        let words: Vec<u32> = naga_words();
        let patched = preserve_special_floats(&words);
        let (before, after) = (ops(&words), ops(&patched));
        // The capability, and a mode for each of the two entry points.
        assert_eq!(after.len(), before.len() + 3);
        let mut rest = after.iter();
        assert!(before.iter().all(|o| rest.any(|p| p == o)), "order kept");
    }

    /// naga's SPIR-V of the kernel, unpatched.
    fn naga_words() -> Vec<u32> {
        let module = naga::front::wgsl::parse_str(TWO_STAGES).unwrap();
        let info = naga::valid::Validator::new(Default::default(), Default::default())
            .validate(&module)
            .unwrap();
        let options = spv::Options {
            lang_version: (1, 5),
            ..Default::default()
        };
        spv::write_vec(&module, &info, &options, None).unwrap()
    }

    #[test]
    fn bindings_are_numbered_as_wgpu_lays_them_out() {
        let map = binding_map(&[5, 0, 3]);
        let slots: Vec<(u32, u32)> = map.iter().map(|(r, t)| (r.binding, t.binding)).collect();
        assert_eq!(slots, [(0, 0), (3, 1), (5, 2)]);
    }

    #[test]
    fn spirv_versions_follow_the_vulkan_version() {
        assert_eq!(lang_version(ash::vk::API_VERSION_1_2), (1, 5));
        assert_eq!(lang_version(ash::vk::API_VERSION_1_3), (1, 6));
    }
}
