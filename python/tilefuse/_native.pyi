"""Type stubs of the compiled module ``tilefuse._native`` (checked against
the module by ``tests/test_package.py`` with mypy's stubtest)."""

from collections.abc import Callable
from typing import Any, final

import numpy as np
import numpy.typing as npt

__all__ = [
    "FUSION_SCHEMA_VERSION",
    "PARAMS_VERSION",
    "Device",
    "DeviceError",
    "Fusion",
    "FusionError",
    "InternalError",
    "Kernel",
    "KernelSequence",
    "ParamsError",
    "Schedule",
    "ScheduleError",
    "TilefuseError",
    "TuneProblem",
    "__version__",
    "bundle_entries",
    "bundle_export",
    "bundle_import",
    "bundle_merge",
    "cache_clear",
    "cache_dir",
    "cache_entries",
    "cache_explain",
    "cache_get",
    "cache_prune",
    "cache_put",
    "cache_warm_start",
    "features",
    "heuristics",
    "learned_features",
    "learned_get",
    "learned_save",
    "params_from_json",
    "params_normalize",
    "params_schema",
    "params_structs",
    "record",
    "replay_trials",
    "schedule",
    "schedulers",
    "segments",
    "space_digest",
    "tunables",
    "tune",
]

__version__: str
FUSION_SCHEMA_VERSION: int
PARAMS_VERSION: int

class TilefuseError(Exception):
    """Base class of every tilefuse error."""

class FusionError(TilefuseError, ValueError):
    """A fusion that is not well formed: the message names the op and the shapes or dtypes."""

class ParamsError(TilefuseError, ValueError):
    """Params that cannot be used. `.path` is the field path, `.message` what is wrong there."""

    path: str
    message: str

class ScheduleError(TilefuseError, ValueError):
    """A schedule primitive whose precondition fails, naming the block or
    loop and the condition (`.primitive` names the primitive; `.blocks` and
    `.loops` are tuples of the names of the blocks and loops at fault), or a schedule
    the device's lowering cannot take (`.lowering_pass` names the pass).
    `.primitive` and `.lowering_pass` are None, `.blocks` and `.loops`
    empty, where they do not apply."""

    primitive: str | None
    lowering_pass: str | None
    blocks: tuple[str, ...]
    loops: tuple[str, ...]

class DeviceError(TilefuseError, RuntimeError):
    """A kernel the device cannot run (the message names the limit), or a device failure."""

class InternalError(TilefuseError, RuntimeError):
    """A broken invariant of tilefuse itself (a bug): the message says what failed."""

@final
class Fusion:
    def __new__(cls) -> Fusion: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __ne__(self, value: object, /) -> bool: ...
    def __len__(self) -> int: ...
    def input(self, shape: list[int], dtype: str, name: str | None = None) -> int: ...
    def constant(self, value: float, dtype: str) -> int: ...
    def unary(self, func: str, x: int) -> int: ...
    def binary(self, func: str, a: int, b: int) -> int: ...
    def where(self, cond: int, a: int, b: int) -> int: ...
    def cast(self, x: int, dtype: str) -> int: ...
    def broadcast(self, x: int, shape: list[int]) -> int: ...
    def reduce(
        self, func: str, x: int, axes: list[int] | None = None, keepdims: bool = False
    ) -> int: ...
    def permute(self, x: int, perm: list[int]) -> int: ...
    def reshape(self, x: int, shape: list[int]) -> int: ...
    def matmul(
        self,
        a: int,
        b: int,
        transpose_a: bool = False,
        transpose_b: bool = False,
        out_dtype: str | None = None,
    ) -> int: ...
    def output(self, t: int) -> None: ...
    def set_name(self, t: int, name: str) -> None: ...
    def shape(self, t: int) -> list[int]: ...
    def dtype(self, t: int) -> str: ...
    def name(self, t: int) -> str | None: ...
    def label(self, t: int) -> str: ...
    def op(self, t: int) -> str: ...
    @property
    def inputs(self) -> list[int]: ...
    @property
    def outputs(self) -> list[int]: ...
    def to_json(self, indent: bool = False) -> str: ...
    @staticmethod
    def from_json(text: str) -> Fusion: ...
    def fingerprint(self) -> str: ...
    def summary(self) -> dict[str, Any]:
        """``{"complexity": {"flops", "bytes_read", "bytes_written"},
        "matmuls": [{"batch", "m", "n", "k", "transpose_a", "transpose_b"}],
        "reductions": [{"op", "shape", "axes"}]}``."""
    def evaluate(self, *arrays: npt.NDArray[Any]) -> list[npt.NDArray[np.generic]]: ...

