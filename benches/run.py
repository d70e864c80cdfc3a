"""tilefuse against its peers, in one run, as ratios.

    python benches/run.py                 # every case, CPU device and GPU (if any)
    python benches/run.py --quick         # smaller sizes, for a smoke test
    python benches/run.py --json out.json

Each case is timed on the CPU device and on the GPU device (lavapipe on
machines without a GPU) with a hand schedule, and numpy (and torch, when
installed) run the same computation in the same process. Times are medians
of repeated runs; the table shows milliseconds and tilefuse time / peer
time (below 1 means tilefuse is faster).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import tilefuse as tf

Arrays = list[np.ndarray[Any, Any]]


@dataclass
class Case:
    name: str
    fusion: tf.Fusion
    inputs: Arrays
    numpy: Callable[..., Any]
    #: Hand schedule per device kind; ``None`` takes the default heuristics.
    schedule: dict[str, Callable[[tf.Schedule], None] | None]
    torch: Callable[..., Any] | None = None
    results: dict[str, float] = field(default_factory=dict)


def median_time(fn: Callable[[], Any], repeat: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


# --- hand schedules ------------------------------------------------------------


def inline_all(s: tf.Schedule) -> None:
    for b in s.get_blocks():
        try:
            s.compute_inline(b)
        except tf.ScheduleError:
            pass


def cpu_rows_parallel(s: tf.Schedule) -> None:
    """Inline pointwise ops; each remaining block's outer loop in parallel."""
    inline_all(s)
    for b in s.get_blocks():
        s.parallel(s.get_loops(b)[0])


def cpu_softmax(s: tf.Schedule) -> None:
    """Rows in parallel; each row's max, exp (kept in a row buffer, so it is
    computed once) and sum are computed at the row loop of the output."""
    for b in s.get_blocks():
        if b.name != "e":
            try:
                s.compute_inline(b)
            except tf.ScheduleError:
                pass
    *producers, out = s.get_blocks()
    row = s.get_loops(out)[0]
    for p in reversed(producers):
        s.compute_at(p, row)
    s.parallel(row)


def gpu_pointwise(s: tf.Schedule) -> None:
    inline_all(s)
    for b in s.get_blocks():
        i, j = s.get_loops(b)
        s.bind(i, "workgroup.x")
        _, ji = s.split(j, [None, 256])
        s.bind(ji, "invocation.x")


def gpu_softmax(s: tf.Schedule) -> None:
    inline_all(s)
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


def cases(quick: bool) -> list[Case]:
    rng = np.random.default_rng(0)
    n = 1024 if quick else 4096
    out = []

    f = tf.Fusion()
    a = f.input((n, n), "f32", name="a")
    b = f.input((n, n), "f32", name="b")
    y = (a * b + 1.0).tanh() * 0.5 + (-a).exp()
    y.name = "y"
    f.output(y)
    xa = rng.standard_normal((n, n)).astype(np.float32)
    xb = rng.standard_normal((n, n)).astype(np.float32)
    out.append(
        Case(
            f"chain tanh(a*b+1)*0.5+exp(-a) {n}x{n}",
            f,
            [xa, xb],
            lambda a, b: np.tanh(a * b + 1) * 0.5 + np.exp(-a),
            {"cpu": cpu_rows_parallel, "gpu": gpu_pointwise},
            torch=lambda t, a, b: t.tanh(a * b + 1) * 0.5 + t.exp(-a),
        )
    )

    out.append(
        Case(
            f"chain, default heuristics {n}x{n}",
            f,
            [xa, xb],
            lambda a, b: np.tanh(a * b + 1) * 0.5 + np.exp(-a),
            {"cpu": None, "gpu": None},
            torch=lambda t, a, b: t.tanh(a * b + 1) * 0.5 + t.exp(-a),
        )
    )

    f = tf.Fusion()
    x = f.input((n, n), "f32", name="x")
    e = (x - x.max(axis=1, keepdims=True)).exp()
    e.name = "e"
    y = e / e.sum(axis=1, keepdims=True)
    y.name = "y"
    f.output(y)
    xs = rng.standard_normal((n, n)).astype(np.float32)

    def np_softmax(x: Any) -> Any:
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    out.append(
        Case(
            f"softmax {n}x{n}",
            f,
            [xs],
            np_softmax,
            {"cpu": cpu_softmax, "gpu": gpu_softmax},
            torch=lambda t, x: t.softmax(x, dim=1),
        )
    )

    m = 256 if quick else 1024
    f = tf.Fusion()
    a = f.input((m, m), "f32", name="a")
    b = f.input((m, m), "f32", name="b")
    c = a @ b
    c.name = "c"
    f.output(c)
    ma = rng.standard_normal((m, m)).astype(np.float32)
    mb = rng.standard_normal((m, m)).astype(np.float32)
    out.append(
        Case(
            f"matmul {m}^3",
            f,
            [ma, mb],
            lambda a, b: a @ b,
            {"cpu": cpu_matmul, "gpu": gpu_matmul},
            torch=lambda t, a, b: a @ b,
        )
    )
    return out


