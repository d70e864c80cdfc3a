"""Learned heuristics: from the tuned shapes of one workload family on one
device (:func:`~tilefuse.collect`), a small set of configs that covers
them within a tolerance of their best (greedy set cover, as Helion's
ahead-of-time heuristics choose theirs), then a decision tree over shape
features that picks one, or keeps the default heuristic. The result is a
JSON document in the cache directory's ``learned/`` folder, which
:meth:`Fusion.heuristics` consults after the exact cache entry and before
the default heuristic, evaluated in Rust.

Every shape's tuned winner and default are timed at every shape, side by
side (:class:`~tilefuse.family_times.FamilyTimes`, which a recording
replays). The learned heuristic's quality is read off those times on
shapes it did not learn from (a share of them, a list, or k-fold): what it
picks for each, against that shape's tuned winner and default.

Fitting the tree needs scikit-learn (``pip install tilefuse[learn]``).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from rich.console import Console

from . import _native
from . import cache as _cache
from .collect import SizeSpec, grid
from .device import Device, as_device
from .engine import Engine
from .family_times import DEFAULT, FamilyTimes
from .heuristic import AutotunerHeuristic
from .params import HeuristicParams
from .timing import Budget
from .workload import Size, Workload, get

if TYPE_CHECKING:
    from .device import DeviceFacts, DeviceName
    from .fusion import Fusion

__all__ = ["LearnResult", "LearnedSeeds", "ShapeQuality", "learn"]


@dataclass(frozen=True)
class ShapeQuality:
    """A held-out shape's kernels, timed side by side (medians, seconds)."""

    sizes: dict[str, Size]
    default: float
    tuned: float
    learned: float
    #: The tree's leaf that chose, and whether it kept the default.
    leaf: int
    kept_default: bool


@dataclass(frozen=True)
class LearnResult:
    """What :func:`learn` made and measured."""

    #: The learned heuristic's file (``None``: learned from times of
    #: another device, not saved).
    path: str | None
    #: Params configs the tree picks among (the default heuristic besides).
    configs: int
    training: list[dict[str, Size]]
    #: Each shape evaluated by a heuristic that did not learn from it.
    held_out: list[ShapeQuality]
    #: k of k-fold (each shape held out once); 0 for a single split.
    folds: int = 0

    @property
    def tuned_over_learned(self) -> float | None:
        """Geometric mean over the held-out shapes of tuned time / learned
        time (1: as fast as tuning each shape)."""
        return _geomean([q.tuned / q.learned for q in self.held_out])

    @property
    def worst_over_default(self) -> float | None:
        """The held-out shape whose learned time is slowest against its
        default heuristic's: learned / default (above 1: slower)."""
        return max((q.learned / q.default for q in self.held_out), default=None)

    @property
    def gains(self) -> tuple[float, float] | None:
        """Geometric-mean speedups over the default on the held-out shapes:
        (tuned's, learned's)."""
        tuned = _geomean([q.default / q.tuned for q in self.held_out])
        learned = _geomean([q.default / q.learned for q in self.held_out])
        return None if tuned is None or learned is None else (tuned, learned)


