//! Launch shape: each root loop nest is one dispatch, whose grid and
//! workgroup size are the largest extents bound to each axis, with the
//! loop iterations one invocation runs (some drivers cap them), its
//! workgroup memory and the buffers it touches. [`verify_launch`] checks
//! them against a device's limits, for every caller (the schedulers' params
//! checks and the GPU device's build) in one place.

use std::fmt::{self, Display};

use super::{LowerError, Lowered, Target};
use crate::DeviceInfo;
use crate::ir::{BufferId, Kernel, LoopKind, Node, Scope, ThreadAxis};

/// The most blocks one WGSL stage holds once its unrolled loops are copied
/// out. Nested unrolled loops multiply (two of the 256 iterations
/// [`crate::Schedule::unroll`] allows make 65,536 copies), and shader
/// compilers take minutes over such modules; the CPU device copies no
/// code, so its kernels have no such bound.
pub const MAX_UNROLLED_BLOCKS: u64 = 4096;

/// The most steps of `for` loops that unrolled loops may copy out into one
/// WGSL stage (each copy's steps count). Shader compilers unroll short
/// loops themselves and then take far longer over the copies than over
/// straight-line code: on lavapipe, 36 copies of a 24-step matmul loop
/// (864 steps) compiled in 1.4-2.7 s, 144 copies (3,456) in 36 s and 720
/// (17,280) in 4.5 minutes, while 3,456 straight-line blocks took 3 s.
/// A loop longer than [`DRIVER_UNROLLS`] stays a loop (144 copies of a
/// 48-step one compiled in 65 ms) and counts one step a copy.
pub const MAX_COPIED_LOOP_STEPS: u64 = 1024;

/// The most bytes of WGSL one stage's function may have; a larger stage is
/// refused before any driver sees it, which would take minutes over it or
/// give up. Bytes are a coarse measure of a driver's work: on lavapipe
/// (`benches/compile_times.py`, first calls with Mesa's shader cache off)
/// a matmul stage of 282 KB of multiply-adds compiles and runs in 1.3 s,
/// while 256 unrolled, guarded copies of a pointwise `tanh(exp(x * y) - x)`
/// (260 KB) take 9-15 s; the finer bounds are [`MAX_UNROLLED_BLOCKS`] and
/// [`MAX_COPIED_LOOP_STEPS`].
pub const MAX_STAGE_BYTES: usize = 1024 * 1024;

/// The longest loop lavapipe unrolled itself (32 steps did, 40 did not).
const DRIVER_UNROLLS: u64 = 32;

/// One dispatch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Launch {
    /// Workgroups along x, y, z.
    pub workgroups: [u64; 3],
    /// Invocations per workgroup along x, y, z.
    pub workgroup_size: [u64; 3],
    /// Most `for`-loop iterations one invocation runs.
    pub loop_iterations: u64,
    /// Blocks in the nest's code once unrolled loops are copied out: what
    /// a shader compiler has to chew through.
    pub unrolled_blocks: u64,
    /// Steps of the `for` loops that unrolled loops copy out, each copy's
    /// counted (loops inside those multiply).
    pub copied_loop_steps: u64,
    /// Bytes of workgroup memory the nest uses.
    pub workgroup_bytes: u64,
    /// Lanes of its widest subgroup reduction (0 for none), set by
    /// `cross_invocation`: the device needs subgroups at least this large.
    pub subgroup_lanes: u64,
    /// Every buffer the nest reads or writes, ascending.
    pub buffers: Vec<BufferId>,
}

impl Launch {
    /// The extent of the grid (workgroup axes) or workgroup (invocation
    /// axes) along `axis`.
    pub fn extent(&self, axis: ThreadAxis) -> u64 {
        if axis.is_workgroup() {
            self.workgroups[axis.dim()]
        } else {
            self.workgroup_size[axis.dim()]
        }
    }

    fn extent_mut(&mut self, axis: ThreadAxis) -> &mut u64 {
        if axis.is_workgroup() {
            &mut self.workgroups[axis.dim()]
        } else {
            &mut self.workgroup_size[axis.dim()]
        }
    }
}

