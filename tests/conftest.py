"""Shared test helpers: fresh random inputs and the float64 comparison."""

from __future__ import annotations

import copy
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from hypothesis import strategies as st

import tilefuse as tf
from tilefuse.tensor import NUMPY_DTYPES

# Relative error bound of f32 kernels against a float64 numpy reference.
RTOL = 1e-5


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A generator with a fresh seed per test, printed so a failure can be
    replayed with TILEFUSE_TEST_SEED."""
    seed = int(os.environ.get("TILEFUSE_TEST_SEED", np.random.SeedSequence().entropy % 2**32))
    print(f"{request.node.nodeid}: TILEFUSE_TEST_SEED={seed}")
    return np.random.default_rng(seed)


def assert_close(actual: Any, expected: Any, rtol: float = RTOL) -> None:
    """``actual`` (f32) matches the float64 ``expected`` within ``rtol`` of
    each element, with an absolute floor relative to the largest value so
    that results near zero are judged by the scale of the whole output."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    finite = np.abs(expected[np.isfinite(expected)])
    scale = float(finite.max()) if finite.size else 0.0
    np.testing.assert_allclose(
        actual.astype(np.float64), expected, rtol=rtol, atol=rtol * max(scale, 1e-30)
    )


def in_ci() -> bool:
    return os.environ.get("CI") == "true"


def ray_or_skip() -> ModuleType:
    """Ray, for a module of Ray tests; without it the module is skipped,
    except in CI, which installs the test extras (Ray among them) and must
    never skip them."""
    try:
        import ray
    except ImportError:
        if in_ci():
            raise
        pytest.skip("the Ray executor's tests need Ray (tilefuse[ray])", allow_module_level=True)
    return ray


def preserves_nan(device: tf.Device) -> bool:
    """Whether ``device`` keeps NaN and infinities through arithmetic a
    compiler could fold (``x - x``): the CPU, and GPUs whose driver takes
    SPIR-V float controls (docs/semantics.md)."""
    return not device.is_gpu or "signed_zero_inf_nan_preserve" in device.info["features"]


@pytest.fixture(scope="session")
def gpu() -> tf.Device:
    """The GPU device. In CI a missing adapter fails the test: CI runs
    every GPU test on Mesa's lavapipe. Elsewhere the test is skipped."""
    try:
        return tf.Device.gpu()
    except tf.DeviceError as exc:
        if in_ci():
            pytest.fail(f"CI needs a GPU adapter (install mesa-vulkan-drivers): {exc}")
        pytest.skip(f"no GPU adapter: {exc}")  # outside CI only: CI failed just above


@pytest.fixture(params=["cpu", "gpu"])
def device(request: pytest.FixtureRequest) -> tf.Device:
    """Each device in turn: the CPU, then the GPU (see ``gpu``)."""
    if request.param == "cpu":
        return tf.Device.cpu()
    return request.getfixturevalue("gpu")  # type: ignore[no-any-return]


