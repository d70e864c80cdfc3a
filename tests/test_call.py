"""The call a user makes (issue 12): inputs read where numpy keeps them
whatever their layout, results written into ``out=`` arrays, aliasing,
concurrent callers, and kernels reused across calls."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import numpy as np
import pytest
from test_schedulers import FAMILIES, check, softmax

import tilefuse as tf
from conftest import assert_close

f32 = np.float32


def chain() -> tuple[tf.Fusion, Any]:
    f = tf.Fusion()
    a = f.input((64, 96), "f32", name="a")
    b = f.input((64, 96), "f32", name="b")
    f.output((a * b + 1.0).tanh() * 0.5 + (-a).exp())

    def want(x: Any, y: Any) -> Any:
        x, y = x.astype(np.float64), y.astype(np.float64)
        return np.tanh(x * y + 1) * 0.5 + np.exp(-x)

    return f, want


def mixed_dtypes() -> tuple[tf.Fusion, list[Any], tuple[Any, ...]]:
    """Outputs of every dtype, from inputs of every dtype."""
    rng = np.random.default_rng(5)
    f = tf.Fusion()
    x = f.input((7, 33), "f32", name="x")
    i = f.input((7, 33), "i32", name="i")
    u = f.input((33,), "u32", name="u")
    m = f.input((7, 33), "bool", name="m")
    f.output(tf.where(m, x, -x), i * 3 - 1, u + 7, x > 0.0)
    xa = rng.standard_normal((7, 33)).astype(f32)
    ia = rng.integers(-1000, 1000, (7, 33), dtype=np.int32)
    ua = rng.integers(0, 1000, 33, dtype=np.uint32)
    ma = rng.random((7, 33)) < 0.5
    want = (np.where(ma, xa, -xa), ia * 3 - 1, ua + np.uint32(7), xa > 0)
    return f, [xa, ia, ua, ma], want


def poisoned(like: Any) -> Any:
    """An array of ``like``'s shape and dtype holding values no kernel
    writes by accident."""
    a = np.empty_like(like)
    a.view(np.uint8)[...] = 0xA5 if a.dtype != np.bool_ else 1
    if a.dtype == f32:
        a[...] = np.nan
    return a


@pytest.mark.parametrize("family", FAMILIES)
def test_out_arrays_receive_every_family(
    family: str, device: tf.Device, rng: np.random.Generator
) -> None:
    # Poisoned `out` arrays: a kernel that read an output element before
    # writing it would show here (outputs are uninitialized numpy arrays).
    build, _ = FAMILIES[family]
    f, inputs, want = build(rng)
    k = f.schedule(f.heuristics(device=device), device)
    wants = want if isinstance(want, tuple) else (want,)
    out = tuple(poisoned(np.asarray(w, dtype=f32)) for w in wants)
    got = k(*inputs, out=out if len(out) > 1 else out[0])
    got = got if isinstance(got, tuple) else (got,)
    assert all(g is o for g, o in zip(got, out, strict=True))
    check(got if len(got) > 1 else got[0], want)


def test_out_arrays_of_every_dtype(device: tf.Device) -> None:
    f, inputs, want = mixed_dtypes()
    k = f.schedule(f.heuristics(device=device), device)
    out = tuple(poisoned(np.asarray(w)) for w in want)
    got = k(*inputs, out=out)
    for g, o, w in zip(got, out, want, strict=True):
        assert g is o
        np.testing.assert_array_equal(g, w)
    # `None` entries get new arrays.
    got = k(*inputs, out=(None, out[1], None, None))
    assert got[1] is out[1] and got[0] is not out[0]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


LAYOUTS = {
    "fortran": lambda a: np.asfortranarray(a),
    "strided": lambda a: np.repeat(a, 2, axis=1)[:, ::2],
    "negative_strides": lambda a: a[::-1, ::-1].copy()[::-1, ::-1],
    "read_only": lambda a: _read_only(a),
    "misaligned": lambda a: _misaligned(a),
    "a_view_of_a_bigger_array": lambda a: np.pad(a, 3)[3:-3, 3:-3],
}


def _read_only(a: Any) -> Any:
    a = a.copy()
    a.flags.writeable = False
    return a


def _misaligned(a: Any) -> Any:
    buf = np.zeros(a.nbytes + 1, np.uint8)
    m = buf[1:].view(a.dtype).reshape(a.shape)
    m[...] = a
    assert not m.flags.aligned
    return m


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_layout_gives_the_same_result(
    layout: str, device: tf.Device, rng: np.random.Generator
) -> None:
    f, want = chain()
    x = rng.standard_normal((64, 96)).astype(f32)
    y = rng.standard_normal((64, 96)).astype(f32)
    k = f.schedule(f.heuristics(device=device), device)
    arranged = LAYOUTS[layout](x)
    np.testing.assert_array_equal(arranged, x)
    assert_close(k(arranged, LAYOUTS[layout](y)), want(x, y))
    assert_close(k(arranged, y), want(x, y))
    sf, [s], s_want = softmax(rng, (24, 40))
    sk = sf.schedule(sf.heuristics(device=device), device)
    assert_close(sk(LAYOUTS[layout](s)), s_want)


def test_bool_inputs_of_any_byte_are_read_as_true(device: tf.Device) -> None:
    f = tf.Fusion()
    m = f.input((4,), "bool")
    f.output(tf.where(m, f.constant(1.0), f.constant(0.0)))
    k = f.schedule(f.heuristics(device=device), device)
    bytes_ = np.array([0, 1, 2, 255], np.uint8)
    np.testing.assert_array_equal(k(bytes_.view(np.bool_)), [0.0, 1.0, 1.0, 1.0])
    # Strided bool views are copied once, still normalized.
    wide = np.array([0, 9, 7, 9, 0, 9, 3, 9], np.uint8).view(np.bool_)[::2]
    np.testing.assert_array_equal(k(wide), [0.0, 1.0, 0.0, 1.0])


BAD_OUT = {
    "shape": (
        lambda: np.empty((64, 95), f32),
        r"out 0 .*f32\[64, 96\], got an array of float32\[64, 95\]",
    ),
    "dtype": (lambda: np.empty((64, 96), np.float64), r"out 0 .*got an array of float64"),
    "strided": (lambda: np.empty((64, 192), f32)[:, ::2], "not C-contiguous"),
    "fortran": (lambda: np.asfortranarray(np.empty((64, 96), f32)), "not C-contiguous"),
    "read_only": (lambda: _read_only(np.empty((64, 96), f32)), "read-only"),
    "not_an_array": (lambda: [[0.0] * 96] * 64, "got list"),
    "count": (lambda: (np.empty((64, 96), f32),) * 2, "has 1 outputs, got 2 arrays"),
}


@pytest.mark.parametrize("problem", BAD_OUT)
def test_a_bad_out_is_a_clear_error(problem: str, device: tf.Device) -> None:
    f, _ = chain()
    k = f.schedule(f.heuristics(device=device), device)
    x = np.ones((64, 96), f32)
    make, message = BAD_OUT[problem]
    with pytest.raises(tf.FusionError, match=message):
        k(x, x, out=make())


def test_an_out_that_aliases_an_input_gets_the_right_result(
    device: tf.Device, rng: np.random.Generator
) -> None:
    f, want = chain()
    k = f.schedule(f.heuristics(device=device), device)
    x = rng.standard_normal((64, 96)).astype(f32)
    y = rng.standard_normal((64, 96)).astype(f32)
    expected = want(x, y)
    assert k(x, y, out=x) is x
    assert_close(x, expected)
    # A row-wise reduction reads a whole row before writing any of it.
    sf, [s], s_want = softmax(rng, (24, 40))
    sk = sf.schedule(sf.heuristics(device=device), device)
    assert sk(s, out=s) is s
    assert_close(s, s_want)
    # Overlapping, not identical: the output starts one row into the input.
    big = rng.standard_normal((25, 40)).astype(f32)
    ref = _softmax_rows(big[:24])
    sk(big[:24], out=big[1:])
    assert_close(big[1:], ref)


def test_outs_that_overlap_each_other_are_a_clear_error(device: tf.Device) -> None:
    f = tf.Fusion()
    x = f.input((8, 16), "f32", name="x")
    f.output(x * 2.0, x + 1.0)
    k = f.schedule(f.heuristics(device=device), device)
    a = np.ones((8, 16), f32)
    big = np.empty((9, 16), f32)
    for out in [(a, a), (big[:8], big[1:]), (np.empty_like(a),) * 2]:
        with pytest.raises(tf.FusionError, match=r"out 1 \(t4\) overlaps out 0 \(t2\)"):
            k(a, out=out)
    # Empty arrays share no memory, also with an input they are.
    e = np.ones((0, 16), f32)
    ef = tf.Fusion()
    ex = ef.input((0, 16), "f32")
    ef.output(-ex, ex + 1.0)
    got = ef.schedule(ef.heuristics(device=device), device)(e, out=(e, e))
    assert got[0] is e and got[1] is e
    # Side by side in one array is fine.
    both = np.empty((2, 8, 16), f32)
    k(a, out=(both[0], both[1]))
    np.testing.assert_array_equal(both, [a * 2, a + 1])


def _softmax_rows(x: Any) -> Any:
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_segmented_kernels_take_out_arrays(device: tf.Device, rng: np.random.Generator) -> None:
    build, _ = FAMILIES["matmul_softmax"]
    f, inputs, want = build(rng)
    k = f.schedule(f.heuristics(device=device), device)
    assert isinstance(k, tf.SegmentedKernel)
    out = poisoned(np.asarray(want, dtype=f32))
    assert k(*inputs, out=out) is out
    assert_close(out, want)
    with pytest.raises(tf.FusionError, match="has 1 outputs, got 2 arrays"):
        k(*inputs, out=(out, out))
    with pytest.raises(tf.FusionError, match=f"takes {len(inputs)} inputs, got 1"):
        k(inputs[0])


def test_a_segmented_out_array_that_is_an_input_a_later_segment_reads(
    device: tf.Device, rng: np.random.Generator
) -> None:
    """The matmul's result goes to ``c``, which the next segment still
    reads: it is copied in after every segment ran (the CPU device wrote
    it in place first, and the max read the product for ``c``)."""
    f = tf.Fusion()
    a, b, c = f.input((8, 5), "f32"), f.input((5, 6), "f32"), f.input((8, 6), "f32")
    y = a @ b
    f.output(y, (y + c).max(axis=1))
    k = f.schedule(device=device)
    assert isinstance(k, tf.SegmentedKernel)
    xa, xb, xc = (rng.standard_normal(s).astype(f32) for s in [(8, 5), (5, 6), (8, 6)])
    want_y = xa.astype(np.float64) @ xb
    want_max = (want_y + xc).max(axis=1)
    got_y, got_max = k(xa, xb, xc, out=(xc, None))
    assert got_y is xc
    assert_close(got_y, want_y)
    assert_close(got_max, want_max)


def cpu_softmax_with_temporaries(shape: tuple[int, int]) -> tf.Kernel:
    """Softmax whose exponentials live in a global temporary (the CPU
    arena's job), rows in parallel."""
    f = tf.Fusion()
    x = f.input(shape, "f32", name="x")
    e = (x - x.max(axis=1, keepdims=True)).exp()
    e.name = "e"
    f.output(e / e.sum(axis=1, keepdims=True))
    s = tf.Schedule(f)
    s.compute_inline_all(keep=["e"])
    for b in s.get_blocks():
        s.parallel(s.get_loops(b)[0])
    k = s.build(tf.Device.cpu())
    assert any(b["role"] == "temp" for b in k.bindings), k.bindings
    return k


def test_temporaries_are_reused_across_calls(rng: np.random.Generator) -> None:
    k = cpu_softmax_with_temporaries((16, 300))
    for scale in (1.0, 50.0, 0.01):
        x = (rng.standard_normal((16, 300)) * scale).astype(f32)
        assert_close(k(x), _softmax_rows(x))


def test_many_threads_call_one_kernel(device: tf.Device, rng: np.random.Generator) -> None:
    kernels = [chain()[0].schedule(chain()[0].heuristics(device=device), device)]
    if not device.is_gpu:
        kernels.append(cpu_softmax_with_temporaries((64, 96)))
    inputs = [rng.standard_normal((64, 96)).astype(f32) for _ in range(16)]
    failures: list[str] = []

    def work(t: int) -> None:
        for i in range(10):
            x, y = inputs[(t + i) % 16], inputs[(t + 2 * i + 1) % 16]
            try:
                assert_close(kernels[0](x, y), chain()[1](x, y))
                if len(kernels) > 1:
                    assert_close(kernels[1](x), _softmax_rows(x))
            except AssertionError as e:
                failures.append(f"thread {t} call {i}: {e}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[0]


def test_large_outputs_recycle_the_memory_of_freed_ones(
    device: tf.Device, rng: np.random.Generator
) -> None:
    # A fresh output of megabytes is page faults on first touch: a freed
    # large output's memory serves the next call, and only once it is free.
    f = tf.Fusion()
    a = f.input((512, 1024), "f32")
    f.output((a * 0.5).exp())
    k = f.schedule(f.heuristics(device=device), device)
    x = rng.standard_normal((512, 1024)).astype(f32)
    first = k(x)
    address = first.ctypes.data
    second = k(x)
    assert second.ctypes.data != address
    view = first[1:]
    del first
    assert k(x).ctypes.data != address, "a view still holds it"
    del view
    again = k(2 * x)
    assert again.ctypes.data == address
    assert again.flags.c_contiguous and again.flags.writeable and again.flags.aligned
    assert_close(again, np.exp(x.astype(np.float64)))
    assert_close(second, np.exp(0.5 * x.astype(np.float64)))


def test_outputs_streamed_past_the_caches_are_right(rng: np.random.Generator) -> None:
    # The CPU stores outputs of 2^23 elements or more that the kernel never
    # reads with non-temporal stores, in tiles on the output's cache lines
    # (cpu/stream.rs): into a fresh array, a recycled one, an `out=` array
    # that starts mid-line, and the input itself.
    cpu = tf.Device.cpu()
    f, [x], want = softmax(rng, (2048, 4096))
    k = f.schedule(f.heuristics(device=cpu), cpu)
    assert_close(k(x), want)
    assert_close(k(x), want)
    backing = np.empty(x.size + 5, f32)
    out = backing[5:].reshape(x.shape)
    out[...] = np.nan
    assert k(x, out=out) is out
    assert_close(out, want)
    assert k(x, out=x) is x
    assert_close(x, want)


def test_contiguous_inputs_are_not_copied() -> None:
    # Peak memory of a call on a 256 MB input, in a process of its own:
    # borrowed where it lies (plus the `out` array the caller made) vs one
    # copy for a Fortran-order input.
    code = r"""
        import re, numpy as np, tilefuse as tf
        n = 64 << 20
        f = tf.Fusion(); a = f.input((8192, n // 8192), "f32"); f.output(a * 2.0)
        cpu = tf.Device.cpu()
        k = f.schedule(f.heuristics(device=cpu), cpu)
        x = np.ones((8192, n // 8192), np.float32); out = np.empty_like(x); out[...] = 0
        xf = np.asfortranarray(x)
        k(x, out=out)
        # VmHWM, not ru_maxrss: the latter keeps the parent's peak across
        # fork and exec, so after a memory-hungry test it never grew here.
        hwm = lambda: re.search(r"VmHWM:\s+(\d+)", open("/proc/self/status").read())
        peak = lambda: int(hwm().group(1)) << 10
        before = peak(); k(x, out=out); borrowed = peak() - before
        k(xf, out=out); copied = peak() - before - borrowed
        assert (out == 2).all()
        print(borrowed >> 20, copied >> 20)
        """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    borrowed, copied = map(int, result.stdout.split())
    assert borrowed < 32, f"a contiguous input grew the peak by {borrowed} MB"
    assert 200 <= copied < 400, f"a Fortran-order input grew the peak by {copied} MB"


COLUMN_SHAPES = [(300, 2048), (37, 1000), (1, 7), (5, 1), (0, 5), (3, 40, 6)]


@pytest.mark.parametrize("op", ["sum", "max", "min", "mean"])
@pytest.mark.parametrize("shape", COLUMN_SHAPES, ids=str)
def test_column_reductions_keep_their_semantics(
    op: str, shape: tuple[int, ...], device: tf.Device, rng: np.random.Generator
) -> None:
    # Outer reductions run row by row over blocks of columns on the CPU;
    # NaN, infinities and signed zeros among fresh random values.
    f = tf.Fusion()
    x = f.input(shape, "f32", name="x")
    f.output(getattr(x, op)(axis=0))
    a = rng.standard_normal(shape).astype(f32)
    flat = a.reshape(-1)
    picks = rng.choice(flat.size, size=min(flat.size, 12), replace=False)
    flat[picks] = rng.choice(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], f32), size=picks.size)
    got = f.schedule(f.heuristics(device=device), device)(a)
    want = f.evaluate(a)
    if op in ("max", "min"):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    else:
        # f32 sums of up to 300 terms of size ~1, against float64.
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * max(shape[0], 1))


