"""The ``tilefuse collect`` command: tune a workload family at every shape
of a grid into the heuristic cache (see :mod:`tilefuse.collect`)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from . import workloads
from .cli_pipelines import command, device_argument
from .collect import Collected, collect
from .device import as_device

__all__ = ["add_commands"]

_out = Console()


def add_commands(sub: Any) -> None:
    """Registers ``collect`` on the subparsers."""
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
    c.add_argument("family", help=f"a built-in workload ({', '.join(workloads.names())})")
    c.add_argument(
        "--sizes", action="append", default=[], metavar="K=SPEC", help="a size axis (repeat)"
    )
    device_argument(c)
    c.add_argument("--effort", choices=("none", "quick", "full"), default="quick")
    c.add_argument("--trials", type=int, help="each shape's trial budget")
    c.add_argument("--seconds", type=float, help="each shape's time budget")
    c.add_argument("--seed", type=int)
    c.add_argument("--redo", action="store_true", help="tune shapes the cache has too")
    c.add_argument("--json", metavar="OUT", help="every shape's outcome, as JSON")
    c.add_argument("--quiet", action="store_true", help="no progress and no table")
    c.set_defaults(run=_collect)


def _collect(args: argparse.Namespace) -> int:
    axes: dict[str, str] = {}
    for spec in args.sizes:
        name, eq, values = spec.partition("=")
        if not eq or not name:
            raise ValueError(f"--sizes: expected K=SPEC, got {spec!r}")
        axes[name] = values
    found = collect(
        args.family,
        axes,
        as_device(args.device),
        effort=args.effort,
        trials=args.trials,
        seconds=args.seconds,
        seed=args.seed,
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