def learn(
    family: str,
    sizes: Mapping[str, SizeSpec] | None,
    device: Device | DeviceName | None = None,
    *,
    name: str | None = None,
    configs: int = 8,
    tolerance: float = 0.05,
    holdout: float = 0.25,
    folds: int | None = None,
    held_out: Sequence[Mapping[str, Size]] | None = None,
    seed: int = 0,
    budget: Budget | None = None,
    record: str | os.PathLike[str] | None = None,
    replay: str | os.PathLike[str] | None = None,
    progress: bool = True,
) -> LearnResult:
    """Learns a heuristic for the workload ``family`` on ``device`` from
    the cache entries of the shapes of :func:`~tilefuse.collect.grid`
    ``(sizes)``, every one of which must have been tuned: each shape's
    winner and default are timed at every shape (``record``: saved as
    :class:`~tilefuse.family_times.FamilyTimes`; ``replay``: read from
    such a file instead, ``sizes`` then ``None`` or its grid). At most
    ``configs`` configs; a shape counts as covered by a config within
    ``tolerance`` of its best.

    Its quality is measured on shapes it did not learn from: ``held_out``
    (a list of shapes of the grid), else ``folds`` (k-fold: each shape
    held out once, by a heuristic learned from the other folds), else a
    share ``holdout`` of the shapes chosen by ``seed``. The document
    learned from every shape but the held-out ones (all of them with
    ``folds``) is saved as ``learned/NAME.json`` (``name``: ``family``)
    in the cache directory, unless the times were recorded on another
    device (``path`` is then ``None``)."""
    if not (0 <= holdout < 1 and 0 <= tolerance and configs >= 1):
        raise ValueError("learn: holdout in [0, 1), tolerance >= 0 and configs >= 1")
    dev = as_device(device)
    out = Console(stderr=True, quiet=not progress)
    times = _family_times(family, sizes, dev, budget, replay, out)
    if record is not None:
        times.save(record)
    works = [get(family, **s) for s in times.shapes]
    features = [_native.learned_features(w.payload._native)[1] for w in works]
    fit = _Fit(times, features, configs, tolerance, seed)
    splits = _splits(times.shapes, held_out, folds, holdout, seed)
    quality: list[ShapeQuality] = []
    with tempfile.TemporaryDirectory() as scratch:
        for i, held in enumerate(splits):
            train = [j for j in range(len(works)) if j not in held]
            nodes, chosen = fit.on(train)
            folder = f"{scratch}/{i}"
            _save(works, dev, family, nodes, chosen, times, {}, folder)
            quality += [_quality(times, j, works[j], dev, folder) for j in held]
    held = [] if folds else splits[0]
    train = [j for j in range(len(works)) if j not in held]
    nodes, chosen = fit.on(train)
    training = [times.shapes[j] for j in train]
    meta = {
        "family": family,
        "training": training,
        "held_out": [times.shapes[j] for j in held],
        "folds": folds or 0,
        "tolerance": tolerance,
    }
    path = None
    if times.fingerprint == dev.fingerprint:
        path = _save(works, dev, name or family, nodes, chosen, times, meta, None)
    else:
        out.print(f"learn: times recorded on {times.device}, not this device: not saved")
    return LearnResult(path, len(chosen), training, quality, folds or 0)


def _family_times(
    family: str,
    sizes: Mapping[str, SizeSpec] | None,
    device: Device,
    budget: Budget | None,
    replay: str | os.PathLike[str] | None,
    out: Console,
) -> FamilyTimes:
    """The family's times: replayed from a recording, or measured."""
    if replay is not None:
        times = FamilyTimes.load(replay)
        if times.family != family:
            raise ValueError(f"learn: {replay} records {times.family!r}, not {family!r}")
        if sizes is not None and grid(sizes) != times.shapes:
            raise ValueError(f"learn: {replay} records other shapes than --sizes gives")
        return times
    if sizes is None:
        raise ValueError("learn: give the family's sizes, or a recording to replay")
    shapes = grid(sizes)
    works = [get(family, **s) for s in shapes]
    winners = _winners(works, device)
    candidates = sorted({json.dumps(p, sort_keys=True) for p in winners if p is not None})
    variants = {f"config {i}": json.loads(c) for i, c in enumerate(candidates)}
    rows = []
    for i, w in enumerate(works):
        rows.append(_timed(w, device, {DEFAULT: None, **variants}, budget))
        out.print(f"[{i + 1}/{len(works)}] timed {len(rows[-1])} configs on {w.label}")
    labels = {json.dumps(p, sort_keys=True): label for label, p in variants.items()}
    return FamilyTimes(
        family=family,
        device=device.info["name"],
        fingerprint=device.fingerprint,
        shapes=shapes,
        defaults=[_default(w, device) for w in works],
        configs=variants,
        winners=[None if p is None else labels[json.dumps(p, sort_keys=True)] for p in winners],
        times=rows,
    )


def _splits(
    shapes: list[dict[str, Size]],
    held_out: Sequence[Mapping[str, Size]] | None,
    folds: int | None,
    holdout: float,
    seed: int,
) -> list[list[int]]:
    """The held-out shapes of each evaluation, by index: one list for a
    given list or a share, one per fold for k-fold."""
    if held_out is not None:
        missing = [dict(s) for s in held_out if dict(s) not in shapes]
        if missing:
            raise ValueError(f"learn: held-out shape {missing[0]} is not one of the grid's")
        return [[i for i, s in enumerate(shapes) if s in [dict(h) for h in held_out]]]
    order = np.random.default_rng(seed).permutation(len(shapes)).tolist()
    if folds is not None:
        if not 2 <= folds <= len(shapes):
            raise ValueError(f"learn: folds must be 2 to the {len(shapes)} shapes, got {folds}")
        return [sorted(order[f::folds]) for f in range(folds)]
    return [sorted(order[: round(holdout * len(shapes))]) if len(shapes) > 1 else []]


