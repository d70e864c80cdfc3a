"""tilefuse against its peers, in one run, as ratios.

    python benches/run.py                 # every case, CPU device and GPU (if any)
    python benches/run.py --quick         # smaller sizes, for a smoke test
    python benches/run.py --json out.json --plot sweep.png

Each case is a built-in workload (``tilefuse.workloads``), timed on the
CPU device and on the GPU device (lavapipe on machines without a GPU) by
the engine (``tilefuse.Engine``, the timing path ``tilefuse bench`` and the
tuner's users share): the default heuristics and a hand schedule, verified
against the float64 reference, then timed interleaved with time-based
warm-up and repetitions. numpy (the workload's numpy form) and torch, when
installed, run the same computation in the same process; where torch has
CUDA, it runs there too (``torch-cuda``: numpy in, numpy out; ``torch-cuda
kernel``: inputs on the GPU). Each kernel is timed twice: ``call`` is what
a user meets, ``k(*arrays)`` with its argument checks, allocations and
copies; ``kernel`` is the launches alone (GPU timestamps where the adapter
has them). The table shows milliseconds (medians) and tilefuse time / peer
time (below 1 means tilefuse is faster). A sweep of the chain from 2^10 to
2^24 elements follows (microseconds), plotted with ``--plot`` when
matplotlib is there.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

import tilefuse as tf
from tilefuse.timing import Budget, call_sampler, measure

sys.path.insert(0, str(Path(__file__).parent))
import handwritten
from report import stamp

Arrays = list[np.ndarray[Any, Any]]

#: The hand-written WGSL runs under wgpu-py (the ``bench`` extra).
HAS_WGPU_PY = importlib.util.find_spec("wgpu") is not None


@dataclass
class Case:
    name: str
    workload: tf.Workload
    #: Hand schedules per device kind, timed beside the default heuristics.
    schedule: dict[str, Callable[[tf.Schedule], None]]
    torch: Callable[..., Any] | None = None
    #: The same work as hand-written WGSL, for the GPU comparison.
    handwritten: Callable[[], handwritten.Program] | None = None
    results: dict[str, float] = field(default_factory=dict)

    @property
    def fusion(self) -> tf.Fusion:
        return self.workload.payload

    @property
    def inputs(self) -> Arrays:
        return list(self.workload.inputs())


# --- hand schedules ------------------------------------------------------------


def cpu_rows_parallel(s: tf.Schedule) -> None:
    """Inline pointwise ops; each remaining block's outer loop in parallel."""
    s.compute_inline_all()
    for b in s.get_blocks():
        s.parallel(s.get_loops(b)[0])


def cpu_softmax(s: tf.Schedule) -> None:
    """Rows in parallel; each row's max, exp (kept in a row buffer, so it is
    computed once) and sum are computed at the row loop of the output."""
    s.compute_inline_all(keep=["e"])
    *producers, out = s.get_blocks()
    row = s.get_loops(out)[0]
    for p in reversed(producers):
        s.compute_at(p, row)
    s.parallel(row)


def gpu_pointwise(s: tf.Schedule) -> None:
    s.compute_inline_all()
    for b in s.get_blocks():
        i, j = s.get_loops(b)
        s.bind(i, "workgroup.x")
        _, ji = s.split(j, [None, 256])
        s.bind(ji, "invocation.x")


def gpu_softmax(s: tf.Schedule) -> None:
    s.compute_inline_all()
    for b in s.get_blocks():
        i, j = s.get_loops(b)
        if b.name == "y":
            s.bind(i, "workgroup.x")
            _, ji = s.split(j, [None, 256])
            s.bind(ji, "invocation.x")
        else:
            io, ii = s.split(i, [None, 64])
            s.bind(io, "workgroup.x")
            s.bind(ii, "invocation.x")


def cpu_matmul(s: tf.Schedule) -> None:
    (b,) = s.get_blocks()
    i, j, k = s.get_loops(b)
    s.reorder(i, k, j)
    s.parallel(i)


