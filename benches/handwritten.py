"""Plain hand-written WGSL kernels, and one wgpu-py harness that times them
and tilefuse's generated kernels alike (same buffers, same submission and
wait), so that the ratio compares the shaders and nothing else.

The kernels are the ones a WebGPU programmer would write first:

- the pointwise chain over ``vec4<f32>``, one vector per invocation;
- matmul + bias + relu where each invocation accumulates a 4x4 register
  tile (four rows by one ``vec4`` of columns) reading straight from global
  memory, no workgroup memory (on a CPU Vulkan, barriers cost more than
  they save).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

import numpy as np

from tilefuse.timing import call_sampler


@dataclass
class Program:
    """A WGSL module with what a host needs to run it: bindings in order
    (inputs as arrays, outputs as element counts) and its dispatches."""

    wgsl: str
    #: Per binding: an input array, or the output's element count.
    buffers: list[np.ndarray[Any, Any] | int]
    #: ``(entry point, workgroups)`` in order; every binding is bound.
    dispatches: list[tuple[str, tuple[int, int, int]]]
    #: Per dispatch, the bindings it uses (all of them when omitted).
    uses: list[list[int]] | None = None
    #: The binding holding the (first) output.
    output: int = -1


def chain(n: int, a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> Program:
    """``tanh(a*b + 1)*0.5 + exp(-a)`` over ``n`` floats, a vec4 per invocation."""
    vectors = n // 4
    per_row = 65535 * 256
    wgsl = f"""
@group(0) @binding(0) var<storage, read> a: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> b: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<vec4<f32>>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {{
    let i = g.x + g.y * {per_row}u;
    if (i < {vectors}u) {{
        let x = a[i];
        y[i] = tanh(clamp(x * b[i] + 1.0, vec4(-10.0), vec4(10.0))) * 0.5 + exp(-x);
    }}
}}
"""
    groups = -(-vectors // 256)
    grid = (min(groups, 65535), -(-groups // 65535), 1)
    return Program(wgsl, [a, b, n], [("main", grid)])


def matmul_bias_relu(
    a: np.ndarray[Any, Any], b: np.ndarray[Any, Any], bias: np.ndarray[Any, Any]
) -> Program:
    """``relu(a @ b + bias)``: each invocation a 4x4 register tile, operands
    from global memory."""
    m, k = a.shape
    n = b.shape[1]
    assert m % 32 == 0 and n % 32 == 0, "the hand kernel has no tails"
    cols = n // 4
    acc = "\n".join(f"        acc{r} += a[(row + {r}u) * {k}u + kk] * bv;" for r in range(4))
    store = "\n".join(
        f"    c[(row + {r}u) * {cols}u + col] = max(acc{r} + bv4, vec4(0.0));" for r in range(4)
    )
    wgsl = f"""
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> bias: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> c: array<vec4<f32>>;

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {{
    let col = g.x;
    let row = g.y * 4u;
    var acc0 = vec4(0.0);
    var acc1 = vec4(0.0);
    var acc2 = vec4(0.0);
    var acc3 = vec4(0.0);
    for (var kk = 0u; kk < {k}u; kk++) {{
        let bv = b[kk * {cols}u + col];
{acc}
    }}
    let bv4 = bias[col];
{store}
}}
"""
    return Program(wgsl, [a, b, bias, m * n], [("main", (cols // 8, m // 32, 1))])


def from_kernel(kernel: Any, arrays: list[np.ndarray[Any, Any]]) -> Program:
    """A tilefuse kernel as a :class:`Program` (its WGSL, bindings and
    dispatches), to run under the same harness."""
    buffers: list[np.ndarray[Any, Any] | int] = []
    for b in kernel.bindings:
        if b["role"] == "input":
            buffers.append(np.ascontiguousarray(arrays[b["index"]]))
        else:
            buffers.append(int(np.prod(b["shape"])))
    dispatches = [(d["entry_point"], tuple(d["workgroups"])) for d in kernel.dispatch]
    output = next(
        i for i, b in enumerate(kernel.bindings) if b["role"] == "output" and b["index"] == 0
    )
    uses = [list(d["bindings"]) for d in kernel.dispatch]
    return Program(kernel.wgsl, buffers, dispatches, uses, output)


def time_program(
    program: Program, repeat: int, warmup: int = 2
) -> tuple[float, np.ndarray[Any, Any]]:
    """Median seconds of one submission of every dispatch, waited for on
    the host, with wgpu-py on the default adapter; and the output's
    contents, for checking."""
    import wgpu  # type: ignore[import-untyped]

    adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    device = adapter.request_device_sync(
        required_limits={
            "max-storage-buffer-binding-size": adapter.limits["max-storage-buffer-binding-size"],
            "max-buffer-size": adapter.limits["max-buffer-size"],
        }
    )
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
    buffers = []
    for b in program.buffers:
        if isinstance(b, np.ndarray):
            buffers.append(device.create_buffer_with_data(data=b.astype(np.float32), usage=usage))
        else:
            buffers.append(device.create_buffer(size=max(4, 4 * b), usage=usage))
    fence = device.create_buffer(size=4, usage=usage)
    module = device.create_shader_module(code=program.wgsl)
    passes = []
    for i, (entry, groups) in enumerate(program.dispatches):
        pipeline = device.create_compute_pipeline(
            layout="auto", compute={"module": module, "entry_point": entry}
        )
        used = program.uses[i] if program.uses else list(range(len(buffers)))
        group = device.create_bind_group(
            layout=pipeline.get_bind_group_layout(0),
            entries=[
                {
                    "binding": j,
                    "resource": {"buffer": buffers[j], "offset": 0, "size": buffers[j].size},
                }
                for j in used
            ],
        )
        passes.append((pipeline, group, groups))

    def run() -> None:
        encoder = device.create_command_encoder()
        for pipeline, group, groups in passes:
            compute = encoder.begin_compute_pass()
            compute.set_pipeline(pipeline)
            compute.set_bind_group(0, group)
            compute.dispatch_workgroups(*groups)
            compute.end()
        device.queue.submit([encoder.finish()])
        # Reading a few bytes back waits for the work before it
        # (on_submitted_work_done_sync fails in wgpu-py 0.32).
        device.queue.read_buffer(fence)

    samples = call_sampler(run)(warmup, repeat)
    out = np.frombuffer(device.queue.read_buffer(buffers[program.output]), dtype=np.float32)
    return statistics.median(samples), out
