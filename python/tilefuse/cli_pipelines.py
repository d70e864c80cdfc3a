"""The pipeline commands of ``tilefuse``: ``run``, ``inspect`` and
``pipeline list|validate|show`` (:mod:`tilefuse.cli` registers them)."""

from __future__ import annotations

import argparse
import json
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from . import pipeline as pipelines
from . import workloads
from .device import DEVICE_NAMES, as_device
from .engine import Engine
from .stages import run, workload_of
from .workload import Workload, as_workload

__all__ = [
    "add_commands",
    "command",
    "device_argument",
    "dtype_argument",
    "pairs",
    "ray_arguments",
    "ray_executor",
    "workload_arguments",
    "workload_of_arguments",
]

_out = Console(soft_wrap=True)


def add_commands(sub: Any) -> None:
    """Registers ``run``, ``inspect`` and ``pipeline`` on the subparsers."""
    r = command(
        sub,
        "run",
        "run a pipeline on a workload",
        "Runs each stage of a pipeline (a YAML file or a named pipeline) on a workload: "
        "the one given here, else the one the file names. Without a pipeline the finder "
        "picks one by device and workload.",
        "tilefuse run export --workload softmax --size rows=1024 --set directory=out",
    )
    r.add_argument("pipeline", nargs="?", help="a pipeline file or name (default: found)")
    workload_arguments(r, required=False)
    _variable_argument(r)
    device_argument(r)
    r.add_argument("--json", metavar="OUT", help="what every stage made, as JSON")
    r.add_argument("--quiet", action="store_true", help="print nothing but errors")
    r.set_defaults(run=_run)

    i = command(
        sub,
        "inspect",
        "what a workload is: segments, schedulers, shapes, matmuls, reductions, flops",
        "Prints the engine's inspection of a built-in workload or a fusion JSON file.",
        "tilefuse inspect matmul --size m=512 --size epilogue=bias_relu",
    )
    workload_arguments(i, required=True)
    device_argument(i)
    i.add_argument("--json", action="store_true", help="print the inspection as JSON")
    i.set_defaults(run=_inspect)

    p = command(
        sub,
        "pipeline",
        "list, check and show pipelines",
        "The named pipelines, a descriptor's validation (file, line and key of each "
        "error), and a descriptor with its includes and variables resolved.",
        "tilefuse pipeline validate my.yaml",
    )
    actions = p.add_subparsers(dest="action", required=True)
    command(
        actions,
        "list",
        "the named pipelines and where they are",
        "Lists shipped pipelines and those in TILEFUSE_PIPELINES or the user's config "
        "directory (which override shipped ones of the same name).",
        "tilefuse pipeline list",
    )
    for action, summary, example in (
        ("validate", "check pipeline files", "tilefuse pipeline validate my.yaml"),
        ("show", "a pipeline as it runs", "tilefuse pipeline show export --set directory=out"),
    ):
        a = command(
            actions,
            action,
            summary,
            "Loads a pipeline (includes spliced in, variables substituted) and checks its "
            "schema, stages, variables, files and Python callables; errors name the file, "
            "line and key.",
            example,
        )
        a.add_argument("pipelines", nargs="+", metavar="pipeline", help="a file or a name")
        _variable_argument(a)
    p.set_defaults(run=_pipeline)


def command(sub: Any, name: str, summary: str, what: str, example: str) -> Any:
    """A subcommand whose ``--help`` says what it does, with an example."""
    return sub.add_parser(
        name,
        help=summary,
        description=what,
        epilog=f"example:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def device_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", choices=tuple(DEVICE_NAMES), default="default")


def workload_arguments(
    parser: argparse.ArgumentParser, required: bool, nargs: str | None = None
) -> None:
    names = ", ".join(workloads.names())
    parser.add_argument(
        "--workload" if not required else "workload",
        metavar="WORKLOAD",
        nargs=nargs,
        help=f"a built-in workload ({names}) or a fusion JSON file",
    )
    parser.add_argument(
        "--size", action="append", default=[], metavar="K=V", help="a workload size (repeat)"
    )
    dtype_argument(parser)


def ray_arguments(parser: argparse.ArgumentParser) -> None:
    """``--executor ray`` and its cluster's options."""
    r = parser.add_argument_group("tuning on a Ray cluster (pip install 'tilefuse[ray]')")
    r.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="ray: measure on the cluster's workers, one result per device fingerprint",
    )
    r.add_argument("--address", help="the cluster's HOST:PORT (default: start a local one)")
    r.add_argument(
        "--workers", type=int, help="CPU workers (default: one per GPU, else one per node)"
    )
    r.add_argument("--threads", type=int, default=1, help="threads of each CPU worker")