def from_schema(root: dict[str, Any], schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """A hypothesis strategy for values the schema admits (cross-field rules
    aside): built from the Rust declarations, like the tuner's spaces."""
    if "$ref" in schema:
        return from_schema(root, root["$defs"][schema["$ref"].removeprefix("#/$defs/")])
    for key in ("oneOf", "anyOf"):
        if key in schema:
            return st.one_of([from_schema(root, s) for s in schema[key]])
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    types = schema.get("type", "object")
    if isinstance(types, list):
        return st.one_of([from_schema(root, {**schema, "type": t}) for t in types])
    if types == "null":
        return st.none()
    if types == "boolean":
        return st.booleans()
    if types == "integer":
        lo = schema.get("minimum", 0)
        hi = min(schema.get("maximum", lo + 512), lo + 512)
        powers = [2**e for e in range(12) if lo <= 2**e <= hi]
        return st.sampled_from(powers) | st.integers(lo, hi) if powers else st.integers(lo, hi)
    if types == "array":
        n = schema["minItems"]
        return st.lists(from_schema(root, schema["items"]), min_size=n, max_size=n)
    fields = {k: from_schema(root, v) for k, v in schema["properties"].items()}
    return st.fixed_dictionaries({}, optional=fields)


# What a hand edit or a bad tool puts into a JSON or YAML document.
ODD_VALUES = [None, 0, -1, 2**64, 1.5, float("inf"), "", "x", "${nope}", [], {}, [0], {"a": 1}]


def _nodes(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path to every value inside ``doc`` (not ``doc`` itself)."""
    if isinstance(doc, dict):
        items: Any = doc.items()
    else:
        items = enumerate(doc) if isinstance(doc, list) else ()
    return [p for k, v in items for p in [(*path, k), *_nodes(v, (*path, k))]]


@st.composite
def mutated(draw: st.DrawFn, doc: Any) -> Any:
    """``doc`` (plain JSON data) with one to three values replaced by odd
    ones, removed, or joined by an unknown key."""
    doc = copy.deepcopy(doc)
    odd = st.sampled_from(ODD_VALUES).map(copy.deepcopy)  # never one list in two places
    for _ in range(draw(st.integers(1, 3))):
        nodes = _nodes(doc)
        if not nodes:
            break
        *parents, last = draw(st.sampled_from(nodes))
        parent = doc
        for key in parents:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "replace", "remove", "add"]))
        if action == "replace":
            parent[last] = draw(odd)
        elif action == "remove":
            del parent[last]
        elif isinstance(parent, dict):
            parent["unknown"] = draw(odd)
        else:
            parent.insert(0, draw(odd))
    return doc


class ScaledReference(tf.Workload):
    """Row sums of exp(x) whose reference is the exact one scaled by
    ``1 + off``, checked within ``rtol``; it counts its calls."""

    name = "scaled_reference"

    def __init__(self, off: float, rtol: float) -> None:
        super().__init__()
        self.off, self.tolerance, self.calls = off, tf.Tolerance(rtol), 0

    def fusion(self) -> tf.Fusion:
        f = tf.Fusion()
        f.output(f.input((8, 64), "f32", name="x").exp().sum(axis=1))
        return f

    def reference(self, *inputs: np.ndarray) -> Any:
        self.calls += 1
        return np.exp(inputs[0].astype(np.float64)).sum(axis=1) * (1 + self.off)


def schedule_or_reject(
    f: tf.Fusion, values: dict[str, Any], device: tf.Device, outcomes: dict[str, int]
) -> Any:
    """Schedules ``f`` with params drawn as a dict: the kernel, or ``None``
    when the params are rejected, which must be a ``ParamsError`` naming
    the field. Counts both in ``outcomes``."""
    try:
        kernel = f.schedule(tf.HeuristicParams.from_dict(values), device)
    except tf.ParamsError as err:
        assert err.path, f"rejection without a path: {err}"
        outcomes["rejected"] += 1
        return None
    outcomes["ran"] += 1
    return kernel


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every test session tunes into its own heuristic cache, never the
    user's (and never finds a stale winner there), and finds no pipelines
    in the user's config directory."""
    os.environ["TILEFUSE_CACHE"] = str(tmp_path_factory.mktemp("tilefuse-cache"))
    os.environ["XDG_CONFIG_HOME"] = str(tmp_path_factory.mktemp("config"))


@pytest.fixture
def ctrl_c_raises() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt during the test, as in a terminal,
    also when the suite was launched as a background job (whose shell
    ignores SIGINT, so Python installed no handler)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache of this test's own, for tests that read back what they
    tuned (the session's cache holds other tests' faster winners)."""
    directory = tmp_path / "cache"
    monkeypatch.setenv("TILEFUSE_CACHE", str(directory))
    return directory


def _host_layout(binding: dict[str, Any]) -> np.dtype[Any]:
    """The numpy dtype of an exported binding's elements as a host lays
    them out: its own (halves two bytes each), masks as ``u32``."""
    return np.dtype(np.uint32) if binding["dtype"] == "bool" else NUMPY_DTYPES[binding["dtype"]]


def run_exported_with_wgpu_py(manifest: Path, *arrays: np.ndarray[Any, Any]) -> list[Any]:
    """Runs a kernel from the files ``Kernel.export`` wrote, the way
    another WebGPU host would: wgpu-py, the JSON and the WGSL, nothing of
    tilefuse."""
    import wgpu  # type: ignore[import-untyped]

    spec = json.loads(manifest.read_text())
    adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    # wgpu-native names WebGPU's "subgroups" feature "subgroup"
    native = {"subgroups": "subgroup"}
    device = adapter.request_device_sync(
        required_features=[native.get(f, f) for f in spec["features"]]
    )
    module = device.create_shader_module(code=(manifest.parent / spec["wgsl"]).read_text())
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
    buffers = {}
    for b in spec["bindings"]:
        if b["role"] == "input":
            data = np.ascontiguousarray(arrays[b["index"]]).astype(_host_layout(b)).tobytes()
            data += bytes(-len(data) % 4)  # whole words
            buffers[b["binding"]] = device.create_buffer_with_data(data=data, usage=usage)
        else:
            buffers[b["binding"]] = device.create_buffer(size=b["bytes"], usage=usage)
    encoder = device.create_command_encoder()
    for d in spec["dispatch"]:
        pipeline = device.create_compute_pipeline(
            layout="auto", compute={"module": module, "entry_point": d["entry_point"]}
        )
        entries = [
            {"binding": i, "resource": {"buffer": buffers[i], "offset": 0, "size": buffers[i].size}}
            for i in d["bindings"]
        ]
        group = device.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=entries)
        compute = encoder.begin_compute_pass()
        compute.set_pipeline(pipeline)
        compute.set_bind_group(0, group)
        compute.dispatch_workgroups(*d["workgroups"])
        compute.end()
    device.queue.submit([encoder.finish()])
    outputs = sorted(
        (b for b in spec["bindings"] if b["role"] == "output"), key=lambda b: b["index"]
    )
    result = []
    for b in outputs:
        raw = device.queue.read_buffer(buffers[b["binding"]])
        n = int(np.prod(b["shape"]))
        result.append(np.frombuffer(raw, dtype=_host_layout(b))[:n].reshape(b["shape"]))
    return result


def run_exported_sequence_with_wgpu_py(manifest: Path, *arrays: np.ndarray[Any, Any]) -> list[Any]:
    """Runs the files ``SegmentedKernel.export`` wrote: each segment's
    kernel through :func:`run_exported_with_wgpu_py`, fed by the fusion's
    inputs and earlier segments' outputs as the sequence wires them."""
    spec = json.loads(manifest.read_text())
    values = dict(zip(spec["inputs"], arrays, strict=True))
    for segment in spec["segments"]:
        got = run_exported_with_wgpu_py(
            manifest.parent / segment["kernel"], *(values[t] for t in segment["inputs"])
        )
        values.update(zip(segment["outputs"], got, strict=True))
    return [values[t] for t in spec["outputs"]]