pub(super) fn run(l: &mut Lowered) -> Result<(), LowerError> {
    let k = &l.kernel;
    let mut launches = Vec::with_capacity(k.body.len());
    for (i, root) in k.body.iter().enumerate() {
        let mut launch = Launch {
            workgroups: [1; 3],
            workgroup_size: [1; 3],
            loop_iterations: loop_iterations(l, root),
            unrolled_blocks: unrolled_blocks(k, root),
            copied_loop_steps: copied_loop_steps(l, root, 1),
            ..Launch::default()
        };
        bound_extents(k, root, &mut launch);
        buffers_in(k, root, &mut launch.buffers);
        launch.buffers.sort_unstable();
        launch.buffers.dedup();
        launch.workgroup_bytes = launch
            .buffers
            .iter()
            .filter(|&&b| k.buffer(b).scope == Scope::Workgroup)
            .map(|&b| 4 * k.buffer(b).numel().max(1))
            .sum();
        if l.target == Target::Wgsl {
            fits_u32(i, &launch)?;
        }
        launches.push(launch);
    }
    l.launches = launches;
    Ok(())
}

/// WGSL dispatches and workgroup sizes are `u32`.
fn fits_u32(stage: usize, launch: &Launch) -> Result<(), LowerError> {
    let dims = [
        ("workgroup", &launch.workgroups),
        ("invocation", &launch.workgroup_size),
    ];
    for (what, extents) in dims {
        if let Some(&d) = extents.iter().find(|&&d| u32::try_from(d).is_err()) {
            return Err(LowerError {
                pass: "launch",
                message: format!("stage{stage}: {what} extent {d} does not fit in u32"),
            });
        }
    }
    Ok(())
}

fn bound_extents(k: &Kernel, node: &Node, launch: &mut Launch) {
    if let Node::Loop(l, body) = node {
        let lp = k.loop_(*l);
        if let LoopKind::Bound(axis) = lp.kind {
            let slot = launch.extent_mut(axis);
            *slot = (*slot).max(lp.extent);
        }
        body.iter().for_each(|n| bound_extents(k, n, launch));
    }
}

/// `for`-loop iterations one invocation runs in `node`: bound loops run
/// one iteration per invocation; unrolled ones, loops of one iteration and
/// `vec4` steps are not loops.
fn loop_iterations(l: &Lowered, node: &Node) -> u64 {
    let Node::Loop(id, body) = node else { return 0 };
    let inner: u64 = body.iter().map(|n| loop_iterations(l, n)).sum();
    let lp = l.kernel.loop_(*id);
    match lp.kind {
        LoopKind::Bound(_) => inner,
        LoopKind::Vectorized if l.vectors.loops.contains_key(id) => 0,
        LoopKind::Unrolled | LoopKind::Pipelined { unrolled: true, .. } => {
            lp.extent.saturating_mul(inner)
        }
        _ if lp.extent == 1 => inner,
        _ => lp.extent.saturating_mul(1 + inner),
    }
}

/// Blocks in `node`'s code, each unrolled loop's body counted once per
/// iteration (nested ones multiply).
fn unrolled_blocks(k: &Kernel, node: &Node) -> u64 {
    let Node::Loop(id, body) = node else { return 1 };
    let inner = body
        .iter()
        .map(|n| unrolled_blocks(k, n))
        .fold(0u64, u64::saturating_add);
    let lp = k.loop_(*id);
    match lp.kind {
        LoopKind::Unrolled | LoopKind::Pipelined { unrolled: true, .. } => {
            lp.extent.saturating_mul(inner)
        }
        _ => inner,
    }
}

/// Steps of the `for` loops in `node`'s code that unrolled loops copy
/// out, `copies` times each (`copies` is 1 outside unrolled loops, where a
/// loop is not a copy). Drivers may unroll those loops, so the steps of
/// one multiply the copies of the loops inside it, up to the loops a
/// driver would not unroll.
fn copied_loop_steps(l: &Lowered, node: &Node, copies: u64) -> u64 {
    let Node::Loop(id, body) = node else { return 0 };
    let lp = l.kernel.loop_(*id);
    let steps = copies.saturating_mul(lp.extent);
    let (here, inner) = match lp.kind {
        LoopKind::Unrolled | LoopKind::Pipelined { unrolled: true, .. } => (0, steps),
        LoopKind::Bound(_) => (0, copies),
        LoopKind::Vectorized if l.vectors.loops.contains_key(id) => (0, copies),
        _ if lp.extent == 1 || copies == 1 => (0, copies),
        _ if lp.extent > DRIVER_UNROLLS => (copies, copies),
        _ => (steps, steps),
    };
    body.iter()
        .map(|n| copied_loop_steps(l, n, inner))
        .fold(here, u64::saturating_add)
}