def gpu_matmul(s: tf.Schedule) -> None:
    (b,) = s.get_blocks()
    i, j, _ = s.get_loops(b)
    io, ii = s.split(i, [None, 16])
    jo, ji = s.split(j, [None, 16])
    s.reorder(io, jo, ii, ji)
    s.bind(io, "workgroup.y")
    s.bind(jo, "workgroup.x")
    s.bind(ii, "invocation.y")
    s.bind(ji, "invocation.x")


# --- cases ---------------------------------------------------------------------


def torch_chain(t: Any, a: Any, b: Any) -> Any:
    return t.tanh(a * b + 1) * 0.5 + t.exp(-a)


def cases(quick: bool) -> list[Case]:
    n = 1024 if quick else 4096
    m = 256 if quick else 1024
    get = tf.workloads.get
    chain = get("chain", rows=n, cols=n)
    matmul = get("matmul", m=m, n=m, k=m, epilogue="bias_relu")
    return [
        Case(
            f"chain tanh(a*b+1)*0.5+exp(-a) {n}x{n}",
            chain,
            {"cpu": cpu_rows_parallel, "gpu": gpu_pointwise},
            torch=torch_chain,
            handwritten=lambda: handwritten.chain(n * n, *chain.inputs()),
        ),
        Case(
            f"softmax {n}x{n}",
            get("softmax", rows=n, cols=n),
            {"cpu": cpu_softmax, "gpu": gpu_softmax},
            torch=lambda t, x: t.softmax(x, dim=1),
        ),
        Case(
            f"layernorm {n}x{n}",
            get("layernorm", rows=n, cols=n),
            {},
            torch=lambda t, x, w, b: t.nn.functional.layer_norm(x, (x.shape[1],), w, b, 1e-5),
        ),
        Case(
            f"column sum {n}x{n}",
            get("column_sum", rows=n, cols=n),
            {},
            torch=lambda t, x: x.sum(dim=0),
        ),
        Case(
            f"matmul {m}^3 + bias + relu",
            matmul,
            {},
            torch=lambda t, a, b, bias: t.relu(a @ b + bias),
            handwritten=lambda: handwritten.matmul_bias_relu(*matmul.inputs()),
        ),
    ]


def median_call(fn: Callable[[], Any], budget: Budget) -> float:
    """Median seconds of ``fn()`` over ``budget``'s timed calls."""
    return statistics.median(measure(call_sampler(fn), budget))


def time_torch(fn: Callable[..., Any], torch: Any, inputs: Arrays, budget: Budget) -> float:
    tin = [torch.from_numpy(np.array(x)) for x in inputs]  # writeable copies
    return median_call(partial(fn, torch, *tin), budget)


def time_torch_cuda(
    fn: Callable[..., Any], torch: Any, inputs: Arrays, budget: Budget
) -> dict[str, float]:
    """torch on CUDA, the GPU user's peer: ``torch-cuda`` from numpy arrays
    to a numpy result (uploads, the work, the download), as ``call`` is;
    ``torch-cuda kernel`` on inputs already on the GPU, up to a
    synchronize, as ``kernel`` is."""
    resident = [torch.from_numpy(np.array(x)).cuda() for x in inputs]

    def kernel() -> None:
        fn(torch, *resident)
        torch.cuda.synchronize()

    def call() -> Any:
        return fn(torch, *(torch.from_numpy(x).cuda() for x in inputs)).cpu().numpy()

    return {
        "torch-cuda": median_call(call, budget),
        "torch-cuda kernel": median_call(kernel, budget),
    }


def time_torch_peers(
    fn: Callable[..., Any], torch: Any, inputs: Arrays, budget: Budget
) -> dict[str, float]:
    """torch's times of ``fn``: on the CPU, and on CUDA where torch has it."""
    if torch is None:
        return {}
    times = {"torch": time_torch(fn, torch, inputs, budget)}
    if torch.cuda.is_available():
        times.update(time_torch_cuda(fn, torch, inputs, budget))
    return times


