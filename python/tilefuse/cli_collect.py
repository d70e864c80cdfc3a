"""The ``tilefuse collect`` and ``tilefuse learn`` commands: tune a
workload family at every shape of a grid into the heuristic cache (see
:mod:`tilefuse.collect`), and learn a heuristic from it, measured on
held-out shapes (see :mod:`tilefuse.learn`)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from . import workloads
from .cli_pipelines import command, device_argument, ray_arguments, ray_executor
from .collect import Collected, collect, grid
from .device import as_device
from .learn import LearnResult, learn

__all__ = ["add_commands"]

_out = Console()


def add_commands(sub: Any) -> None:
    """Registers ``collect`` and ``learn`` on the subparsers."""
    c = command(
        sub,
        "collect",
        "tune a workload at every shape of a grid, into the cache",
        "Tunes the built-in workload FAMILY at every combination of the --sizes axes "
        "(LO..HI: the powers of two between; or a list) and keeps each shape's winner in "
        "the heuristic cache (the default heuristic's params where nothing beat them). "
        "Resumable: shapes the cache has are skipped (--redo tunes them again).",
        "tilefuse collect softmax --sizes rows=128..16384 --sizes cols=64..8192 "
        "--device cpu --effort quick",
    )
    _family_arguments(c)
    c.add_argument("--effort", choices=("none", "quick", "full"), default="quick")
    c.add_argument("--trials", type=int, help="each shape's trial budget")
    c.add_argument("--seconds", type=float, help="each shape's time budget")
    c.add_argument("--seed", type=int)
    c.add_argument("--redo", action="store_true", help="tune shapes the cache has too")
    c.add_argument("--json", metavar="OUT", help="every shape's outcome, as JSON")
    c.add_argument("--quiet", action="store_true", help="no progress and no table")
    ray_arguments(c)
    c.set_defaults(run=_collect)
    learn_command(sub)


def learn_command(sub: Any) -> None:
    le = command(
        sub,
        "learn",
        "learn a heuristic from a family's tuned shapes, measured on held-out ones",
        "From the cache entries of FAMILY at every shape of the --sizes grid (tune them "
        "first with `tilefuse collect`), chooses up to --configs params configs by greedy "
        "set cover and fits a decision tree over shape features that picks one or keeps the "
        "default heuristic; saves it in the cache's learned/ folder, where heuristics() "
        "finds it. Every shape's winner and default are timed at every shape; the learned "
        "heuristic is judged by those times on shapes it did not learn from (--holdout, "
        "--held-out or --folds) against their tuned and default params. --record saves the "
        "times, --replay learns from saved ones without timing.",
        "tilefuse learn softmax --sizes rows=128..16384 --sizes cols=64..8192 --device cpu "
        "--folds 4",
    )
    _family_arguments(le)
    le.add_argument("--holdout", type=float, default=0.25, help="share of shapes held out")
    le.add_argument(
        "--held-out",
        action="append",
        metavar="K=V,K=V",
        help="a shape of the grid to hold out (repeat), instead of --holdout",
    )
    le.add_argument("--folds", type=int, help="k-fold: each shape held out once")
    le.add_argument("--record", metavar="JSON", help="save the times learning read")
    le.add_argument("--replay", metavar="JSON", help="learn from saved times, timing nothing")
    le.add_argument("--configs", type=int, default=8, help="configs at most (default 8)")
    le.add_argument("--tolerance", type=float, default=0.05, help="near the best (0.05: 5%%)")
    le.add_argument("--seed", type=int, default=0, help="which shapes are held out")
    le.add_argument("--name", help="the learned heuristic's name (default: FAMILY)")
    le.add_argument("--plot", metavar="PNG", help="held-out shapes: learned against tuned")
    le.add_argument("--quiet", action="store_true", help="no progress and no table")
    le.set_defaults(run=_learn)


def _family_arguments(parser: argparse.ArgumentParser) -> None:
    """FAMILY, its --sizes axes and --device, as collect and learn take them."""
    names = ", ".join(workloads.names())
    parser.add_argument("family", help=f"a built-in workload ({names})")
    parser.add_argument(
        "--sizes", action="append", default=[], metavar="K=SPEC", help="a size axis (repeat)"
    )
    device_argument(parser)


def _axes(specs: list[str]) -> dict[str, str]:
    axes: dict[str, str] = {}
    for spec in specs:
        name, eq, values = spec.partition("=")
        if not eq or not name:
            raise ValueError(f"--sizes: expected K=SPEC, got {spec!r}")
        axes[name] = values
    return axes


def _learn(args: argparse.Namespace) -> int:
    held_out = None
    if args.held_out:
        held_out = [grid(_axes(shape.split(",")))[0] for shape in args.held_out]
    r = learn(
        args.family,
        _axes(args.sizes) if args.sizes or not args.replay else None,
        as_device(args.device),
        name=args.name,
        configs=args.configs,
        tolerance=args.tolerance,
        holdout=args.holdout,
        folds=args.folds,
        held_out=held_out,
        seed=args.seed,
        record=args.record,
        replay=args.replay,
        progress=not args.quiet,
    )
    if args.plot:
        _plot(r, args.plot)
    if not args.quiet:
        _out.print(_quality_table(args.family, r))
    return 0


def _quality_table(family: str, r: LearnResult) -> Table:
    held = f"{r.folds}-fold" if r.folds else "held-out shapes"
    saved = r.path or "not saved"
    t = Table(title=f"{family}: learned ({r.configs} configs, {saved}), judged on {held}")
    for name in ("sizes", "default ms", "tuned ms", "learned ms", "tuned / learned", "leaf"):
        t.add_column(name, justify="left" if name == "sizes" else "right")
    for q in r.held_out:
        sizes = ", ".join(f"{k}={v}" for k, v in q.sizes.items())
        leaf = f"{q.leaf} (default)" if q.kept_default else str(q.leaf)
        ms = (f"{x * 1e3:.4g}" for x in (q.default, q.tuned, q.learned))
        t.add_row(sizes, *ms, f"{q.tuned / q.learned:.3f}", leaf)
    if r.held_out:
        gains = r.gains or (1.0, 1.0)
        t.add_row(
            "geometric mean",
            "",
            f"{gains[0]:.3f}x",
            f"{gains[1]:.3f}x",
            f"{r.tuned_over_learned:.3f}",
            f"worst {r.worst_over_default:.3f}x default",
        )
    return t


def _plot(r: LearnResult, path: str) -> None:
    """Each held-out shape's speedup over its default: tuned and learned."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [",".join(str(v) for v in q.sizes.values()) for q in r.held_out]
    x = range(len(labels))
    fig, ax = plt.subplots(figsize=(max(6, len(labels) * 0.6), 4))
    ax.bar([i - 0.2 for i in x], [q.default / q.tuned for q in r.held_out], 0.4, label="tuned")
    ax.bar([i + 0.2 for i in x], [q.default / q.learned for q in r.held_out], 0.4, label="learned")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xticks(list(x), labels, rotation=45, ha="right")
    ax.set_ylabel("speedup over the default heuristic")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _collect(args: argparse.Namespace) -> int:
    with ray_executor(args) as ex:
        found = collect(
            args.family,
            _axes(args.sizes),
            as_device(args.device),
            effort=args.effort,
            trials=args.trials,
            seconds=args.seconds,
            seed=args.seed,
            executor=ex or "local",
            redo=args.redo,
            progress=not args.quiet,
        )
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(c) for c in found], indent=2) + "\n")
    if not args.quiet:
        _out.print(_table(args.family, found))
    return 0


def _table(family: str, found: list[Collected]) -> Table:
    t = Table(title=f"{family}: collected into the heuristic cache")
    for name in ("sizes", "outcome", "speedup", "trials", "seconds"):
        t.add_column(name, justify="left" if name in ("sizes", "outcome") else "right")
    for c in found:
        sizes = ", ".join(f"{k}={v}" for k, v in c.sizes.items())
        speedup = "-" if c.speedup is None else f"{c.speedup:.2f}x"
        t.add_row(sizes, c.outcome, speedup, str(c.trials), f"{c.seconds:.1f}")
    return t