fn buffers_in(k: &Kernel, node: &Node, out: &mut Vec<BufferId>) {
    match node {
        Node::Block(b) => {
            let block = k.block(*b);
            out.push(block.buffer);
            let mut loads = Vec::new();
            block.value.loads(&mut loads);
            out.extend(loads.into_iter().map(|(buf, _)| buf));
        }
        Node::Loop(_, body) => body.iter().for_each(|n| buffers_in(k, n, out)),
    }
}

/// The device limit a launch exceeds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LaunchLimit {
    /// `max_compute_workgroup_size_{x,y,z}` (the axis: 0, 1, 2).
    WorkgroupSize(usize),
    /// `max_compute_workgroups_per_dimension` (the axis).
    Workgroups(usize),
    /// The driver's loop budget per invocation (llvmpipe's).
    LoopIterations,
    /// [`MAX_UNROLLED_BLOCKS`]: the blocks unrolled loops copy out into
    /// one WGSL stage.
    UnrolledBlocks,
    /// [`MAX_COPIED_LOOP_STEPS`]: the steps of the loops unrolled loops
    /// copy out into one WGSL stage.
    CopiedLoopSteps,
    /// `max_compute_workgroup_storage_size`.
    WorkgroupStorage,
    /// The device's smallest subgroup (`None`: no subgroups).
    SubgroupSize,
    /// `max_compute_invocations_per_workgroup`.
    Invocations,
    /// `max_storage_buffers_per_shader_stage`.
    StorageBuffers,
    /// `max_storage_buffer_binding_size`, for the named buffer.
    BindingSize(String),
}

/// A launch over a device limit: which stage, which limit, the value and
/// the most the device allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchError {
    pub stage: usize,
    pub limit: LaunchLimit,
    pub value: u64,
    pub max: u64,
}

impl Display for LaunchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (s, v, max) = (self.stage, self.value, self.max);
        let xyz = |d: usize| ["x", "y", "z"][d];
        match &self.limit {
            LaunchLimit::WorkgroupSize(d) => write!(
                f,
                "stage{s}: invocation.{0} extent {v} exceeds the device's \
                 max_compute_workgroup_size_{0} ({max})",
                xyz(*d)
            ),
            LaunchLimit::Workgroups(d) => write!(
                f,
                "stage{s}: workgroup.{} extent {v} exceeds the device's \
                 max_compute_workgroups_per_dimension ({max})",
                xyz(*d)
            ),
            LaunchLimit::LoopIterations => write!(
                f,
                "stage{s}: one invocation runs {v} loop iterations, more than this driver runs \
                 before it silently stops loops ({max}); bind more loops to workgroups or \
                 invocations"
            ),
            LaunchLimit::UnrolledBlocks => write!(
                f,
                "stage{s}: unrolled loops copy out {v} blocks, more than the {max} a WGSL stage \
                 holds so that shaders compile in seconds; unroll fewer or shorter loops"
            ),
            LaunchLimit::CopiedLoopSteps => write!(
                f,
                "stage{s}: unrolled loops copy out loops of {v} steps in all, more than the \
                 {max} a WGSL stage holds so that shaders compile in seconds (drivers unroll \
                 short loops themselves); unroll the inner loops instead, or fewer or shorter \
                 ones"
            ),
            LaunchLimit::WorkgroupStorage => write!(
                f,
                "stage{s}: {v} bytes of workgroup memory exceed the device's \
                 max_compute_workgroup_storage_size ({max})"
            ),
            LaunchLimit::SubgroupSize if max == 0 => write!(
                f,
                "stage{s}: a subgroup reduction spans {v} invocations, but this adapter has no \
                 subgroups"
            ),
            LaunchLimit::SubgroupSize => write!(
                f,
                "stage{s}: a subgroup reduction spans {v} invocations, but the device's \
                 smallest subgroup has {max}"
            ),
            LaunchLimit::Invocations => write!(
                f,
                "stage{s}: {v} invocations per workgroup exceed the device's \
                 max_compute_invocations_per_workgroup ({max})"
            ),
            LaunchLimit::StorageBuffers => write!(
                f,
                "stage{s}: {v} storage buffers exceed the device's \
                 max_storage_buffers_per_shader_stage ({max})"
            ),
            LaunchLimit::BindingSize(name) => write!(
                f,
                "buffer {name}: {v} bytes exceed the device's max_storage_buffer_binding_size \
                 ({max})"
            ),
        }
    }
}