@dataclass(frozen=True)
class _Fit:
    """Learning on a subset of a family's shapes: set cover, then a tree."""

    times: FamilyTimes
    features: list[list[float]]
    limit: int
    tolerance: float
    seed: int

    def on(self, train: list[int]) -> tuple[list[dict[str, Any]], list[str]]:
        """The tree's nodes and the labels of the configs its leaves pick."""
        rows = [self.times.times[i] for i in train]
        chosen = _cover(rows, list(self.times.configs), self.tolerance, self.limit)
        labels = [_label(row, chosen, self.tolerance) for row in rows]
        nodes, leaves = _tree([self.features[i] for i in train], labels, self.seed)
        _guard(nodes, leaves, rows, chosen, self.tolerance)
        return nodes, chosen


def _save(
    works: list[Workload],
    device: Device,
    name: str,
    nodes: list[dict[str, Any]],
    chosen: list[str],
    times: FamilyTimes,
    meta: dict[str, Any],
    directory: str | None,
) -> str:
    """Writes the learned document (into the cache's ``learned/`` folder,
    or ``directory``'s); its path."""
    picked = [times.configs[c] for c in chosen]
    fusion, dev = works[0].payload._native, device._native
    return _native.learned_save(fusion, dev, name, nodes, picked, meta, directory)


def _default(w: Workload, device: Device) -> dict[str, Any]:
    params = w.payload.heuristics(device=device, cache=False)
    return params.to_dict()  # type: ignore[union-attr]


def _winners(works: list[Workload], device: Device) -> list[dict[str, Any] | None]:
    """Each shape's tuned params (``None`` where the default won); an
    error naming how many shapes lack an entry."""
    out, missing = [], []
    for w in works:
        if w.payload._segmented():
            raise ValueError(f"learn: {w.label} runs as several kernels; learn one kernel's family")
        entry = _cache.lookup(w.payload, device)
        if entry is None or entry["layer"] != "cache":
            missing.append(w.label)
            continue
        same = entry["params"] == _default(w, device)
        out.append(None if same else entry["params"])
    if missing or len(out) < 4:
        raise ValueError(
            f"learn: {len(out)} of {len(works)} shapes have a cache entry on "
            f"{device.info['name']} ({device.fingerprint}); learning needs every shape "
            f"tuned, at least 4 (run tilefuse collect first); missing: {', '.join(missing[:5])}"
        )
    return out


def _timed(
    w: Workload, device: Device, variants: dict[str, Any], budget: Budget | None
) -> dict[str, float]:
    """Each variant's median time on ``w``, interleaved; a variant the
    scheduler refuses at this shape, or whose outputs are wrong, is left
    out (the default is always there)."""
    engine = Engine(device)
    kernels = {}
    for label, params in variants.items():
        try:
            k = w.payload.schedule(params, device)
        except (_native.TilefuseError, ValueError):
            continue
        if engine.verify(w, k).passed:
            kernels[label] = k
    timed = engine.compare(
        w, kernels, check=False, budget=budget or Budget(warmup=0.05, rep=0.2), rounds=3
    )
    return {label: r.median for label, r in timed.items()}


def _cover(
    times: list[dict[str, float]], labels: list[str], tolerance: float, limit: int
) -> list[str]:
    """Greedy set cover: configs, most shapes first, until every shape has
    one within ``tolerance`` of its best (or the default does) or ``limit``
    configs are chosen."""

    def good(row: dict[str, float], label: str) -> bool:
        return label in row and row[label] <= (1 + tolerance) * min(row.values())

    open_ = [row for row in times if not good(row, DEFAULT)]
    chosen: list[str] = []
    while open_ and len(chosen) < limit:
        best = max(labels, key=lambda c: (sum(good(r, c) for r in open_), -labels.index(c)))
        if not any(good(r, best) for r in open_):
            break
        chosen.append(best)
        open_ = [r for r in open_ if not good(r, best)]
    return chosen


def _label(row: dict[str, float], chosen: list[str], tolerance: float) -> int:
    """The class a shape teaches: the index of its fastest chosen config,
    or -1 (the default) unless that config beats the default by over twice
    ``tolerance``: a smaller gain is within what one timing of a shared
    machine moves, and a leaf taught by it lost 1.16x to the default on a
    held-out RMS norm shape (`benches/learned.py --family rmsnorm`)."""
    options = [c for c in chosen if c in row]
    if not options:
        return -1
    fastest = min(options, key=lambda c: row[c])
    return -1 if row[DEFAULT] <= (1 + 2 * tolerance) * row[fastest] else chosen.index(fastest)


