"""Random params on random shapes: wrong results and the slowest points.

    python benches/params_fuzz.py                    # 25 matmuls x 12 points, seed 0
    python benches/params_fuzz.py --seed 3 --shapes 50 --points 20 --device gpu
    python benches/params_fuzz.py --workloads softmax,column_sum,chain

How the cases of `params_cliffs.py` were found. For each random problem (a
matmul of sizes from 1 to 256, either operand maybe transposed, maybe a
bias and relu; or, with ``--workloads``, one of those built-in workloads
with random sizes), a random search of the tuner (`tilefuse.tune`,
strategy `random`) draws the points; each is then scheduled, run on fresh
inputs and checked against the float64 reference, and its call timed
beside the default params'. Prints every wrong result and, at the end, the
slowest points against their defaults.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

import tilefuse as tf

SIZES = [1, 3, 8, 17, 33, 64, 100, 128, 200, 256]
#: Params fields every matmul point has and that say nothing about it.
PLAIN = ("scheduler", "version", "launch", "compile")


@dataclass
class Point:
    shape: str
    params: dict[str, Any]
    ms: float
    default_ms: float


def random_matmul(rng: np.random.Generator) -> tuple[tf.Fusion, str]:
    """A matmul of random sizes and transposes, maybe with bias and relu."""
    m, n, k = (int(rng.choice(SIZES)) for _ in range(3))
    tb = bool(rng.integers(2))
    ta = bool(rng.integers(2)) and not tb
    f = tf.Fusion()
    a = f.input([k, m] if ta else [m, k], "f32", name="a")
    b = f.input([n, k] if tb else [k, n], "f32", name="b")
    c = tf.matmul(a, b, transpose_a=ta, transpose_b=tb)
    epilogue = bool(rng.integers(2))
    if epilogue:
        c = (c + f.input([n], "f32", name="bias")).relu()
    f.output(c)
    marks = [(ta, " A^T"), (tb, " B^T"), (epilogue, " +bias,relu")]
    return f, f"{m}x{n}x{k}" + "".join(text for on, text in marks if on)


def random_workload(rng: np.random.Generator, names: list[str]) -> tuple[tf.Fusion, str]:
    """One of the built-in workloads `names`, its sizes drawn from SIZES
    (batches from 1 to 3) and its flags at random; of a workload that runs
    as several kernels (attention), one segment at random."""
    w = tf.workloads.get(str(rng.choice(names)))
    sizes: dict[str, int | bool] = {}
    for key, default in w.defaults.items():
        if isinstance(default, bool):
            sizes[key] = bool(rng.integers(2))
        elif isinstance(default, int):
            sizes[key] = int(rng.integers(1, 4)) if key == "batch" else int(rng.choice(SIZES))
    shown = ",".join(f"{k}={v}" for k, v in sizes.items())
    f = tf.workloads.get(w.name, **sizes).fusion()
    segments = f.segments()
    if len(segments) == 1:
        return f, f"{w.name}({shown})"
    i = int(rng.integers(len(segments)))
    return segments[i].fusion, f"{w.name}({shown}) segment {i}"


def points(f: tf.Fusion, device: tf.Device, count: int, seed: int) -> list[dict[str, Any]]:
    """The default params and `count` random points the tuner draws."""
    r = tf.tune(
        f,
        device=device,
        strategy="random",
        trials=count,
        seed=seed,
        cache=False,
        progress=False,
        builtin_heuristics=False,
    )
    return [t.params for t in r.trials if t.status != "failed"]


def error(got: np.ndarray[Any, Any], want: np.ndarray[Any, Any]) -> float:
    """The largest error relative to 1 + |reference|."""
    return float(np.max(np.abs(got - want) / (1 + np.abs(want)))) if want.size else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shapes", type=int, default=25)
    parser.add_argument("--points", type=int, default=12, help="random points per shape")
    parser.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    parser.add_argument(
        "--workloads",
        help="comma-separated built-in workloads to draw from instead of matmuls",
    )
    parser.add_argument("--show", type=int, default=5, help="slowest points to print")
    parser.add_argument("--json", help="also write the slowest points here, to reproduce them")
    args = parser.parse_args()
    device = tf.Device.cpu() if args.device == "cpu" else tf.Device.gpu()
    rng = np.random.default_rng(args.seed)
    names = args.workloads.split(",") if args.workloads else []
    wrong = 0
    worst: list[Point] = []
    for _ in range(args.shapes):
        f, shape = random_workload(rng, names) if names else random_matmul(rng)
        xs = [rng.standard_normal(t.shape).astype(np.float32) for t in f.inputs]
        want = f.evaluate(*xs)
        timed: list[tuple[float, dict[str, Any]]] = []
        for params in points(f, device, args.points, int(rng.integers(1 << 30))):
            kernel = f.schedule(params, device)
            if not error(kernel(*xs), want) < 1e-4:
                wrong += 1
                print(f"WRONG {shape} {json.dumps(params)}")
            timed.append((kernel.benchmark(*xs, warmup=1, repeat=3).median * 1e3, params))
        default_ms = timed[0][0]
        ms, params = max(timed, key=lambda t: t[0])
        worst.append(Point(shape, params, ms, default_ms))
        print(f"{shape:<28} default {default_ms:8.3f} ms, slowest {ms:8.3f} ms", flush=True)
    print(f"\n{wrong} wrong results; the slowest points:")
    slowest = sorted(worst, key=lambda p: -p.ms)[: args.show]
    for p in slowest:
        fields = {k: v for k, v in p.params.items() if k not in PLAIN}
        print(f"{p.ms:8.3f} ms ({p.ms / p.default_ms:.0f}x) {p.shape}: {json.dumps(fields)}")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(p) for p in slowest], indent=1))


if __name__ == "__main__":
    main()
