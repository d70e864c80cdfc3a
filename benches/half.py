"""Half precision on the CPU device: each case in f16 and bf16 against the
same fusion in f32 and against torch's CPU kernels in the same dtype.

    python benches/half.py                                   # 4096², matmul 1024³
    python benches/half.py --size 2048 --repeat 5
    python benches/half.py --json benches/results/half_local.json

Times are the medians of ``--repeat`` interleaved rounds of ``k(*arrays)``
(tilefuse) and the torch call, each round timing every variant once.
Ratios: f32's time over the half kernel's (above 1: the half kernel is
faster, 2 at most for a kernel that moves only bytes), and torch's time
over tilefuse's in the same dtype.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

import tilefuse as tf

sys.path.insert(0, str(Path(__file__).parent))
from report import stamp, table

TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def torch_form(case: str) -> Callable[..., Any]:
    """The case as a torch user writes it."""
    return {
        "softmax": lambda x: torch.softmax(x, dim=1),
        "layernorm": lambda x, w, b: torch.nn.functional.layer_norm(x, x.shape[1:], w, b),
        "chain": lambda a, b: torch.tanh(a * b + 1) * 0.5 + torch.exp(-a),
        "column_sum": lambda x: x.sum(dim=0),
        "matmul": lambda a, b, bias: torch.relu(a @ b + bias),
    }[case]


def workload(case: str, size: int, dtype: str) -> tf.Workload:
    if case == "matmul":
        n = size // 4
        return tf.workloads.get("matmul", m=n, n=n, k=n, epilogue="bias_relu", dtype=dtype)
    return tf.workloads.get(case, rows=size, cols=size, dtype=dtype)


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def one_case(case: str, size: int, repeat: int) -> dict[str, Any]:
    device = tf.Device.cpu()
    calls: dict[str, Callable[[], Any]] = {}
    for dtype in ("f32", "f16", "bf16"):
        w = workload(case, size, dtype)
        f = w.payload
        k = f.schedule(f.heuristics(device=device), device=device)
        arrays = w.inputs()
        assert tf.Engine(device).verify(w).passed, f"{case} {dtype}"
        calls[f"tilefuse {dtype}"] = lambda k=k, a=arrays: k(*a)
        tensors = [torch.from_numpy(np.asarray(a, np.float32)).to(TORCH[dtype]) for a in arrays]
        form = torch_form(case)
        calls[f"torch {dtype}"] = lambda t=tensors, g=form: g(*t)
    for call in calls.values():
        call()  # warm: first-touch pages, thread pools
    rounds: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeat):
        for name, call in calls.items():
            rounds[name].append(timed(call))
    best = {name: statistics.median(t) for name, t in rounds.items()}
    shape = f"{size // 4}³ + bias + relu" if case == "matmul" else f"{size}²"
    row: dict[str, Any] = {"case": f"{case} {shape}"}
    for dtype in ("f32", "f16", "bf16"):
        row[f"{dtype} ms"] = best[f"tilefuse {dtype}"] * 1e3
    for dtype in ("f16", "bf16"):
        row[f"f32 / {dtype}"] = best["tilefuse f32"] / best[f"tilefuse {dtype}"]
    for dtype in ("f32", "f16", "bf16"):
        row[f"torch / tilefuse {dtype}"] = best[f"torch {dtype}"] / best[f"tilefuse {dtype}"]
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=4096, help="rows = cols; matmul is size/4")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument(
        "--case",
        action="append",
        choices=("softmax", "layernorm", "chain", "column_sum", "matmul"),
    )
    parser.add_argument("--json", metavar="OUT")
    parser.add_argument("--label", default="this machine", help="the machine's name in the report")
    args = parser.parse_args()
    cases = args.case or ["softmax", "layernorm", "chain", "column_sum", "matmul"]
    rows = [one_case(c, args.size, args.repeat) for c in cases]
    print(table(list(rows[0]), [list(r.values()) for r in rows]))
    if args.json:
        info = tf.Device.cpu().info
        meta = {**stamp(), "device": info["name"], "torch": torch.__version__}
        meta["label"] = args.label
        meta["threads"] = torch.get_num_threads()
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