def ray_executor(args: argparse.Namespace) -> AbstractContextManager[Any]:
    """The Ray executor that ``--executor ray`` asks for, else ``None``."""
    if args.executor != "ray":
        return nullcontext()
    from .distributed import RayExecutor

    return RayExecutor(args.workers, address=args.address, threads=args.threads)


def dtype_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dtype",
        choices=workloads.FLOAT_DTYPES,
        help="the built-in workloads' float dtype (default: their own, f32)",
    )


def _variable_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="VAR=VALUE",
        help="a pipeline variable (repeat); read as the variable's type",
    )


def pairs(given: list[str], what: str = "--set") -> dict[str, str]:
    """``NAME=VALUE`` arguments as a mapping."""
    pairs = {}
    for item in given:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"tilefuse: {what} takes NAME=VALUE, got {item!r}")
        pairs[key] = value
    return pairs


def workload_of_arguments(args: argparse.Namespace) -> Workload:
    """The workload a command's WORKLOAD, ``--size`` and ``--dtype``
    arguments name."""
    spec, sizes = args.workload, args.size
    if spec.endswith(".json") or Path(spec).is_file():
        if sizes or args.dtype:
            raise SystemExit(
                "tilefuse: --size and --dtype apply to built-in workloads, not fusion files"
            )
        return as_workload(spec)
    typed = {k: yaml.safe_load(v) for k, v in pairs(sizes, "--size").items()}
    if args.dtype:
        if typed.setdefault("dtype", args.dtype) != args.dtype:
            raise SystemExit(f"tilefuse: --dtype {args.dtype} but --size dtype={typed['dtype']}")
    try:
        return workloads.get(spec, **typed)
    except TypeError as e:  # a size of the wrong kind, as typed on the command line
        raise ValueError(f"--size: {e}") from e


def _run(args: argparse.Namespace) -> int:
    device = as_device(args.device)
    given = workload_of_arguments(args) if args.workload else None
    name = args.pipeline
    if given is None and name in workloads.names() and name not in pipelines.names():
        raise SystemExit(f"tilefuse run: {name!r} is a workload: tilefuse run --workload {name}")
    if name is None:
        if given is None:
            raise SystemExit("tilefuse run: name a pipeline, or a --workload to find one for")
        kinds = [given.name, *(s.scheduler for s in given.payload.segments())]
        name = pipelines.find("gpu" if device.is_gpu else "cpu", kinds)
    p = pipelines.load_pipeline(name, pairs(args.set, "--set"))
    w = given or workload_of(p)
    if w is None:
        raise SystemExit(f"tilefuse run: {p.path} names no workload; give --workload")
    console = Console(quiet=args.quiet)
    console.print(f"[bold]{p.name}[/bold] ({p.path}) on {w.key}, {device.info['name']}")
    with console.status("") as status:
        state = run(
            p,
            w,
            Engine(device),
            progress=lambda s: status.update(f"{s.kind} ({s.path.name}:{s.line})"),
        )
    for line in state.log:
        console.print(f"  {line}")
    if state.bench is not None:
        from .bench import table

        console.print(table([state.bench], [w.label], f"{p.name}: {w.key}"))
    if args.json:
        Path(args.json).write_text(json.dumps(state.to_dict(), indent=2) + "\n")
    return 0


def _inspect(args: argparse.Namespace) -> int:
    w = workload_of_arguments(args)
    found = Engine(as_device(args.device)).inspect(w)
    if args.json:
        _out.print_json(json.dumps(found))
        return 0
    for i, segment in enumerate(found):
        t = Table(title=f"{w.key}: segment {i} of {len(found)}", show_header=False)
        t.add_column(style="bold")
        t.add_column(overflow="fold")
        for key, value in segment.items():
            t.add_row(key, json.dumps(value))
        _out.print(t)
    return 0


def _pipeline(args: argparse.Namespace) -> int:
    if args.action == "list":
        t = Table(title="pipelines")
        for column in ("name", "description", "match", "file"):
            t.add_column(column, overflow="fold")
        for name in pipelines.names():
            path = pipelines.locate(name)
            doc = yaml.safe_load(path.read_text())
            match = json.dumps(doc.get("match")) if "match" in doc else "-"
            t.add_row(name, doc.get("description", ""), match, str(path))
        _out.print(t)
        return 0
    variables = pairs(args.set, "--set")
    for name in args.pipelines:
        p = pipelines.load_pipeline(name, variables)
        if args.action == "validate":
            kinds = ", ".join(s.kind for s in p.stages)
            _out.print(f"{p.path}: ok ({len(p.stages)} stages: {kinds})")
        else:
            _out.print(f"# {p.path}, variables {json.dumps(p.variables)}")
            _out.print(p.to_yaml(), markup=False, highlight=False)
    return 0
