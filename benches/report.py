"""Renders BENCHMARKS.md from the JSON the benchmarks write.

    python benches/report.py                  # benches/results/*.json -> BENCHMARKS.md
    python benches/report.py --check          # fails if BENCHMARKS.md is not what it renders

The inputs, each written by the command the report prints under its table:

- ``results/run_<machine>.json``: ``benches/run.py --json`` on one machine
  (its five cases, the chain's small-size sweep, host latency);
- ``results/tune_<machine>.json``: ``benches/tune.py --json``;
- ``results/replay.json``: ``tilefuse replay benches/spaces/*.json --json``;
- ``results/efforts.json``: the ``replay_efforts`` example's output.

Ratios are the peer's time over tilefuse's: above 1, tilefuse is faster.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
REPORT = HERE.parent / "BENCHMARKS.md"
RESULTS_ARG = "benches/results"

INTRO = """\
# Benchmarks

The current numbers, as users meet them: `k(*arrays)` on the CPU device and
on the GPU device (wgpu: lavapipe where there is no GPU, Vulkan on NVIDIA),
against numpy and torch in the same process. Every tilefuse result is
checked against the float64 reference before it is timed; times are
medians of time-based, interleaved repetitions. **Ratios are the peer's time
over tilefuse's: above 1, tilefuse is faster.** Under each table is the
command that measures it; `python benches/report.py` renders this page from
the JSON those commands write into `benches/results/`. What the experiments
behind the defaults taught is in `docs/`, beside the designs they shaped.
"""


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A markdown table: text left, numbers right."""
    rows = [[cell(v) for v in row] for row in rows]
    align = ["---" if i == 0 else "---:" for i in range(len(header))]
    lines = [header, align, *rows]
    return "\n".join("| " + " | ".join(line) + " |" for line in lines) + "\n"


def stamp() -> dict[str, str]:
    """What every result file's meta starts with: the date, and the
    command that made it (which its table prints)."""
    return {"date": time.strftime("%Y-%m-%d"), "command": "python " + shlex.join(sys.argv)}


def command(text: str) -> str:
    """The command that measures the table above it."""
    return f"\n`{text}`\n"


def cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"
    return str(v)


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def ratio(peer: float | None, ours: float | None) -> float | None:
    return None if peer is None or ours is None else peer / ours


def load(pattern: str) -> list[tuple[str, Any]]:
    """Each result file's machine label (its meta's ``label``, else the
    file name's end) and contents, the newest first."""
    found = [(p, json.loads(p.read_text())) for p in RESULTS.glob(pattern)]
    found.sort(key=lambda f: (f[1]["meta"].get("date", ""), f[0].name), reverse=True)
    return [(d["meta"].get("label") or p.stem.split("_", 1)[-1], d) for p, d in found]


def machines(runs: list[tuple[str, Any]]) -> str:
    """Where each run's numbers come from: the machine, the build, the
    peers' versions."""
    rows = []
    for name, run in runs:
        m = run["meta"]
        peers = ", ".join(f"{k} {m[k]}" for k in ("numpy", "torch") if m.get(k))
        simd = ", ".join(m.get("simd") or []) or None
        cpu = (m.get("cpu"), m.get("cpu_threads"), simd)
        gpu = (m.get("gpu"), m.get("gpu_driver"))
        rows.append([name, m["date"], m.get("tilefuse"), *cpu, *gpu, peers])
    header = ["machine", "date", "tilefuse", "CPU", "threads", "SIMD", "GPU", "driver", "peers"]
    return "## Machines\n\n" + table(header, rows)