#: The tree's size. A leaf holds four shapes at least: of two or three,
#: every one of which ran its config faster than the default, leaves ran
#: held-out shapes up to 1.19x the default (a layernorm; a row sum 1.16x;
#: `benches/learned.py`, replayed from ``benches/families``). At four
#: those keep the default; column sums keep their 1.27x (docs/tuning.md,
#: "Learned heuristics") and their learned gain falls from 1.14x to 1.06x.
TREE = {"max_depth": 4, "min_samples_leaf": 4}


def _tree(
    features: list[list[float]], labels: list[int], seed: int
) -> tuple[list[dict[str, Any]], list[int]]:
    """A decision tree over the features (:data:`TREE`), as the document's
    nodes: splits (``x[feature] <= threshold`` goes left) and leaves naming
    a config index or ``None`` (the default heuristic); and the leaf each
    sample falls in."""
    if len(set(labels)) == 1:
        return [{"leaf": None if labels[0] < 0 else labels[0]}], [0] * len(labels)
    try:
        from sklearn.tree import DecisionTreeClassifier  # type: ignore[import-untyped]
    except ImportError as e:
        raise ImportError(
            "learn: fitting the tree needs scikit-learn: pip install tilefuse[learn]"
        ) from e
    fit = DecisionTreeClassifier(**TREE, random_state=seed)
    fit.fit(features, labels)
    t = fit.tree_
    nodes: list[dict[str, Any]] = []
    for i in range(t.node_count):
        if t.children_left[i] < 0:
            label = int(fit.classes_[int(np.argmax(t.value[i][0]))])
            nodes.append({"leaf": None if label < 0 else label})
        else:
            split = {"feature": int(t.feature[i]), "threshold": float(t.threshold[i])}
            nodes.append(
                {**split, "left": int(t.children_left[i]), "right": int(t.children_right[i])}
            )
    return nodes, [int(leaf) for leaf in fit.apply(features)]


def _guard(
    nodes: list[dict[str, Any]],
    leaves: list[int],
    rows: list[dict[str, float]],
    chosen: list[str],
    tolerance: float,
) -> None:
    """Leaves keep their config only where every training shape in them
    runs it faster than the default heuristic by over ``tolerance``; the
    others keep the default. A learned heuristic may miss a gain, but
    should not lose to the default: a leaf whose config merely did not
    lose on its shapes ran a held-out softmax shape 1.19x the default
    (`benches/learned.py`)."""
    for i, node in enumerate(nodes):
        config = node.get("leaf")
        if config is None:
            continue
        label = chosen[config]
        shapes = [row for row, leaf in zip(rows, leaves, strict=True) if leaf == i]
        if not all(label in r and (1 + tolerance) * r[label] < r[DEFAULT] for r in shapes):
            node["leaf"] = None


def _quality(
    times: FamilyTimes, i: int, w: Workload, device: Device, directory: str
) -> ShapeQuality:
    """Held-out shape ``i``: what the learned document in ``directory``
    picks for it, evaluated as lookups evaluate it, against its tuned
    winner and its default, in the times recorded side by side at it.
    Params equal to the default's are the default's kernel: one kernel
    has one time."""
    params, _, leaf, _, messages = _native.learned_get(
        w.payload._native, device._native, directory=directory
    )
    for m in messages:
        Console(stderr=True).print(m)
    row, default = times.times[i], times.defaults[i]
    by_params = {json.dumps(p, sort_keys=True): label for label, p in times.configs.items()}

    def time_of(p: dict[str, Any] | None) -> float:
        label = by_params.get(json.dumps(p, sort_keys=True)) if p not in (None, default) else None
        return row.get(label or DEFAULT, row[DEFAULT])

    winner = times.winners[i]
    return ShapeQuality(
        times.shapes[i],
        default=row[DEFAULT],
        tuned=row.get(winner or DEFAULT, row[DEFAULT]),
        learned=time_of(params),
        leaf=leaf if leaf is not None else 0,
        kept_default=params is None,
    )


def _geomean(values: list[float]) -> float | None:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None


class LearnedSeeds(AutotunerHeuristic):
    """Seeds a tuning run with what a learned heuristic picks for the
    fusion, so that tuning a shape starts from the learned config."""

    name = "learned"

    @classmethod
    def is_eligible(cls, fusion: Fusion, device: DeviceFacts) -> bool:
        return bool(cls.seed_configs(fusion, device))

    @classmethod
    def seed_configs(
        cls, fusion: Fusion, device: DeviceFacts
    ) -> list[HeuristicParams | dict[str, Any]]:
        if not isinstance(device, Device):  # a remote worker's: no local lookup
            return []
        pick = _cache.learned(fusion, device)
        return [] if pick is None or pick["params"] is None else [pick["params"]]
