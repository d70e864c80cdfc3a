"""The property test that keeps bad input from crashing, hanging or lying:
random fusions (ops, ops on literals, broadcasts, reductions over random axes with and
without keepdims, matmuls, several outputs, inputs returned, sizes with 0
and 1, ranks up to 6, inputs and casts of f32, f16 and bf16 mixed) with
special values in their inputs (NaN, +-inf, +-0, huge, tiny).
For each, on the CPU and the GPU: ``heuristics()`` succeeds, ``schedule()``
accepts its own heuristics, and the result equals the reference evaluator
exactly where it is NaN or infinite and within tolerance elsewhere.

``TILEFUSE_FUZZ_CASES`` sets the number of fusions (CI runs the default,
with a fixed sequence of examples; raise it to search further).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

import tilefuse as tf
from conftest import in_ci, mutated, preserves_nan
from tilefuse.tensor import NUMPY_DTYPES

CASES = int(os.environ.get("TILEFUSE_FUZZ_CASES", "150"))

# Values that break naive kernels. "Huge" and "tiny" keep products of a few
# of them, and sums of those, inside the f32 range: the reference sums a
# dot product or a reduction in f64 and rounds once, so whether a sum
# overflows midway in f32 would depend on its order; and clear of the
# subnormals, which GPUs may flush to zero.
SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e12, -1e12, 1e-12, -1e-12]

# sin and cos are left out: GPUs compute them accurately only near [-pi, pi]
# (WGSL promises no more), so huge arguments give other values there.
UNARY = ["neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu"]
UNARY += ["reciprocal"]
BINARY = ["add", "sub", "mul", "div", "max", "min"]
# Zeros too: GPU compilers fold x * 0, x / 0, 0 / x and 0 - x with WGSL's
# finite-math license unless the generated code prevents it.
CONSTANTS = [2.0, -0.5, 1e20, 0.0, -0.0]
REDUCE = ["sum", "max", "min", "mean"]
# Input dtypes, f32 the most often: halves meet f32 (and each other) in
# promotions, casts and matmuls.
DTYPES = ["f32", "f32", "f16", "bf16"]
#: Unit roundoff of each half dtype: a result of a fusion with a half
#: tensor in it is judged at that precision (``_close``).
UNIT = {"f16": 2.0**-11, "bf16": 2.0**-8}
COMPARE = ["eq", "ne", "lt", "le", "gt", "ge"]


@dataclass
class Built:
    """A random fusion and the shapes of its inputs."""

    fusion: tf.Fusion
    shapes: list[tuple[int, ...]] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)


dims = st.sampled_from([1, 2, 3, 4, 5, 8, 16]) | st.just(0)
shapes = st.lists(dims, min_size=0, max_size=6).map(tuple).filter(lambda s: np.prod(s) <= 4096)


def _broadcast_partner(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts with ``shape``: a suffix of it, some dims 1."""
    keep = draw(st.integers(0, len(shape)))
    tail = shape[len(shape) - keep :]
    return tuple(1 if draw(st.booleans()) and d != 0 else d for d in tail)