def run_case(case: Case, devices: dict[str, tf.Device], torch: Any, budget: Budget) -> Case:
    """Times the peers and each device on one case; the engine verifies
    every tilefuse result against the float64 reference first. Columns:
    ``tilefuse-<device>`` with the default heuristics, ``hand-<device>``
    with the hand schedule; on the GPU, ``wgpu:tilefuse`` and
    ``wgpu:handwritten`` time the generated and the hand-written WGSL under
    one wgpu-py harness."""
    print(f"[{case.name}]", file=sys.stderr, flush=True)
    w = case.workload
    case.results["numpy"] = statistics.median(tf.Engine(tf.Device.cpu()).time_numpy(w, budget))
    if case.torch is not None:
        case.results.update(time_torch_peers(case.torch, torch, case.inputs, budget))
    for dev_name, device in devices.items():
        # numpy's BLAS threads (and torch's) spin on for about 0.1 s after
        # a call; tilefuse timed right after them lost up to 2x on 2 cores.
        time.sleep(0.2)
        engine = tf.Engine(device)
        # The default heuristic's params, not a tuned winner the user's
        # heuristic cache may hold for the same fusion and device.
        default = case.fusion.heuristics(device=device, cache=False)
        variants: dict[str, tf.engine.Variant] = {f"tilefuse-{dev_name}": default}
        recipe = case.schedule.get(dev_name)
        if recipe is not None:
            s = case.fusion.create_schedule()
            recipe(s)
            variants[f"hand-{dev_name}"] = s.build(device)
        for what in ("call", "kernel"):
            timed = engine.compare(w, variants, check=what == "call", measure=what, budget=budget)
            for label, r in timed.items():
                case.results[f"{label} {what}"] = r.median
        for label in variants:
            call, launch = case.results[f"{label} call"], case.results[f"{label} kernel"]
            print(
                f"  {label}: call {call * 1e3:.2f} ms, kernel {launch * 1e3:.2f} ms",
                file=sys.stderr,
            )
        if dev_name == "gpu" and case.handwritten is not None and HAS_WGPU_PY:
            time_handwritten(case, engine.lower(w))
    return case


def time_handwritten(case: Case, default: Any, repeat: int = 20) -> None:
    """The generated and the hand-written WGSL under one wgpu-py harness."""
    want = case.workload.expected()[0]
    for label, program in [
        ("wgpu:tilefuse", handwritten.from_kernel(default, case.inputs)),
        ("wgpu:handwritten", case.handwritten()),  # type: ignore[misc]
    ]:
        seconds, got = handwritten.time_program(
            program, repeat, warmup=warmup_runs(default, case.inputs)
        )
        np.testing.assert_allclose(np.reshape(got, want.shape), want, rtol=1e-4, atol=1e-4)
        case.results[label] = seconds
        print(f"  {label}: {seconds * 1e3:.1f} ms", file=sys.stderr, flush=True)


def warmup_runs(kernel: tf.Kernel, inputs: Arrays, seconds: float = 0.3) -> int:
    """Untimed runs worth ``seconds`` of the kernel: a discrete GPU idles
    at a fraction of its clock (an H100 at 345 of 1980 MHz) and a couple
    of short launches leave it there (`benches/gpu_call.py`). For
    the wgpu-py harness, which has no time-based warm-up of its own."""
    once = kernel.benchmark(*inputs, warmup=1, repeat=1).median
    return max(2, min(1000, int(seconds / max(once, 1e-6))))


# --- the small-size sweep -------------------------------------------------------

SWEEP_SIZES = [2**e for e in range(10, 25, 2)]