def run_case(case: Case, devices: dict[str, tf.Device], torch: Any, repeat: int) -> Case:
    """Times the peers and each device on one case (checking tilefuse's
    result against float64 numpy first)."""
    print(f"[{case.name}]", file=sys.stderr, flush=True)
    want = case.numpy(*[x.astype(np.float64) for x in case.inputs])
    case.results["numpy"] = median_time(lambda: case.numpy(*case.inputs), repeat)
    if torch is not None and case.torch is not None:
        tin = [torch.from_numpy(x) for x in case.inputs]
        case.results["torch"] = median_time(lambda: case.torch(torch, *tin), repeat)
    for dev_name, device in devices.items():
        recipe = case.schedule[dev_name]
        if recipe is None:
            kernel = case.fusion.schedule(case.fusion.heuristics(device=device), device)
        else:
            s = case.fusion.create_schedule()
            recipe(s)
            kernel = s.build(device)
        got = kernel(*case.inputs)
        err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
        assert err < 1e-4, f"{case.name} on {dev_name}: relative error {err}"
        timing = kernel.benchmark(*case.inputs, warmup=2, repeat=repeat)
        case.results[f"tilefuse-{dev_name}"] = timing.median
        print(f"  tilefuse-{dev_name}: {timing.median * 1e3:.1f} ms", file=sys.stderr, flush=True)
    return case


def scheduling_latency(device: tf.Device, repeat: int) -> float:
    """Median seconds for heuristics + schedule + WGSL (+ compile for the
    device) of a 10-op pointwise fusion."""
    f = tf.Fusion()
    a = f.input((1024, 1024), "f32", name="a")
    b = f.input((1024,), "f32", name="b")
    y = ((a * b + 1.0).tanh() * 0.5 + (-a).exp()).maximum(0.0).sqrt() / (a.abs() + 1.0)
    f.output(y)
    return median_time(lambda: f.schedule(f.heuristics(device=device), device), repeat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()

    devices: dict[str, tf.Device] = {"cpu": tf.Device.cpu()}
    try:
        devices["gpu"] = tf.Device.gpu()
    except tf.DeviceError as exc:
        print(f"no GPU device ({exc}); timing the CPU device only", file=sys.stderr)
    try:
        import torch  # type: ignore[import-not-found]

        torch.set_num_threads(len(__import__("os").sched_getaffinity(0)))
    except ImportError:
        torch = None

    rows = [run_case(case, devices, torch, args.repeat) for case in cases(args.quick)]

    for name, device in devices.items():
        t = scheduling_latency(device, max(args.repeat, 20))
        print(
            f"heuristics + schedule + WGSL + build, 10-op fusion, {name}: {t * 1e3:.2f} ms",
            file=sys.stderr,
        )
    peers = [p for p in ("numpy", "torch") if any(p in c.results for c in rows)]
    header = f"{'case':<40} {'device':<14} {'ms':>9} " + " ".join(f"{'/ ' + p:>9}" for p in peers)
    print(header)
    print("-" * len(header))
    for c in rows:
        for p in peers:
            if p in c.results:
                print(f"{c.name:<40} {p:<14} {c.results[p] * 1e3:>9.1f}")
        for d in devices:
            t = c.results[f"tilefuse-{d}"]
            ratios = " ".join(
                f"{t / c.results[p]:>9.2f}" if p in c.results else f"{'-':>9}" for p in peers
            )
            print(f"{c.name:<40} {'tilefuse-' + d:<14} {t * 1e3:>9.1f} {ratios}")
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": platform.machine(),
        "cpu_threads": devices["cpu"].info["cores"],
        "gpu": devices["gpu"].info["name"] if "gpu" in devices else None,
        "numpy": np.__version__,
        "tilefuse": tf.__version__,
    }
    print(json.dumps(meta))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"meta": meta, "cases": {c.name: c.results for c in rows}}, fh, indent=2)


if __name__ == "__main__":
    main()
