"""Seed heuristics for the autotuner (Helion's ``AutotunerHeuristic``).

A seed heuristic is an expert rule that recognises a kind of fusion and
proposes params for it. Subclasses of :class:`AutotunerHeuristic` register
themselves when defined; :func:`tilefuse.tune` asks every registered one
that is for the fusion's scheduler and the device whether it applies, tries
its seeds right after the default heuristic's params, and adds its
``neighbors`` of each new best to the search. A heuristic that raises (or
returns params that do not load) is skipped with a warning; tuning goes on.
The built-in ones (skinny matmuls, short rows, long pointwise chains, outer
reductions) are written in Rust and run too unless ``tune(...,
builtin_heuristics=False)``.

Example::

    class WideVectors(tilefuse.AutotunerHeuristic):
        name = "wide_vectors"
        schedulers = ("pointwise",)

        @classmethod
        def is_eligible(cls, fusion, device):
            return fusion.features()["compute_ops"] >= 4

        @classmethod
        def seed_configs(cls, fusion, device):
            p = fusion.heuristics(device=device, cache=False)
            p.vectorization_factor = 4
            return [p]
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, ClassVar, cast

from .params import HeuristicParams

if TYPE_CHECKING:
    from .device import DeviceFacts
    from .fusion import Fusion

__all__ = ["AutotunerHeuristic", "registered", "unregister"]

_REGISTRY: dict[str, type[AutotunerHeuristic]] = {}


class AutotunerHeuristic:
    """Base class of seed heuristics; subclasses register when defined (a
    later class of the same ``name`` replaces the earlier one; pass
    ``register=False`` in the class statement to define one without
    registering it)."""

    #: Its name, as tuning results and cache entries record it.
    name: ClassVar[str]
    #: The schedulers it is for (``"pointwise"``, ``"reduction"``,
    #: ``"matmul"``); every one when empty.
    schedulers: ClassVar[tuple[str, ...]] = ()
    #: The device kinds it is for (``"cpu"``, ``"gpu"``); every one when empty.
    devices: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, register: bool = True, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not isinstance(cls.__dict__.get("name"), str) or not cls.name:
            raise TypeError(f"{cls.__qualname__} needs a class attribute `name` (a string)")
        if register:
            _REGISTRY[cls.name] = cls

    @classmethod
    def is_eligible(cls, fusion: Fusion, device: DeviceFacts) -> bool:
        """Whether it applies to ``fusion`` on ``device``."""
        raise NotImplementedError(f"{cls.__qualname__}.is_eligible")

    @classmethod
    def seed_configs(
        cls, fusion: Fusion, device: DeviceFacts
    ) -> list[HeuristicParams | dict[str, Any]]:
        """Its proposals for ``fusion`` on ``device``, best first."""
        raise NotImplementedError(f"{cls.__qualname__}.seed_configs")

    @classmethod
    def neighbors(
        cls, params: HeuristicParams, fusion: Fusion, device: DeviceFacts
    ) -> list[HeuristicParams | dict[str, Any]]:
        """Params worth trying near ``params``, the best found so far
        (none by default)."""
        return []


def registered() -> list[type[AutotunerHeuristic]]:
    """The registered heuristics, in the order they were defined."""
    return list(_REGISTRY.values())


def unregister(heuristic: type[AutotunerHeuristic] | str) -> None:
    """Removes a heuristic (a class or a name) from the registry."""
    _REGISTRY.pop(heuristic if isinstance(heuristic, str) else heuristic.name, None)


def _loaded(configs: list[HeuristicParams | dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        (c if isinstance(c, HeuristicParams) else HeuristicParams.from_dict(c)).to_dict()
        for c in configs
    ]


def _applies(h: type[AutotunerHeuristic], scheduler: str, device: DeviceFacts) -> bool:
    kind = "gpu" if device.is_gpu else "cpu"
    return (not h.schedulers or scheduler in h.schedulers) and (not h.devices or kind in h.devices)


def _skip(h: type[AutotunerHeuristic], error: BaseException) -> None:
    warnings.warn(
        f"seed heuristic '{h.name}' failed and is skipped: {type(error).__name__}: {error}",
        RuntimeWarning,
        stacklevel=4,
    )


def for_tuning(
    fusion: Fusion, device: DeviceFacts, scheduler: str
) -> list[tuple[str, list[dict[str, Any]], Any]]:
    """``(name, seeds, neighbors)`` of every registered heuristic that
    applies, for the native tuner; those that raise are skipped with a
    warning."""
    out = []
    for h in registered():
        try:
            if not (_applies(h, scheduler, device) and h.is_eligible(fusion, device)):
                continue
            seeds = _loaded(h.seed_configs(fusion, device))
        except Exception as e:
            _skip(h, e)
            continue
        near = None
        if h.neighbors.__func__ is not AutotunerHeuristic.neighbors.__func__:  # type: ignore[attr-defined]
            near = _neighbors_of(h, fusion, device)
        out.append((h.name, seeds, near))
    return out


def _neighbors_of(h: type[AutotunerHeuristic], fusion: Fusion, device: DeviceFacts) -> Any:
    def near(params: dict[str, Any]) -> list[dict[str, Any]]:
        best = cast(HeuristicParams, HeuristicParams.from_dict(params))
        return _loaded(h.neighbors(best, fusion, device))

    return near