def schedulers(fusion: Fusion) -> list[tuple[str, str | None]]: ...
def heuristics(fusion: Fusion, device: Device, scheduler: str | None = None) -> dict[str, Any]: ...
def schedule(fusion: Fusion, params: Any, device: Device) -> Schedule: ...
def space_digest(fusion: Fusion, device: Device, scheduler: str | None = None) -> str:
    """A digest of the fields and values the tuner searches for ``fusion``
    on ``device``: what a cache entry's ``"space"`` is compared with."""

def tunables(
    fusion: Fusion, device: Device, scheduler: str | None = None
) -> tuple[str, list[dict[str, Any]]]: ...
def features(fusion: Fusion) -> dict[str, Any]: ...
def tune(
    fusion: Fusion,
    device: Device | dict[str, Any],
    options: dict[str, Any],
    progress: Callable[[dict[str, Any], float | None], Any] | None = None,
    heuristics: list[
        tuple[str, list[dict[str, Any]], Callable[[dict[str, Any]], list[dict[str, Any]]] | None]
    ] = ...,
    builtin_heuristics: bool = True,
    inputs: tuple[npt.NDArray[Any], ...] | None = None,
    expected: tuple[npt.NDArray[Any], ...] | None = None,
    executor: Any | None = None,
    replay: str | None = None,
) -> dict[str, Any]: ...
def record(
    fusion: Fusion,
    device: Device,
    options: dict[str, Any],
    description: str = ...,
    passes: int = 1,
    progress: Callable[[dict[str, Any], float | None], Any] | None = None,
) -> str:
    """Every point of the space of ``fusion`` on ``device`` (narrowed to
    ``options["fields"]``) with its time, as recording JSON; each time the
    median of ``passes`` exhaustive runs."""

def replay_trials(
    recording: str, strategy: str, tolerance: float, first: int, seeds: int
) -> list[int]:
    """Trials ``strategy`` takes on ``recording`` to get within
    ``tolerance`` of its best, for seeds ``first..first + seeds``, fewest
    first (the space's size for a seed that never gets there)."""

@final
class TuneProblem:
    """What a tuning worker measures candidates on: a fusion, its inputs
    (given, or random from ``seed``) and the outputs they must give within
    ``rtol`` (given, or the reference evaluator's)."""

    def __new__(
        cls,
        fusion: Fusion,
        seed: int = 0,
        inputs: tuple[npt.NDArray[Any], ...] | None = None,
        expected: tuple[npt.NDArray[Any], ...] | None = None,
        rtol: float | None = None,
        replay: str | None = None,
    ) -> TuneProblem: ...
    def measure(self, device: Device, candidate: dict[str, Any]) -> dict[str, Any]:
        """Schedules, builds, checks and times one candidate."""
    def final_round(
        self,
        device: Device,
        finalists: list[dict[str, Any]],
        warmup: int,
        repeat: int,
        rounds: int,
    ) -> list[list[float]]:
        """The finalists timed in ``rounds`` interleaved rounds: each one's
        median in each round."""

def cache_get(
    fusion: Fusion,
    device: Device,
    scheduler: str | None = None,
    directory: str | None = None,
    bundles: list[str] = ...,
) -> tuple[dict[str, Any] | None, str | None, list[str]]: ...
def learned_features(fusion: Fusion) -> tuple[list[str], list[float]]: ...
def learned_save(
    fusion: Fusion,
    device: Device,
    name: str,
    nodes: list[dict[str, Any]],
    configs: list[dict[str, Any]],
    meta: dict[str, Any],
    directory: str | None = None,
) -> str: ...
def learned_get(
    fusion: Fusion,
    device: Device,
    scheduler: str | None = None,
    directory: str | None = None,
    bundles: list[str] = ...,
) -> tuple[dict[str, Any] | None, str | None, int | None, str | None, list[str]]: ...
def bundle_export(path: str, directory: str | None = None) -> tuple[int, list[str]]: ...
def bundle_entries(path: str) -> list[dict[str, Any]]: ...
def bundle_merge(output: str, inputs: list[str]) -> int: ...
def bundle_import(path: str, directory: str | None = None) -> tuple[int, int, list[str]]: ...
def cache_prune(directory: str | None = None) -> int: ...
def cache_put(
    fusion: Fusion,
    device: Device | dict[str, Any],
    params: Any,
    best_time: float,
    default_time: float | None = None,
    trials: int = 0,
    strategy: str = ...,
    heuristics: list[str] = ...,
    samples: list[float] = ...,
    space: str = ...,
    directory: str | None = None,
) -> tuple[bool, list[str]]: ...
def cache_warm_start(
    fusion: Fusion,
    device: Device | dict[str, Any],
    scheduler: str,
    directory: str | None = None,
    bundles: list[str] = ...,
    limit: int = 4,
) -> tuple[list[dict[str, Any]], list[str]]:
    """The params of the cached winners of the fusion's family (its
    structure at any sizes) on the device, nearest sizes first."""

