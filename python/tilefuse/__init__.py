"""tilefuse: a tensor-fusion compiler whose automatic schedulers are driven
by plain-data heuristic params that you can read, edit, save and tune."""

from . import cache as cache  # tf.cache: the heuristic cache (a module)
from . import paramsfile as paramsfile  # tf.paramsfile: params files with fingerprints
from . import pipeline as pipeline  # tf.pipeline: YAML pipelines (load, find, names)
from . import replay as replay  # tf.replay: recorded spaces, strategies compared offline
from . import timing as timing  # tf.timing: Budget, measure, interleave
from . import workloads as workloads  # tf.workloads: the built-in workloads
from ._native import (
    FUSION_SCHEMA_VERSION,
    PARAMS_VERSION,
    DeviceError,
    FusionError,
    InternalError,
    ParamsError,
    ScheduleError,
    TilefuseError,
    __version__,
)
from .collect import Collected, collect
from .complexity import Complexity
from .device import Device, DeviceFacts, DeviceName, as_device
from .engine import BenchResult, Engine, VerificationError
from .fusion import Fusion
from .heuristic import AutotunerHeuristic
from .learn import LearnResult, learn
from .params import (
    CircularBufferOptions,
    CompileParams,
    GemmTile,
    HeuristicParams,
    LaunchParams,
    MatmulParams,
    MatMulTileOptions,
    ParamsStruct,
    PointwiseParams,
    ReductionParams,
    SupportedVecSize,
)
from .pipeline import Pipeline, load_pipeline
from .results import Trial, TrialOrigin, TrialStatus, TuneResult
from .schedule import Block, Kernel, Loop, Schedule, Timing
from .segments import Segment, SegmentedKernel
from .stages import PipelineRun
from .stages import run as run_pipeline
from .tensor import (
    DTypeLike,
    Tensor,
    abs,
    cos,
    exp,
    gelu,
    log,
    matmul,
    maximum,
    minimum,
    reciprocal,
    relu,
    rsqrt,
    sigmoid,
    sin,
    sqrt,
    tanh,
    where,
)
from .tune import Effort, Strategy, tune
from .workload import Requirements, Tolerance, Verification, Workload, as_workload

__all__ = [
    "FUSION_SCHEMA_VERSION",
    "PARAMS_VERSION",
    "AutotunerHeuristic",
    "BenchResult",
    "Block",
    "CircularBufferOptions",
    "Collected",
    "CompileParams",
    "Complexity",
    "DTypeLike",
    "Device",
    "DeviceError",
    "DeviceFacts",
    "DeviceName",
    "Effort",
    "Engine",
    "Fusion",
    "FusionError",
    "GemmTile",
    "HeuristicParams",
    "InternalError",
    "Kernel",
    "LaunchParams",
    "LearnResult",
    "Loop",
    "MatMulTileOptions",
    "MatmulParams",
    "ParamsError",
    "ParamsStruct",
    "Pipeline",
    "PipelineRun",
    "PointwiseParams",
    "ReductionParams",
    "Requirements",
    "Schedule",
    "ScheduleError",
    "Segment",
    "SegmentedKernel",
    "Strategy",
    "SupportedVecSize",
    "Tensor",
    "TilefuseError",
    "Timing",
    "Tolerance",
    "Trial",
    "TrialOrigin",
    "TrialStatus",
    "TuneResult",
    "Verification",
    "VerificationError",
    "Workload",
    "__version__",
    "abs",
    "as_device",
    "as_workload",
    "collect",
    "cos",
    "exp",
    "gelu",
    "learn",
    "load_pipeline",
    "log",
    "matmul",
    "maximum",
    "minimum",
    "reciprocal",
    "relu",
    "rsqrt",
    "run_pipeline",
    "sigmoid",
    "sin",
    "sqrt",
    "tanh",
    "tune",
    "where",
]
