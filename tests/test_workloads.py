"""Workloads: the built-in library on both devices, complexity hand counts,
cached deterministic inputs, and what a plain fusion, function or JSON file
becomes."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

import tilefuse as tf
from conftest import ScaledReference, assert_close

# Small, odd sizes: every built-in, each option of the matmul.
SMALL: list[tuple[str, dict[str, Any]]] = [
    ("chain", {"rows": 7, "cols": 300}),
    ("softmax", {"rows": 33, "cols": 100}),
    ("log_softmax", {"rows": 33, "cols": 100}),
    ("layernorm", {"rows": 17, "cols": 96}),
    ("rmsnorm", {"rows": 17, "cols": 96}),
    ("row_sum", {"rows": 31, "cols": 70}),
    ("column_sum", {"rows": 31, "cols": 70}),
    ("matmul", {"m": 48, "n": 40, "k": 24}),
    ("matmul", {"m": 48, "n": 40, "k": 24, "epilogue": "bias_relu"}),
    ("matmul", {"m": 48, "n": 40, "k": 24, "epilogue": "bias_gelu", "transpose_b": True}),
    ("matmul", {"m": 20, "n": 36, "k": 24, "epilogue": "residual", "transpose_a": True}),
    ("matmul", {"m": 20, "n": 36, "k": 24, "epilogue": "gelu"}),
    ("batched_matmul", {"batch": 3, "m": 16, "n": 24, "k": 8, "epilogue": "relu"}),
    ("attention", {"seq": 40, "dim": 16}),
]


def test_names_lists_every_built_in_and_describe_names_the_sizes() -> None:
    assert set(tf.workloads.names()) == {name for name, _ in SMALL}
    assert "rows=4096" in tf.workloads.describe("softmax")
    with pytest.raises(ValueError, match="unknown workload 'sofmax'; built in: attention"):
        tf.workloads.get("sofmax")


@pytest.mark.parametrize(
    ("name", "sizes"), SMALL, ids=[f"{n}-{i}" for i, (n, _) in enumerate(SMALL)]
)
def test_every_built_in_executes_and_verifies_on_both_devices(
    name: str, sizes: dict[str, Any], device: tf.Device, rng: np.random.Generator
) -> None:
    w = tf.workloads.get(name, **sizes)
    seed = int(rng.integers(2**31))
    outs = tf.Engine(device).execute(w, seed=seed)
    (want,) = w.expected(seed)
    assert_close(outs[0], want, rtol=1e-4)
    # the numpy form computes the same thing (it is what speedups are over)
    assert_close(w.numpy(*w.inputs(seed)), want, rtol=1e-4)


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "layernorm", "rmsnorm", "row_sum"])
def test_thousands_of_short_rows_share_cpu_workgroups_and_verify(
    name: str, rng: np.random.Generator
) -> None:
    cpu = tf.Device.cpu()
    w = tf.workloads.get(name, rows=512 * cpu.info["cores"] + 3, cols=16)
    assert w.fusion().heuristics(device=cpu).launch.workgroup_size == (128, 1, 1)
    seed = int(rng.integers(2**31))
    (want,) = w.expected(seed)
    assert_close(tf.Engine(cpu).execute(w, seed=seed)[0], want, rtol=1e-4)


def test_complexity_matches_hand_counts() -> None:
    m, n, k = 64, 48, 32
    mm = tf.workloads.get("matmul", m=m, n=n, k=k, epilogue="bias_relu").complexity()
    assert mm == tf.Complexity(2 * m * n * k + 2 * m * n, 4 * (m * k + k * n + n), 4 * m * n)
    rows, cols = 8, 128
    sm = tf.workloads.get("softmax", rows=rows, cols=cols).complexity()
    # max, subtract, exp, sum, divide
    assert sm == tf.Complexity(5 * rows * cols, 4 * rows * cols, 4 * rows * cols)
    ch = tf.workloads.get("chain", rows=rows, cols=cols).complexity()
    # a*b, +1, tanh, *0.5, -a, exp, +
    assert ch == tf.Complexity(7 * rows * cols, 8 * rows * cols, 4 * rows * cols)
    assert ch.bytes == 12 * rows * cols and ch.intensity == pytest.approx(7 / 12)
    assert ch.gflops(1e-3) == pytest.approx(7 * rows * cols / 1e-3 / 1e9)
    bmm = tf.workloads.get("batched_matmul", batch=3, m=4, n=5, k=6).complexity()
    assert bmm.flops == 2 * 3 * 4 * 5 * 6


def test_inputs_are_cached_deterministic_read_only_and_random() -> None:
    w = tf.workloads.get("layernorm", rows=16, cols=64)
    a = w.inputs(seed=3)
    assert a is w.inputs(seed=3)
    again = tf.workloads.get("layernorm", rows=16, cols=64).inputs(seed=3)
    assert all(np.array_equal(x, y) for x, y in zip(a, again, strict=True))
    assert not np.array_equal(a[0], w.inputs(seed=4)[0])
    assert [x.shape for x in a] == [(16, 64), (64,), (64,)]
    assert all(x.dtype == np.float32 and not x.flags.writeable for x in a)
    assert all(np.count_nonzero(x) == x.size and np.abs(x).max() <= 1 for x in a)
    assert w.expected(seed=3) is w.expected(seed=3)


def test_sizes_are_checked_and_make_the_key() -> None:
    w = tf.workloads.get("softmax", rows=8)
    assert w.sizes == {"rows": 8, "cols": 4096, "dtype": "f32"}
    # The dtype joined the sizes after keys were in use: named where it is
    # not f32 only, so that keys made before still match.
    assert w.key == "softmax(cols=4096,rows=8)"
    assert w.key == tf.workloads.get("softmax", cols=4096, rows=8).key
    assert tf.workloads.get("softmax", rows=8, dtype="bf16").key == (
        "softmax(cols=4096,dtype=bf16,rows=8)"
    )
    with pytest.raises(
        TypeError, match=r"workload softmax: unknown size 'row' \(sizes: rows, cols, dtype\)"
    ):
        tf.workloads.get("softmax", row=8)
    with pytest.raises(TypeError, match=r"size rows must be an integer, got 8\.5"):
        tf.workloads.get("softmax", rows=8.5)
    with pytest.raises(ValueError, match="size cols must be positive, got 0"):
        tf.workloads.get("softmax", cols=0)
    with pytest.raises(ValueError, match="epilogue must be one of none, bias"):
        tf.workloads.get("matmul", epilogue="swish")


def _scaled(n: int = 64) -> tf.Fusion:
    f = tf.Fusion()
    x = f.input((n,), name="x")
    f.output(x * 3 + 1)
    return f


def test_a_fusion_a_function_and_a_json_file_work_as_workloads(tmp_path: Path) -> None:
    path = tmp_path / "scaled.json"
    path.write_text(_scaled().to_json())
    engine = tf.Engine(tf.Device.cpu())
    for obj in (_scaled(), _scaled, path, str(path)):
        w = tf.as_workload(obj)
        assert w.key.startswith(("fusion@", "_scaled@", "scaled@"))
        assert w.key.endswith(_scaled().fingerprint[:16])
        (out,) = engine.execute(obj)
        assert_close(out, w.inputs()[0].astype(np.float64) * 3 + 1)
    assert tf.as_workload(_scaled, n=8).payload.inputs[0].shape == (8,)
    with pytest.raises(TypeError, match="expected a Workload, a Fusion"):
        tf.as_workload(42)
    with pytest.raises(TypeError, match="returned int, not a Fusion"):
        tf.as_workload(lambda: 1)
    named = tf.as_workload("softmax", rows=8, cols=16)
    assert named.key == tf.workloads.get("softmax", rows=8, cols=16).key
    with pytest.raises(FileNotFoundError, match="nor a built-in workload of that name"):
        tf.as_workload("softmaxx")


class _Positive(tf.Workload):
    """Only ``fusion()`` is required; inputs with a domain override
    ``make_inputs``."""

    name = "log_of_positive"
    defaults: ClassVar[dict[str, tf.workload.Size]] = {"n": 32}

    def fusion(self) -> tf.Fusion:
        f = tf.Fusion()
        f.output(f.input((self.sizes["n"],), name="x").log())
        return f

    def make_inputs(self, rng: np.random.Generator) -> list[np.ndarray]:
        return [rng.uniform(0.5, 2.0, self.sizes["n"]).astype(np.float32)]


def test_a_user_workload_needs_only_its_fusion_and_may_override_the_rest() -> None:
    w = _Positive(n=40)
    assert w.key == "log_of_positive(n=40)" and not w.has_numpy
    assert w.inputs()[0].min() >= 0.5
    (out,) = tf.Engine(tf.Device.cpu()).execute(w)
    assert_close(out, np.log(w.inputs()[0].astype(np.float64)))
    with pytest.raises(NotImplementedError, match="no numpy form"):
        w.numpy(*w.inputs())
    with pytest.raises(NotImplementedError, match="defines no fusion"):
        _ = tf.Workload().payload


def test_tolerance_rule_is_the_tuners() -> None:
    tol = tf.Tolerance(rtol=1e-3)
    want = [np.array([1.0, 100.0, np.nan, np.inf, 0.0], np.float32)]
    ok = tf.workload.compare_outputs(
        [np.array([1.05, 100.0, np.nan, np.inf, 0.09], np.float32)], want, tol
    )
    # 0.09 off a zero is within 1e-3 * (scale 100 + 0)
    assert ok.passed and ok.mismatch is None
    assert ok.max_abs_error == pytest.approx(0.09, rel=1e-6)
    assert ok.max_rel_error == pytest.approx(0.09 / 100, rel=1e-6)
    bad = tf.workload.compare_outputs(
        [np.array([1.0, 100.0, 0.0, np.inf, 0.0], np.float32)], want, tol
    )
    assert (
        not bad.passed
        and bad.mismatch == "output 0 at (2,): got np.float32(0.0), want np.float32(nan)"
    )
    ints = tf.workload.compare_outputs([np.array([1, 2])], [np.array([1, 3])], tol)
    assert not ints.passed and ints.max_abs_error == 1


def test_tune_takes_a_workload() -> None:
    w = tf.workloads.get("row_sum", rows=8, cols=64)
    r = tf.tune(w, tf.Device.cpu(), trials=2, seed=0, cache=False, progress=False)
    assert isinstance(r.best_params, tf.HeuristicParams)
    (got,) = tf.Engine(tf.Device.cpu()).execute(w, r.best_params)
    np.testing.assert_allclose(got, w.expected()[0], rtol=1e-5, atol=1e-5)


def test_the_tuner_runs_candidates_on_the_workloads_inputs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    w = tf.workloads.get("attention", seq=16, dim=8)
    fed: list[tuple[np.ndarray, ...]] = []
    native_tune = tf._native.tune

    def spy(*args: Any) -> dict[str, Any]:
        fed.append(args[6])  # fusion, device, options, observe, seeders, builtin, inputs
        return native_tune(*args)

    monkeypatch.setattr(tf._native, "tune", spy)
    tf.tune(w, tf.Device.cpu(), trials=1, seed=5, cache=False, progress=False)
    q, k, v = w.inputs(5)
    segments = w.payload.segments()
    assert [len(f) for f in fed] == [len(s.inputs) for s in segments] == [2, 1, 2]
    assert fed[0][0] is q and fed[0][1] is k  # the cached arrays, not copies
    scores = q.astype(np.float64) @ k.astype(np.float64).T / np.sqrt(8)
    assert_close(fed[1][0], scores)  # the reference's value of what feeds it
    assert fed[2][1] is v


def test_inputs_a_workload_gets_wrong_are_named() -> None:
    class Wrong(tf.Workload):
        name = "wrong"

        def fusion(self) -> tf.Fusion:
            f = tf.Fusion()
            x = f.input((4, 8), "f32", name="x")
            f.output(x.exp())
            return f

        def make_inputs(self, rng: np.random.Generator) -> list[np.ndarray]:
            return [np.ones((4, 9), np.float32)]

    wrong = r"input 0 \(x\): expected f32\[4, 8\], got f32\[4, 9\]"
    with pytest.raises(tf.FusionError, match=wrong):
        tf.tune(Wrong(), tf.Device.cpu(), trials=1, cache=False, progress=False)


def test_the_tuner_checks_against_the_workloads_reference_and_tolerance(
    device: tf.Device,
) -> None:
    kw: dict[str, Any] = {"trials": 2, "seed": 1, "cache": False, "progress": False}
    close = ScaledReference(off=1e-4, rtol=1e-3)
    r = tf.tune(close, device, **kw)
    assert {t.status for t in r.trials} <= {"ok", "cut", "duplicate"}
    assert tf.Engine(device).verify(close, r.best_params, seed=1).passed
    assert close.calls == 1  # one reference per seed, shared with the engine
    # The same outputs fail a tighter tolerance, and a reference that is
    # wrong fails every candidate although the evaluator's would pass.
    for wrong in (ScaledReference(off=1e-4, rtol=1e-6), ScaledReference(off=0.5, rtol=1e-3)):
        with pytest.raises(tf.ParamsError, match="no candidate ran correctly"):
            tf.tune(wrong, device, **kw)


def test_a_segmented_workload_s_outputs_are_checked_against_its_reference() -> None:
    base = type(tf.workloads.get("attention", seq=16, dim=8))

    class Doubled(base):  # type: ignore[misc, valid-type]
        def reference(self, *inputs: np.ndarray) -> Any:
            return super().reference(*inputs) * 2

    with pytest.raises(tf.ParamsError, match="no candidate ran correctly"):
        tf.tune(Doubled(seq=16, dim=8), tf.Device.cpu(), trials=1, cache=False, progress=False)