def test_a_gpu_sequence_checks_its_wiring(gpu: tf.Device, rng: np.random.Generator) -> None:
    build, _ = FAMILIES["matmul_softmax"]
    f, inputs, want = build(rng)
    k = f.schedule(f.heuristics(device=gpu), gpu)
    assert isinstance(k, tf.SegmentedKernel)
    first = k.segments[0]
    natives = [kernel._native for kernel in k.kernels]
    wiring = [([t.id for t in s.inputs], [t.id for t in s.outputs]) for s in k.segments]
    results = [t.id for t in k.outputs]
    seq = tf._native.KernelSequence(f._native, natives, wiring, results)
    assert_close(seq.run(*inputs)[0], want)
    with pytest.raises(tf.FusionError, match="which no earlier segment writes"):
        tf._native.KernelSequence(f._native, natives[::-1], wiring[::-1], results)
    with pytest.raises(tf.FusionError, match="has 2 inputs, the wiring 1"):
        tf._native.KernelSequence(f._native, natives, [wiring[1], wiring[0]], results)
    swapped = ([wiring[0][0][1], wiring[0][0][0]], wiring[0][1])
    with pytest.raises(tf.FusionError, match="does not match its kernel's"):
        tf._native.KernelSequence(f._native, natives, [swapped, wiring[1]], results)
    cpu_kernel = first.fusion.schedule(
        first.fusion.heuristics(device=tf.Device.cpu()), tf.Device.cpu()
    )
    with pytest.raises(tf.FusionError, match="not built for the same GPU"):
        tf._native.KernelSequence(f._native, [natives[0], cpu_kernel._native], wiring, results)