def cases(name: str, run: Any) -> str:
    """The five cases: each device's call against numpy and torch on the
    CPU, and the GPU kernel against torch's CUDA kernel where measured."""
    rows, cuda = [], any("torch-cuda kernel" in r for r in run["cases"].values())
    for case, r in run["cases"].items():
        cpu, gpu = r.get("tilefuse-cpu call"), r.get("tilefuse-gpu call")
        row = [case, ms(r.get("numpy")), ms(r.get("torch")), ms(cpu), ratio(r.get("numpy"), cpu)]
        row += [ratio(r.get("torch"), cpu), ms(gpu), ms(r.get("tilefuse-gpu kernel"))]
        if cuda:
            row += [
                ms(r.get("torch-cuda kernel")),
                ratio(r.get("torch-cuda kernel"), r.get("tilefuse-gpu kernel")),
            ]
        rows.append(row)
    header = [
        "case",
        "numpy ms",
        "torch ms",
        "CPU call ms",
        "x numpy",
        "x torch",
        "GPU call ms",
        "GPU kernel ms",
    ]
    if cuda:
        header += ["torch-cuda kernel ms", "GPU kernel x torch-cuda"]
    return table(header, rows)


def sweep(run: Any) -> str:
    """The chain from 2^10 elements up: each device's call and kernel in
    microseconds, and the CPU call against numpy and torch."""
    if not run.get("sweep"):
        return ""
    columns = [c for c in next(iter(run["sweep"].values())) if c not in ("numpy", "torch")]
    rows = []
    for n, r in run["sweep"].items():
        us = [r[c] * 1e6 for c in columns]
        rows.append(
            [
                f"2^{int(n).bit_length() - 1}",
                r["numpy"] * 1e6,
                *us,
                ratio(r["numpy"], r.get("cpu call")),
                ratio(r.get("torch"), r.get("cpu call")),
            ]
        )
    return table(
        ["elements", "numpy µs", *(f"{c} µs" for c in columns), "CPU x numpy", "CPU x torch"], rows
    )


def latency(run: Any) -> str:
    if not run.get("latency"):
        return ""
    rows = []
    for device, by_fusion in run["latency"].items():
        for fusion, t in by_fusion.items():
            rows.append(
                [
                    fusion,
                    device,
                    ms(t.get("heuristics")),
                    ms(t.get("cache hit")),
                    ms(t.get("schedule + build")),
                ]
            )
    return table(["fusion", "device", "heuristics ms", "cache hit ms", "schedule + build ms"], rows)


def run_section(name: str, run: Any) -> str:
    m = run["meta"]
    command = m.get("command", "python benches/run.py --json benches/results/run_NAME.json")
    parts = [f"## {name}: the five cases\n", cases(name, run), f"`{command}`\n"]
    if s := sweep(run):
        parts += [f"### {name}: the chain at small sizes\n", s]
        if m.get("plot"):
            parts.append(f"![the chain from 2^10 elements up]({m['plot']})\n")
    if lat := latency(run):
        parts += [f"### {name}: host latency per call\n", lat]
    return "\n".join(parts)


def tune_section(name: str, tune: Any) -> str:
    efforts = [e for e in ("quick", "full") if any(f"{e} ms" in r for r in tune["rows"])]
    header = ["case", "device", "default ms"]
    for e in efforts:
        header += [f"{e} ms", f"{e} speedup", f"{e} s", f"{e} trials"]
    rows = []
    for r in tune["rows"]:
        row = [r["case"], r["device"], r["default ms"]]
        for e in efforts:
            row += [
                r.get(f"{e} ms"),
                r.get(f"{e} speedup"),
                r.get(f"{e} seconds"),
                r.get(f"{e} trials"),
            ]
        rows.append(row)
    command = tune["meta"].get(
        "command", "python benches/tune.py --json benches/results/tune_NAME.json"
    )
    return f"## {name}: tuned against the default\n\n" + table(header, rows) + f"\n`{command}`\n"


def cost_section(name: str, cost: Any) -> str:
    """Quick tunes of kernels of a millisecond or more: what a trial costs
    in launches, and what the tune finds, per build."""
    columns = ["case", "build", "default ms", "trials", "seconds", "launches per trial", "speedup"]
    rows = [[r.get(c) for c in columns] for r in cost["rows"]]
    m = cost["meta"]
    title = f"## {name}: what a quick tune spends ({m['device']}, medians of {m['seeds']} seeds)"
    builds = "".join(f"- {b}: {what}\n" for b, what in m.get("builds", {}).items())
    return f"{title}\n\n{builds}\n" + table(columns, rows) + command(m["command"])