@st.composite
def fusions(draw: st.DrawFn) -> Built:
    f = tf.Fusion()
    built = Built(f)

    def new_input(shape: tuple[int, ...]) -> tf.Tensor:
        built.shapes.append(shape)
        return f.input(shape, draw(st.sampled_from(DTYPES)), name=f"in{len(built.shapes) - 1}")

    if draw(st.integers(0, 4)) == 0:
        # A matmul (batched or not), maybe with an epilogue.
        m, n, k = (draw(st.sampled_from([0, 1, 3, 8])) for _ in range(3))
        batch = draw(st.sampled_from([(), (2,), (1, 3)]))
        a, b = new_input((*batch, m, k)), new_input((k, n))
        out_dtype = draw(st.sampled_from([None, None, "f32", "f16", "bf16"]))
        pool = [tf.matmul(a, b, out_dtype=out_dtype)]
        built.steps.append(f"matmul {batch} {m}x{k} @ {k}x{n} -> {out_dtype}")
    else:
        pool = [new_input(draw(shapes))]
    for _ in range(draw(st.integers(1, 6))):
        x = draw(st.sampled_from(pool))
        kinds = ["unary", "binary", "self", "constant", "literal", "reduce", "where", "cast"]
        kinds += ["compare", "float"]
        kind = draw(st.sampled_from(kinds))
        if kind == "unary":
            op = draw(st.sampled_from(UNARY))
            y = getattr(x, op)()
        elif kind == "binary":
            op = draw(st.sampled_from(BINARY))
            other = new_input(_broadcast_partner(draw, x.shape))
            a, b = (other, x) if draw(st.booleans()) else (x, other)
            y = a._binary(op, b)
        elif kind == "self":  # x - x is NaN at NaN and infinities
            y = x._binary(draw(st.sampled_from(BINARY)), x)
        elif kind == "constant":
            op = draw(st.sampled_from(BINARY))
            y = x._binary(op, draw(st.sampled_from(CONSTANTS)))
        elif kind == "literal":  # an op on a literal alone, evaluated before WGSL sees it
            c = f.constant(draw(st.sampled_from([*CONSTANTS, np.inf, -np.inf, np.nan])))
            y = x._binary(draw(st.sampled_from(BINARY)), getattr(c, draw(st.sampled_from(UNARY)))())
        elif kind == "reduce":
            op = draw(st.sampled_from(REDUCE))
            axes = None
            if x.ndim and draw(st.booleans()):
                axes = draw(st.lists(st.integers(0, x.ndim - 1), min_size=1, unique=True))
            y = x._reduce(op, axes, draw(st.booleans()))
        elif kind == "where":
            # Not a value ops take at the special inputs (sigmoid(1e-7) is
            # 0.5 in f32 by rounding, a GPU gives 0.5 + 1 ulp): an ulp there
            # flips the branch, which no tolerance absorbs.
            y = tf.where(x > 0.3, x, -x)
        elif kind == "compare":
            # With itself or a literal: exact on every device, so NaN alone
            # decides (x != x is NaN's test; WGSL's != is False for NaN).
            c = draw(st.sampled_from([np.nan, np.inf, 0.0, -0.0]))
            other = x if draw(st.booleans()) else f.constant(c)
            y = x._binary(draw(st.sampled_from(COMPARE)), other).astype("f32")
        elif kind == "float":  # to another float dtype: a half rounds
            y = x.astype(draw(st.sampled_from(["f32", "f16", "bf16"])))
        else:
            y = x.astype("i32").astype("f32")
        built.steps.append(f"{kind} -> {y.shape}")
        pool.append(y)
    candidates = pool[1:] or pool
    outputs = draw(
        st.lists(st.sampled_from(candidates), min_size=1, max_size=3, unique_by=lambda t: t.id)
    )
    given = draw(st.sampled_from(f.inputs))
    if draw(st.integers(0, 7)) == 0 and all(t.id != given.id for t in outputs):
        # An input returned as it is: the kernel returns a copy.
        outputs.append(given)
        built.steps.append("input returned")
    f.output(*outputs)
    return built


