"""What a quick tune spends per trial, and what it finds, with two builds
of the native module side by side.

    python benches/tune_cost.py                       # the installed build, CPU
    python benches/tune_cost.py --before OLD.so --seeds 3 --json out.json
    python benches/tune_cost.py --device gpu --case "column sum"

Each case is a built-in workload whose kernel takes a millisecond or more
on the CPU device. It is tuned at ``quick`` effort (``tilefuse.tune``, the
cache untouched, seeds 0, 1, ...), by the installed build and, with
``--before``, by another build of ``_native`` loaded beside it (as
``ab_builds.py`` does), the two alternating. The table gives per build the
tune's trials and seconds, the kernel launches a measured trial made
(``Trial.launches``: its check, probe and timings, and those of the
default's kernel it was paired with; a build that does not count them
shows ``-``) and the winner's speedup over the default in the tune's own
final interleaved rounds; the medians over the seeds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from ab_builds import load_builds
from report import stamp, table

import tilefuse

#: (label, workload, sizes): kernels of 1 ms or more on a 2-thread CPU.
CASES: list[tuple[str, str, dict[str, Any]]] = [
    (
        "matmul 2048x1024x1024 + gelu",
        "matmul",
        {"m": 2048, "n": 1024, "k": 1024, "epilogue": "gelu"},
    ),
    (
        "matmul 1024^3 + bias + relu",
        "matmul",
        {"m": 1024, "n": 1024, "k": 1024, "epilogue": "bias_relu"},
    ),
    ("softmax 4096x4096", "softmax", {"rows": 4096, "cols": 4096}),
    ("layernorm 4096x4096", "layernorm", {"rows": 4096, "cols": 4096}),
    ("column sum 4096x4096", "column_sum", {"rows": 4096, "cols": 4096}),
    ("softmax 1024x1024", "softmax", {"rows": 1024, "cols": 1024}),
]


def tune_once(
    tf: ModuleType, case: tuple[str, str, dict[str, Any]], device: str, seed: int
) -> dict[str, Any]:
    """One quick tune of `case` by the build `tf`: what it spent and found."""
    _, name, sizes = case
    w = tf.workloads.get(name, **sizes)
    start = time.perf_counter()
    r = tf.tune(w, device, effort="quick", seed=seed, cache=False, progress=False)
    wall = time.perf_counter() - start
    ran = [t for t in r.trials if getattr(t, "launches", 0) > 0]
    return {
        "trials": len(r.trials),
        "seconds": wall,
        "launches per trial": statistics.mean(t.launches for t in ran) if ran else None,
        "speedup": r.speedup,
        "default ms": r.default_time * 1e3 if r.default_time else None,
    }


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of each number over the seeds' runs."""
    out: dict[str, Any] = {}
    for key in runs[0]:
        values = [r[key] for r in runs if r[key] is not None]
        out[key] = statistics.median(values) if values else None
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, help="another build of _native to compare with")
    parser.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    parser.add_argument("--seeds", type=int, default=1, help="quick tunes per case and build")
    parser.add_argument("--case", action="append", help="only cases whose label contains this")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--label", default="this machine", help="the machine's name in the report")
    args = parser.parse_args()
    builds: dict[str, ModuleType] = {"after": tilefuse}
    if args.before:
        into = Path(tempfile.mkdtemp(prefix="tilefuse-builds-"))
        builds["before"], builds["after"] = load_builds(
            args.before, Path(tilefuse._native.__file__), into
        )
    chosen = [c for c in CASES if not args.case or any(n in c[0] for n in args.case)]
    rows = []
    for case in chosen:
        runs: dict[str, list[dict[str, Any]]] = {b: [] for b in builds}
        for seed in range(args.seeds):
            for label, tf in sorted(builds.items(), reverse=seed % 2 == 1):
                print(f"[{case[0]}] {label}, seed {seed}", file=sys.stderr, flush=True)
                runs[label].append(tune_once(tf, case, args.device, seed))
        for label in builds:
            rows.append({"case": case[0], "build": label, **summary(runs[label])})
    columns = ["case", "build", "default ms", "trials", "seconds", "launches per trial", "speedup"]
    print(table(columns, [[row[c] for c in columns] for row in rows]))
    if args.json:
        meta = {
            **stamp(),
            "device": args.device,
            "seeds": args.seeds,
            "label": args.label,
            "builds": {"after": "the installed build", "before": str(args.before)},
        }
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