def rows_section(title: str, result: Any) -> str:
    """A result file's rows as one table under ``title``, and its command."""
    columns = list(result["rows"][0])
    rows = [[r[c] for c in columns] for r in result["rows"]]
    return f"{title}\n\n" + table(columns, rows) + command(result["meta"]["command"])


def learned_section(name: str, learned: Any) -> str:
    """Learned heuristics on shapes they did not learn from, per family."""
    m = learned["meta"]
    grid = ", ".join(f"{k} {v}" for k, v in m["grid"].items())
    folds = learned["rows"][0].get("folds")
    judged = f"each shape held out once, {folds}-fold" if folds else "on held-out shapes"
    title = f"## {name}: learned heuristics, {judged} ({m['device']}, {grid})"
    return rows_section(title, learned)


def half_section(name: str, half: Any) -> str:
    """f16 and bf16 against f32 and against torch in the same dtype."""
    m = half["meta"]
    title = f"## {name}: half precision ({m['device']}, torch {m['torch']}, {m['threads']} threads)"
    return rows_section(title, half)


def replay_section(replay: list[Any], efforts: list[Any]) -> str:
    """Search strategies over the recorded spaces, and quick effort's share
    of full's gain; both replayed, so the same on every machine."""
    trials: dict[str, list[float]] = defaultdict(list)
    for r in replay:
        trials[r["strategy"]].append(r["mean"])
    seeds = len(replay[0]["trials"]) if replay else 0
    rows = [[s, len(t), sum(t), statistics.median(t)] for s, t in trials.items()]
    out = "## Tuning quality: replayed over `benches/spaces/`\n\n"
    out += f"Mean trials to within 5 % of each space's best, {seeds} seeds a space:\n\n"
    out += table(["strategy", "spaces", "trials, summed", "median a space"], rows)
    out += command(
        f"tilefuse replay benches/spaces/*.json --seeds {seeds} --json {RESULTS_ARG}/replay.json"
    )
    if efforts:
        gains = {e: sum(r[f"{e}_speedup"] - 1 for r in efforts) for e in ("quick", "full")}
        worst = min(efforts, key=lambda r: (r["quick_speedup"] - 1) - (r["full_speedup"] - 1))
        rows = [
            [
                len(efforts),
                gains["quick"] / len(efforts),
                gains["full"] / len(efforts),
                gains["quick"] / gains["full"] if gains["full"] > 0 else 1.0,
                f"{worst['space']} ({worst['quick_speedup']:.2f} / {worst['full_speedup']:.2f})",
            ]
        ]
        out += "\nThe surrogate at quick and full effort's trial budgets"
        out += " (speedups over the default point):\n\n"
        out += table(
            [
                "spaces",
                "quick mean gain",
                "full mean gain",
                "quick / full gain",
                "widest gap (quick / full)",
            ],
            rows,
        )
        out += command(
            "cargo run --release -p tilefuse-tune --example replay_efforts "
            f"{efforts[0]['seeds']} benches/spaces/*.json > {RESULTS_ARG}/efforts.json"
        )
    return out


def render() -> str:
    runs = load("run_*.json")
    parts = [INTRO, machines(runs)]
    parts += [run_section(name, run) for name, run in runs]
    parts += [tune_section(name, tune) for name, tune in load("tune_[!c]*.json")]
    parts += [cost_section(name, cost) for name, cost in load("tune_cost_*.json")]
    parts += [learned_section(name, learned) for name, learned in load("learned_*.json")]
    parts += [half_section(name, half) for name, half in load("half_*.json")]
    replay = RESULTS / "replay.json"
    efforts = RESULTS / "efforts.json"
    if replay.exists():
        parts.append(
            replay_section(
                json.loads(replay.read_text()),
                json.loads(efforts.read_text()) if efforts.exists() else [],
            )
        )
    return "\n".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if BENCHMARKS.md is stale")
    args = parser.parse_args()
    text = render()
    if args.check:
        if REPORT.read_text() != text:
            print("BENCHMARKS.md is not what benches/report.py renders", file=sys.stderr)
            return 1
        return 0
    REPORT.write_text(text)
    print(f"{REPORT}: {len(text.splitlines())} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