def cache_entries(directory: str | None = None) -> tuple[list[dict[str, Any]], list[str]]: ...
def cache_clear(directory: str | None = None) -> int: ...
def cache_dir() -> str | None: ...
def cache_explain(
    fusion: Fusion, device: Device, scheduler: str | None = None, directory: str | None = None
) -> list[tuple[dict[str, Any], list[str]]]: ...
def segments(fusion: Fusion) -> list[tuple[Fusion, str, list[int], list[int]]]: ...
def params_structs() -> list[tuple[str, str | None]]: ...
def params_schema(name: str) -> dict[str, Any]: ...
def params_normalize(name: str, value: Any) -> dict[str, Any]: ...
def params_from_json(name: str, text: str) -> dict[str, Any]: ...

@final
class Schedule:
    def __new__(cls, fusion: Fusion) -> Schedule: ...
    @staticmethod
    def replay(fusion: Fusion, trace: str) -> Schedule: ...
    def get_block(self, name: str) -> int: ...
    def get_blocks(self) -> list[int]: ...
    def get_loops(self, block: int) -> list[int]: ...
    def block_name(self, block: int) -> str: ...
    def loop_info(self, l: int) -> tuple[str, int, str] | None: ...
    def split(
        self, loop_: int, factors: list[int | None], names: list[str] | None = None
    ) -> list[int]: ...
    def fuse(self, loops_: list[int]) -> int: ...
    def reorder(self, loops_: list[int]) -> None: ...
    def bind(self, loop_: int, axis: str) -> None: ...
    def parallel(self, loop_: int) -> None: ...
    def vectorize(self, loop_: int) -> None: ...
    def unroll(self, loop_: int) -> None: ...
    def pipeline(self, loop_: int, stages: int, prefetch_gap: int) -> None: ...
    def rfactor(self, loop_: int) -> int: ...
    def decompose_reduction(self, block: int, loop_: int) -> int: ...
    def compute_at(self, block: int, loop_: int) -> None: ...
    def reverse_compute_at(self, block: int, loop_: int) -> None: ...
    def cache_read(self, block: int, buffer: str, scope: str) -> int: ...
    def cache_write(self, block: int, scope: str) -> int: ...
    def set_scope(self, block: int, scope: str) -> None: ...
    def compute_inline_all(self, keep: list[int]) -> list[int]: ...
    def compute_inline(self, block: int) -> None: ...
    def reverse_compute_inline(self, block: int) -> None: ...
    def fusion(self) -> Fusion: ...
    def trace(self) -> str: ...
    def trace_as_python(self) -> str: ...
    def lower(self, device: Device) -> list[tuple[str, str]]: ...
    def build(self, device: Device) -> Kernel: ...

@final
class Device:
    @staticmethod
    def default() -> Device: ...
    @staticmethod
    def cpu() -> Device: ...
    @staticmethod
    def gpu() -> Device: ...
    @property
    def info(self) -> dict[str, Any]: ...

@final
class KernelSequence:
    """The GPU kernels of a segmented fusion as one submission."""

    def __new__(
        cls,
        fusion: Fusion,
        kernels: list[Kernel],
        wiring: list[tuple[list[int], list[int]]],
        results: list[int],
    ) -> KernelSequence: ...
    def run(self, *arrays: npt.NDArray[Any], out: Any = None) -> list[npt.NDArray[np.generic]]: ...

@final
class Kernel:
    def run(self, *arrays: npt.NDArray[Any], out: Any = None) -> list[npt.NDArray[np.generic]]:
        """Runs the kernel; ``out``: an array or a tuple of arrays / ``None``
        (one per output) to write in place."""
    def benchmark(
        self, *arrays: npt.NDArray[Any], warmup: int = 3, repeat: int = 20
    ) -> tuple[float, float, float, list[float]]: ...
    @property
    def wgsl(self) -> str: ...
    @property
    def features(self) -> list[str]: ...
    @property
    def bindings(self) -> list[dict[str, Any]]: ...
    @property
    def dispatch(self) -> list[dict[str, Any]]: ...