impl std::error::Error for LaunchError {}

/// Every limit of `device` the lowered kernel's launches exceed, stage by
/// stage, in a fixed order.
pub fn launch_violations(l: &Lowered, device: &DeviceInfo) -> Vec<LaunchError> {
    let lim = &device.limits;
    let mut out = Vec::new();
    for (stage, launch) in l.launches.iter().enumerate() {
        let mut over = |limit: LaunchLimit, value: u64, max: u64| {
            if value > max {
                out.push(LaunchError {
                    stage,
                    limit,
                    value,
                    max,
                });
            }
        };
        for d in 0..3 {
            let max_size = u64::from(lim.max_workgroup_size[d]);
            over(
                LaunchLimit::WorkgroupSize(d),
                launch.workgroup_size[d],
                max_size,
            );
            let max_groups = u64::from(lim.max_workgroups_per_dimension);
            over(LaunchLimit::Workgroups(d), launch.workgroups[d], max_groups);
        }
        if let Some(cap) = lim.max_loop_iterations_per_invocation {
            over(LaunchLimit::LoopIterations, launch.loop_iterations, cap);
        }
        if l.target == Target::Wgsl {
            let (copies, max) = (launch.unrolled_blocks, MAX_UNROLLED_BLOCKS);
            over(LaunchLimit::UnrolledBlocks, copies, max);
            let (steps, max) = (launch.copied_loop_steps, MAX_COPIED_LOOP_STEPS);
            over(LaunchLimit::CopiedLoopSteps, steps, max);
        }
        let storage = u64::from(lim.max_workgroup_storage_bytes);
        over(
            LaunchLimit::WorkgroupStorage,
            launch.workgroup_bytes,
            storage,
        );
        if launch.subgroup_lanes > 0 {
            let smallest = device.subgroup_sizes.map_or(0, |(min, _)| u64::from(min));
            over(LaunchLimit::SubgroupSize, launch.subgroup_lanes, smallest);
        }
        let invocations = launch.workgroup_size.iter().product();
        let max_invocations = u64::from(lim.max_invocations_per_workgroup);
        over(LaunchLimit::Invocations, invocations, max_invocations);
        let globals = launch
            .buffers
            .iter()
            .filter(|&&b| l.kernel.buffer(b).scope == Scope::Global);
        let max_buffers = u64::from(lim.max_storage_buffers_per_stage);
        over(
            LaunchLimit::StorageBuffers,
            globals.count() as u64,
            max_buffers,
        );
    }
    for b in l.kernel.live_buffers() {
        let buf = l.kernel.buffer(b);
        let bytes = 4 * buf.numel();
        if buf.scope == Scope::Global && bytes > lim.max_storage_buffer_binding_size {
            out.push(LaunchError {
                stage: 0,
                limit: LaunchLimit::BindingSize(buf.name.clone()),
                value: bytes,
                max: lim.max_storage_buffer_binding_size,
            });
        }
    }
    out
}

/// The first limit of `device` the lowered kernel exceeds, if any.
pub fn verify_launch(l: &Lowered, device: &DeviceInfo) -> Result<(), LaunchError> {
    match launch_violations(l, device).into_iter().next() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

impl Display for Launch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} workgroups of {:?}, {} loop iterations per invocation, {} bytes of workgroup \
             memory",
            self.workgroups, self.workgroup_size, self.loop_iterations, self.workgroup_bytes
        )?;
        if self.subgroup_lanes > 0 {
            write!(f, ", subgroups of at least {}", self.subgroup_lanes)?;
        }
        Ok(())
    }
}