def sweep(devices: dict[str, tf.Device], torch: Any, budget: Budget, quick: bool) -> dict[int, Any]:
    """The chain at each size (1024 columns, n / 1024 rows): numpy, torch,
    and each device's call and kernel, in seconds."""
    rows: dict[int, dict[str, float]] = {}
    for n in SWEEP_SIZES[:5] if quick else SWEEP_SIZES:
        print(f"[sweep 2^{n.bit_length() - 1}]", file=sys.stderr, flush=True)
        w = tf.workloads.get("chain", rows=n // 1024, cols=1024)
        row = {"numpy": statistics.median(tf.Engine(tf.Device.cpu()).time_numpy(w, budget))}
        row.update(time_torch_peers(torch_chain, torch, list(w.inputs()), budget))
        for dev_name, device in devices.items():
            default = w.fusion().heuristics(device=device, cache=False)
            for what in ("call", "kernel"):
                r = tf.Engine(device).benchmark(
                    w, default, measure=what, budget=budget, check=what == "call"
                )
                row[f"{dev_name} {what}"] = r.median
        rows[n] = row
    return rows


def print_sweep(rows: dict[int, dict[str, float]]) -> None:
    columns = list(next(iter(rows.values())))
    width = {c: max(16, len(c) + 5) for c in columns}
    print(f"{'chain, elements':<16}" + "".join(f"{c + ' us':>{width[c]}}" for c in columns))
    for n, row in rows.items():
        print(
            f"{'2^' + str(n.bit_length() - 1):<16}"
            + "".join(f"{row[c] * 1e6:>{width[c]}.1f}" for c in columns)
        )


def plot_sweep(rows: dict[int, dict[str, float]], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed; no plot", file=sys.stderr)
        return
    sizes = list(rows)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for column in next(iter(rows.values())):
        style = "--" if column.endswith("kernel") else "-"
        ax.plot(sizes, [rows[n][column] * 1e6 for n in sizes], style, marker="o", label=column)
    ax.set(xscale="log", yscale="log", xlabel="elements", ylabel="microseconds (median)")
    ax.set_title("tanh(a*b+1)*0.5+exp(-a): the user's call vs the kernel alone")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}", file=sys.stderr)


def latency_fusions() -> dict[str, tf.Fusion]:
    """Fusions whose heuristics + schedule + WGSL latency is measured."""
    out = {}
    f = tf.Fusion()
    a = f.input((1024, 1024), "f32", name="a")
    b = f.input((1024,), "f32", name="b")
    y = ((a * b + 1.0).tanh() * 0.5 + (-a).exp()).maximum(0.0).sqrt() / (a.abs() + 1.0)
    f.output(y)
    out["pointwise, 10 ops"] = f
    by_name = {c.name.split(" ")[0]: c.fusion for c in cases(quick=True)}
    for name in ("softmax", "layernorm", "matmul"):
        out[name] = by_name[name]
    return out


LATENCY = ("heuristics", "cache hit", "schedule + build")


def host_latency(fusion: tf.Fusion, device: tf.Device, budget: Budget) -> dict[str, float]:
    """Median seconds of what a call costs the host before any kernel runs:
    the default heuristic (``cache=False``), a cache hit (the same params
    stored as a tuned winner in a cache of its own), and scheduling,
    lowering and WGSL with the compiled pipeline from the device's cache
    after the first call (``f.schedule(params, device)``)."""
    params = fusion.heuristics(device=device, cache=False)
    times = {
        "heuristics": median_call(lambda: fusion.heuristics(device=device, cache=False), budget),
        "schedule + build": median_call(lambda: fusion.schedule(params, device), budget),
    }
    if isinstance(params, tf.HeuristicParams):  # one kernel: a cache entry of its own
        with tempfile.TemporaryDirectory() as cache_dir:
            os.environ["TILEFUSE_CACHE"], before = cache_dir, os.environ.get("TILEFUSE_CACHE")
            try:
                tf.cache.store(fusion, device, params.to_dict(), best_time=1e-3)
                times["cache hit"] = median_call(lambda: fusion.heuristics(device=device), budget)
            finally:
                os.environ.pop("TILEFUSE_CACHE")
                if before is not None:
                    os.environ["TILEFUSE_CACHE"] = before
    return times


def machine(devices: dict[str, tf.Device]) -> dict[str, Any]:
    """What the numbers were measured on: the CPU's model, threads and
    SIMD, the GPU adapter and its driver, the peers' versions."""
    flags = set()
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    simd = [f for f in ("avx512f", "avx2", "fma", "f16c", "neon") if f in flags]
    gpu = devices.get("gpu")
    torch = sys.modules.get("torch")
    return {
        **stamp(),
        "cpu": model,
        "cpu_threads": devices["cpu"].info["cores"],
        "simd": simd,
        "gpu": gpu.info["name"] if gpu else None,
        "gpu_driver": gpu.info["driver"] if gpu else None,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": getattr(torch, "__version__", None),
        "tilefuse": f"{tf.__version__} ({revision()})",
    }


def revision() -> str:
    """The checkout's commit, or "?" outside a git checkout."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return out.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--warmup", type=float, default=0.3, help="seconds of warm-up per run")
    parser.add_argument("--rep", type=float, default=1.0, help="seconds of timed runs per run")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--label", help="the machine's name in the report (default: its CPU)")
    parser.add_argument("--plot", help="plot the sweep to this image (needs matplotlib)")
    parser.add_argument("--no-sweep", action="store_true", help="skip the small-size sweep")
    parser.add_argument(
        "--case", action="append", help="only cases whose name contains this (repeatable)"
    )
    parser.add_argument(
        "--latency-only", action="store_true", help="only heuristics + schedule + build latency"
    )
    args = parser.parse_args()
    budget = Budget(warmup=args.warmup, rep=args.rep)

    devices: dict[str, tf.Device] = {"cpu": tf.Device.cpu()}
    try:
        devices["gpu"] = tf.Device.gpu()
    except tf.DeviceError as exc:
        print(f"no GPU device ({exc}); timing the CPU device only", file=sys.stderr)
    if "gpu" in devices and not HAS_WGPU_PY:
        print("no wgpu-py: the hand-written WGSL is not timed", file=sys.stderr)
    try:
        import torch  # type: ignore[import-not-found]

        torch.set_num_threads(len(__import__("os").sched_getaffinity(0)))
    except ImportError:
        torch = None

    only = args.latency_only
    chosen = [c for c in cases(args.quick) if not args.case or any(n in c.name for n in args.case)]
    rows = [] if only else [run_case(c, devices, torch, budget) for c in chosen]
    swept = {} if args.no_sweep or only else sweep(devices, torch, budget, args.quick)
    latency = {
        dev: {name: host_latency(f, device, budget) for name, f in latency_fusions().items()}
        for dev, device in devices.items()
    }

    peers = [
        p
        for p in ("numpy", "torch", "torch-cuda", "torch-cuda kernel")
        if any(p in c.results for c in rows)
    ]
    width = {p: max(9, len(p) + 2) for p in peers}
    header = f"{'case':<36} {'run':<24} {'ms':>9} " + " ".join(
        f"{'/ ' + p:>{width[p]}}" for p in peers
    )
    print(header)
    print("-" * len(header))
    for c in rows:
        for p in peers:
            if p in c.results:
                print(f"{c.name:<36} {p:<24} {c.results[p] * 1e3:>9.1f}")
        for label, t in c.results.items():
            if label in peers or label.startswith("wgpu:"):
                continue
            ratios = " ".join(
                f"{t / c.results[p]:>{width[p]}.2f}" if p in c.results else f"{'-':>{width[p]}}"
                for p in peers
            )
            print(f"{c.name:<36} {label:<24} {t * 1e3:>9.1f} {ratios}")
        if "wgpu:handwritten" in c.results:
            ours, hand = c.results["wgpu:tilefuse"], c.results["wgpu:handwritten"]
            print(
                f"{c.name:<36} {'gpu / hand WGSL':<24} {ours * 1e3:>9.1f} "
                f"{ours / hand:>9.2f}  (hand-written: {hand * 1e3:.1f} ms, same wgpu-py harness)"
            )
    if swept:
        print()
        print_sweep(swept)
        if args.plot:
            plot_sweep(swept, args.plot)
    print()
    print(f"{'host latency, ms':<24} {'device':<8}" + "".join(f"{k:>18}" for k in LATENCY))
    for dev, by_fusion in latency.items():
        for name, times in by_fusion.items():
            cells = "".join(
                f"{times[k] * 1e3:>18.3f}" if k in times else f"{'-':>18}" for k in LATENCY
            )
            print(f"{name:<24} {dev:<8}{cells}")
    meta = machine(devices)
    meta["label"] = args.label or f"{meta['cpu']} ({meta['cpu_threads']} threads)"
    meta["plot"] = args.plot
    print(json.dumps(meta))
    if args.json:
        with open(args.json, "w") as fh:
            results = {
                "meta": meta,
                "cases": {c.name: c.results for c in rows},
                "sweep": swept,
                "latency": latency,
            }
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()