def _inputs(built: Built, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = []
    for shape, t in zip(built.shapes, built.fusion.inputs, strict=True):
        a = rng.normal(size=shape).astype(np.float32)
        if a.size:
            specials = rng.random(shape) < 0.2
            a[specials] = rng.choice(np.array(SPECIAL, dtype=np.float32), size=specials.sum())
        with np.errstate(over="ignore"):  # 1e12 is inf in f16
            arrays.append(a.astype(NUMPY_DTYPES[t.dtype]))
    return arrays


def _unit(f: tf.Fusion) -> float:
    """The unit roundoff results of ``f`` are judged at: the coarsest half
    dtype's among its tensors, 0 where all are f32 (or not floats)."""
    dtypes = {tf.Tensor(f, i).dtype for i in range(len(f))}
    return max((UNIT.get(d, 0.0) for d in dtypes), default=0.0)


def _scale(f: tf.Fusion, arrays: list[np.ndarray]) -> float:
    """The largest finite magnitude any tensor of ``f`` takes on
    ``arrays``: f32 sums lose what cancels at the magnitudes they sum (a
    cast saturates an infinity at 2**31, and -2**31 + (2**31 - 1) + 3 is 3
    or 0 by the order of the additions)."""
    every = tf.Fusion.from_json(f.to_json())
    returned = {t.id for t in every.outputs}
    rest = [tf.Tensor(every, i) for i in range(len(every)) if i not in returned]
    if rest:
        every.output(*rest)
    with np.errstate(all="ignore"):
        got = every.evaluate(*arrays)
    values = [np.asarray(v, dtype=np.float64) for v in (got if len(every.outputs) > 1 else [got])]
    finite = [np.abs(v[np.isfinite(v)]) for v in values]
    return max((float(v.max()) for v in finite if v.size), default=0.0)


def _nudged(arrays: list[np.ndarray], rng: np.random.Generator, unit: float) -> list[np.ndarray]:
    """``arrays`` with each finite nonzero element moved by at most one
    ulp, or by ``unit`` relative where that is larger (zeros, infinities
    and NaN are exact: moving them would judge away what ``1 / -0`` must
    give)."""
    out = []
    for a in arrays:
        step = rng.integers(-1, 2, size=a.shape) * (np.isfinite(a) & (a != 0))
        up, down = np.nextafter(a, a.dtype.type(np.inf)), np.nextafter(a, a.dtype.type(-np.inf))
        moved = np.where(step > 0, up, np.where(step < 0, down, a)).astype(a.dtype)
        if unit:
            wide = a.astype(np.float64)
            far = (wide * (1 + step * unit)).astype(a.dtype).astype(np.float64)
            with np.errstate(invalid="ignore"):
                farther = np.abs(far - wide) > np.abs(moved.astype(np.float64) - wide)
            moved = np.where(farther, far, moved).astype(a.dtype)
        out.append(moved)
    return out


def _nearby_results(f: tf.Fusion, arrays: list[np.ndarray], seed: int) -> list[Any]:
    """The reference on two copies of ``arrays`` moved by an ulp (or by
    the fusion's half precision, see ``_unit``)."""
    nudge = np.random.default_rng(seed)
    return [f.evaluate(*_nudged(arrays, nudge, _unit(f))) for _ in range(2)]


def _close(got: np.ndarray, want: np.ndarray, scale: float, unit: float = 0.0) -> np.ndarray:
    """Per element: NaN where ``want`` is, equal infinities, or finite
    values within the tolerance of ``scale`` or of the output's own
    (f32 sums lose what cancels: ``1e12 + 0.16 - 1e12`` is 0 in f32, 0.16
    in the f64 reference, so the error bound grows with the magnitudes
    summed). The tolerance is 1e-4, or four units of ``unit`` where a half
    is involved: an intermediate a device rounds the other way is one."""
    finite = np.isfinite(want)
    scale = max(scale, float(np.abs(want[finite]).max()) if finite.any() else 0.0)
    rtol = max(1e-4, 4 * unit)
    with np.errstate(invalid="ignore"):
        near = np.abs(got - want) <= rtol * np.abs(want) + rtol * max(scale, 1e-30)
    return np.where(finite, near & np.isfinite(got), (got == want) | np.isnan(got) & np.isnan(want))


def assert_matches_reference(
    got: Any, want: Any, scale: float, nearby: list[Any], unit: float = 0.0
) -> None:
    """``got`` is close to ``want`` (see ``_close``) wherever the result is
    well-conditioned in f32: where the reference on inputs one ulp away
    (``nearby``) is close to it too. Elsewhere f32 rounding alone decides
    (a sum that cancels to 0 in f32 makes ``x / sum`` infinite; the f64
    reference keeps a small finite sum) and any result is accepted."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    stable = np.ones(want.shape, dtype=bool)
    for other in nearby:
        stable &= _close(np.asarray(other, dtype=np.float64), want, scale, unit)
    bad = stable & ~_close(got, want, scale, unit)
    assert not bad.any(), (
        f"{bad.sum()} of {bad.size} elements differ from the reference, e.g. at "
        f"{np.argwhere(bad)[0].tolist()}: got {got[bad][0]!r}, want {want[bad][0]!r}"
    )


#: Seeds of the inputs.
SEEDS = st.integers(0, 2**32 - 1)


def fuzz_settings(cases: int) -> settings:
    """``cases`` examples, untimed; in CI, a fixed sequence of them."""
    return settings(
        max_examples=cases,
        deadline=None,
        derandomize=in_ci(),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def test_random_fusions_match_the_reference(device: tf.Device) -> None:
    @fuzz_settings(CASES)
    @given(built=fusions(), seed=SEEDS)
    def check(built: Built, seed: int) -> None:
        f = built.fusion
        note(f"{f}\nsteps {built.steps}")
        assume(judged_on(built, device))
        check_kernel(built, f.schedule(f.heuristics(device=device), device), seed)

    check()


def judged_on(built: Built, device: tf.Device) -> bool:
    """Whether ``device`` keeps what ``built`` is judged by: without float
    controls a GPU compiler may fold x - x to 0."""
    return not any(s.startswith("self") for s in built.steps) or preserves_nan(device)


def check_kernel(built: Built, kernel: tf.Kernel | tf.SegmentedKernel, seed: int) -> None:
    """``kernel`` of ``built.fusion`` gives the reference's results on the
    inputs of ``seed`` (see ``assert_matches_reference``)."""
    f = built.fusion
    arrays = _inputs(built, seed)
    with np.errstate(all="ignore"):
        want, nearby = f.evaluate(*arrays), _nearby_results(f, arrays, seed)
        got = kernel(*arrays)
    if len(f.outputs) == 1:
        got, want, nearby = (got,), (want,), [(n,) for n in nearby]
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        note(f"output {i}")
        scale, nearby_i = _scale(f, arrays), [n[i] for n in nearby]
        assert_matches_reference(g, w, scale, nearby_i, _unit(f))


def _arranged(draw: st.DrawFn, a: np.ndarray) -> np.ndarray:
    """``a``'s values in a layout drawn at random (one the call copies, or
    C order in place)."""
    layout = draw(st.sampled_from(["c", "fortran", "reversed", "strided", "read_only"]))
    if layout == "fortran" and a.ndim:  # (asfortranarray makes 0-d arrays 1-d)
        return np.asfortranarray(a)
    if layout == "reversed" and a.ndim:
        return a[::-1].copy()[::-1]
    if layout == "strided" and a.ndim:
        return np.repeat(a, 2, axis=-1)[..., ::2]
    b = a.copy()
    b.flags.writeable = layout != "read_only"
    return b


def _outs(draw: st.DrawFn, f: tf.Fusion, inputs: list[np.ndarray]) -> tuple[list[Any], bool]:
    """An ``out=`` entry per output: none, a new array, a view into a
    bigger one, or an input of the output's shape. Returns them and whether
    two of them share memory (which the call must refuse)."""
    outs: list[Any] = []
    taken: set[int] = set()
    shared = False
    for t in f.outputs:
        choice = draw(st.sampled_from(["none", "new", "view", "input"]))
        dtype = NUMPY_DTYPES[t.dtype]
        fits = [i for i, a in enumerate(inputs) if (a.shape, a.dtype) == (t.shape, dtype)]
        fits = [i for i in fits if inputs[i].flags.c_contiguous]
        fits = [i for i in fits if inputs[i].flags.writeable]
        if choice == "input" and fits:
            i = draw(st.sampled_from(fits))
            shared |= i in taken and inputs[i].size > 0  # empty arrays share no memory
            taken.add(i)
            outs.append(inputs[i])
        elif choice == "view":
            size = int(np.prod(t.shape))
            outs.append(np.full(size + 3, np.nan, dtype)[3:].reshape(t.shape))
        else:
            outs.append(np.full(t.shape, np.nan, dtype) if choice == "new" else None)
    return outs, shared


def test_random_calls_give_what_contiguous_inputs_give(device: tf.Device) -> None:
    """Inputs in any layout and ``out=`` arrays (aliasing inputs or not)
    give what the same kernel gives on fresh C-order arrays, bit for bit."""

    @fuzz_settings(max(1, CASES // 3))
    @given(built=fusions(), seed=SEEDS, data=st.data())
    def check(built: Built, seed: int, data: st.DataObject) -> None:
        f = built.fusion
        note(f"{f}\nsteps {built.steps}")
        k = f.schedule(f.heuristics(device=device), device)
        arrays = _inputs(built, seed)
        with np.errstate(all="ignore"):
            want = k(*(a.copy() for a in arrays))
        inputs = [_arranged(data.draw, a) for a in arrays]
        outs, shared = _outs(data.draw, f, inputs)
        note(f"inputs C-contiguous {[a.flags.c_contiguous for a in inputs]}, outs {outs}")
        if shared:
            with pytest.raises(tf.FusionError, match="overlaps out"):
                k(*inputs, out=tuple(outs))
            return
        got = k(*inputs, out=tuple(outs))
        got, want = (got, want) if len(f.outputs) > 1 else ((got,), (want,))
        for g, o, w in zip(got, outs, want, strict=True):
            assert o is None or g is o
            np.testing.assert_array_equal(g, w)

    check()


def _saved_documents() -> list[tuple[str, Any]]:
    """Fusion and params JSON as users save them: the workloads'."""
    docs: list[tuple[str, Any]] = []
    for name in ["chain", "softmax", "layernorm", "column_sum", "matmul", "attention"]:
        f = tf.workloads.get(name).fusion()
        docs.append(("fusion", json.loads(f.to_json())))
        params = f.heuristics(device=tf.Device.cpu())
        for p in params if isinstance(params, list) else [params]:
            docs.append(("params", json.loads(p.to_json())))
    return docs


SAVED = _saved_documents()


@fuzz_settings(CASES)
@given(data=st.data(), saved=st.sampled_from(SAVED))
def test_mangled_fusion_and_params_files_load_or_say_what_is_wrong(
    data: st.DataObject, saved: tuple[str, Any]
) -> None:
    """A saved fusion or params file with values replaced, removed or
    added: loading, scheduling and building either work or raise
    tilefuse's own errors (ValueErrors), never another exception."""
    kind, doc = saved
    text = json.dumps(data.draw(mutated(doc)))
    note(text)
    cpu = tf.Device.cpu()
    try:
        if kind == "fusion":
            f = tf.Fusion.from_json(text)
            f.schedule(f.heuristics(device=cpu), cpu)
        else:
            tf.HeuristicParams.from_json(text)
    except (tf.TilefuseError, ValueError):
        pass