@pytest.mark.parametrize("op", ["sum", "max"])
def test_column_reductions_of_expressions(
    op: str, device: tf.Device, rng: np.random.Generator
) -> None:
    # The reduced value is an expression: a load that moves with the rows
    # and one that does not (a bias broadcast down the rows).
    f = tf.Fusion()
    x = f.input((257, 300), "f32", name="x")
    bias = f.input((300,), "f32", name="bias")
    f.output(getattr((x * 2.0 + bias).tanh(), op)(axis=0))
    a = rng.standard_normal((257, 300)).astype(f32)
    b = rng.standard_normal(300).astype(f32)
    got = f.schedule(device=device)(a, b)
    assert_close(got, f.evaluate(a, b))


def test_the_gil_is_released_while_a_kernel_runs(device: tf.Device) -> None:
    # Python keeps running in this thread while another one's calls are
    # native. Held, the GIL would let this loop run only until the worker
    # takes it (a 5 ms switch interval) of the calls' ~100 ms.
    f = tf.Fusion()
    x = f.input((1 << 20,), "f32")
    y = x
    for _ in range(60):
        y = (y * 1.0001).tanh()
    f.output(y)
    k = f.schedule(device=device)
    a = np.ones(1 << 20, f32)
    k(a)

    def loop_rate(seconds: float) -> float:
        steps, end = 0, time.perf_counter() + seconds
        while time.perf_counter() < end:
            steps += 1
        return steps / seconds

    rate = loop_rate(0.02)
    done = threading.Event()
    worker = threading.Thread(target=lambda: ([k(a) for _ in range(4)], done.set()))
    steps, start = 0, time.perf_counter()
    worker.start()
    while not done.is_set():
        time.perf_counter()  # the same work per step as in loop_rate
        steps += 1
    elapsed = time.perf_counter() - start
    worker.join()
    # The kernel's threads share the cores with this one: a fraction of
    # the rate, far above what a held GIL would leave.
    assert steps > 0.1 * rate * elapsed, (steps, rate, elapsed)
