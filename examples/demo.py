"""The tilefuse tour: define fusions, check them against numpy, and work
with heuristic params as dicts, attributes and JSON.

Run with ``python examples/demo.py`` after ``pip install .``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np

import tilefuse as tf


def section(title: str) -> None:
    print(f"\n=== {title} " + "=" * max(0, 66 - len(title)))


def softmax_fusion(n: int) -> tf.Fusion:
    f = tf.Fusion()
    x = f.input((n, n), "f32", name="x")
    e = (x - x.max(axis=1, keepdims=True)).exp()
    f.output(e / e.sum(axis=1, keepdims=True))
    return f


def matmul_epilogue_fusion(m: int, k: int, n: int) -> tf.Fusion:
    f = tf.Fusion()
    a = f.input((m, k), "f32", name="a")
    b = f.input((k, n), "f32", name="b")
    bias = f.input((n,), "f32", name="bias")
    f.output((a @ b + bias).relu())
    return f


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    """The largest error relative to the largest magnitude, the rule
    tilefuse's own checks use: inputs are fresh random draws, and an
    absolute bound fails on the rare draw whose outputs are large."""
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def main() -> None:
    rng = np.random.default_rng()

    section("1. define a fusion")
    f = softmax_fusion(256)
    print(f)
    print("fingerprint:", f.fingerprint, "(stable across processes; names excluded)")
    same = tf.Fusion.from_json(f.to_json())
    print("JSON round trip equal:", same == f, f"({len(f.to_json())} bytes)")

    section("2. run the reference evaluator against numpy")
    rows = []
    x = rng.standard_normal((256, 256)).astype(np.float32)
    ref = np.exp(x - x.max(axis=1, keepdims=True).astype(np.float64))
    ref /= ref.sum(axis=1, keepdims=True)
    rows.append(("softmax 256x256", f.evaluate(x), ref))
    g = matmul_epilogue_fusion(64, 96, 48)
    a = rng.standard_normal((64, 96)).astype(np.float32)
    b = rng.standard_normal((96, 48)).astype(np.float32)
    bias = rng.standard_normal(48).astype(np.float32)
    rows.append(
        (
            "relu(a @ b + bias)",
            g.evaluate(a, b, bias),
            np.maximum(a.astype(np.float64) @ b + bias, 0),
        )
    )
    print(f"{'fusion':<22} {'max rel. error':>16}")
    for name, got, want in rows:
        err = relative_error(got, want)
        print(f"{name:<22} {err:>16.2e}")
        assert err < 1e-5

    section("3. heuristic params as dicts, attributes and JSON (seed 000)")
    seed_dict = {
        "tile_sizes": {
            "cta_tile": {"m": 128, "n": 128, "k": 32},
            "warp_tile": {"m": 64, "n": 64, "k": 32},
            "instruction_tile": {"m": 16, "n": 8, "k": 16},
        },
        "async_gmem_load_operands": False,
    }
    p = tf.MatmulParams.from_dict(seed_dict)
    p.tile_sizes.warp_tile.n = 32
    print("edited:", p.tile_sizes)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "matmul.json"
        path.write_text(p.to_json(indent=2))
        loaded = tf.HeuristicParams.from_json(path.read_text())
    print(f"saved and loaded back as {type(loaded).__name__}, equal: {loaded == p}")
    print(
        "partial dict ->", tf.MatmulParams(tile_sizes={"cta_tile": {"m": 64}}).tile_sizes.cta_tile
    )

    section("4. bad params name the field")
    for bad in (
        {"tile_sizes": {"cta_tile": {"m": "64"}}},
        {"tile_sizes": {"warp_tile": {"m": 48}}},
        {"supported_vec_size": {"a": 3}},
    ):
        try:
            tf.MatmulParams.from_dict(bad)
        except tf.ParamsError as err:
            print(f"  {json.dumps(bad):<48} -> {err}")

    section("5. the params space, from the Rust declarations")
    schema = tf.ReductionParams.json_schema()
    print(f"{'ReductionParams field':<36} {'type':<14} default")
    for name, field in schema["properties"].items():
        kind = field.get("type", field.get("$ref", "").rsplit("/", 1)[-1])
        print(f"  {name:<34} {kind!s:<14} {json.dumps(field.get('default'))}")

    section("6. schedule by hand and run on a device")
    f = softmax_fusion(1024)
    x = rng.standard_normal((1024, 1024)).astype(np.float32)
    want = f.evaluate(x)
    s = f.create_schedule()
    s.compute_inline_all()  # fold the pointwise ops into their readers
    *producers, out = s.get_blocks()
    row = s.get_loops(out)[0]
    for p_block in reversed(producers):  # compute each row's max and sum next to it
        s.compute_at(p_block, row)
    s.bind(row, "workgroup.x")
    print(s)
    devices = [tf.Device.cpu()]
    try:
        devices.append(tf.Device.gpu())
    except tf.DeviceError as err:
        print(f"(no GPU adapter: {err})")
    print(f"\n{'device':<40} {'max abs error':>14} {'median ms':>10}")
    for device in devices:
        kernel = s.build(device)
        err = float(np.max(np.abs(kernel(x) - want)))
        t = kernel.benchmark(x, warmup=2, repeat=10)
        print(f"{device.info['name'][:40]:<40} {err:>14.2e} {t.median * 1e3:>10.2f}")
        assert err < 1e-5
    print(f"\none WebGPU dispatch: {kernel.dispatch}")
    print("trace (replays on a fresh schedule):", len(json.loads(s.trace)), "primitives")

    section("7. automatic scheduling: heuristics -> edit -> schedule (seed 000)")
    g = tf.Fusion()
    a = g.input((2048, 1024), "f32", name="a")
    b = g.input((1024,), "f32", name="b")
    out = (a * b + 1.0).tanh() * 0.5 + (-a).exp()
    out.name = "y"
    g.output(out)
    xa = rng.standard_normal((2048, 1024)).astype(np.float32)
    xb = rng.standard_normal(1024).astype(np.float32)
    want = g.evaluate(xa, xb)
    print("schedulers:", g.schedulers())
    print(f"\n{'device':<34} {'params':<44} {'ms':>8}")
    for device in devices:
        params = g.heuristics(device=device)
        variants = [("default heuristic", params)]
        edited = params.copy()
        edited.break_point = 1
        edited.unroll_factor_inner = 2
        variants.append(("break_point=1, unroll_factor_inner=2", edited))
        for label, p in variants:
            kernel = g.schedule(p, device)
            assert relative_error(kernel(xa, xb), want) < 1e-5
            t = kernel.benchmark(xa, xb, warmup=2, repeat=7)
            print(f"{device.info['name'][:34]:<34} {label:<44} {t.median * 1e3:>8.2f}")

    section("8. reductions: persistent normalization kernels, edited params")
    n = 1024
    h = tf.Fusion()
    xh = h.input((n, n), "f32", name="x")
    c = xh - xh.mean(axis=1, keepdims=True)
    h.output(c * ((c * c).mean(axis=1, keepdims=True) + 1e-5).rsqrt())
    x = rng.standard_normal((n, n)).astype(np.float32)
    want = h.evaluate(x)
    print(f"{'device':<34} {'ReductionParams':<44} {'ms':>8}")
    for device in devices:
        params = h.heuristics(device=device)
        assert isinstance(params, tf.ReductionParams)
        edited = params.copy()
        edited.persistent_kernel = not params.persistent_kernel
        edited.project_persistent_buffers = not params.project_persistent_buffers
        for label, p in [("default heuristic", params), ("persistence flipped", edited)]:
            kernel = h.schedule(p, device)
            assert relative_error(kernel(x), want) < 1e-5
            t = kernel.benchmark(x, warmup=2, repeat=5)
            print(f"{device.info['name'][:34]:<34} {label:<44} {t.median * 1e3:>8.2f}")

    section("9. matmul + bias + relu: tiles from a dict, warp_tile by attribute")
    mm = matmul_epilogue_fusion(256, 256, 256)
    a = rng.standard_normal((256, 256)).astype(np.float32)
    b = rng.standard_normal((256, 256)).astype(np.float32)
    bias = rng.standard_normal(256).astype(np.float32)
    want = mm.evaluate(a, b, bias)
    print(f"{'device':<34} {'MatmulParams':<44} {'ms':>8}")
    for device in devices:
        default = mm.heuristics(device=device)
        tiled = tf.MatmulParams.from_dict(
            {
                "tile_sizes": {
                    "cta_tile": {"m": 32, "n": 32, "k": 16},
                    "warp_tile": {"m": 16, "n": 32, "k": 16},
                    "instruction_tile": {"m": 4, "n": 4, "k": 4},
                },
                # launch.workgroup_size is left out: derived from the tiles (8 x 8).
            }
        )
        tiled.tile_sizes.warp_tile.m = 32  # seed 000: edit, schedule, run
        for label, p in [("default heuristic", default), ("32x32 tiles of 4x4", tiled)]:
            kernel = mm.schedule(p, device)
            assert relative_error(kernel(a, b, bias), want) < 1e-5
            t = kernel.benchmark(a, b, bias, warmup=1, repeat=3)
            print(f"{device.info['name'][:34]:<34} {label:<44} {t.median * 1e3:>8.2f}")

    section("10. segmentation: a matmul followed by a softmax")
    sm = tf.Fusion()
    qa = sm.input((128, 64), "f32", name="q")
    ka = sm.input((64, 256), "f32", name="k")
    scores = qa @ ka
    e = (scores - scores.max(axis=1, keepdims=True)).exp()
    sm.output(e / e.sum(axis=1, keepdims=True))
    for seg in sm.segments():
        print(" ", seg)
    q = rng.standard_normal((128, 64)).astype(np.float32)
    k = rng.standard_normal((64, 256)).astype(np.float32)
    params = sm.heuristics(device=devices[-1])
    assert isinstance(params, list)
    print("one params object per segment:", [p.scheduler for p in params])
    got = sm.schedule(params, devices[-1])(q, k)
    print("max abs error:", float(np.max(np.abs(got - sm.evaluate(q, k)))))

    section("11. tuning: search the params space, keep the winner in the cache")
    # Row sums of 200 x 5000 on the CPU device: the default heuristic reads
    # one f32 a step, and the tuner finds wider steps 1.3-1.5x faster (a
    # quick tune takes about a second; `tilefuse tune row_sum --size
    # rows=200 --size cols=5000 --device cpu` from a shell).
    w = tf.workloads.get("row_sum", rows=200, cols=5000)
    cpu = tf.Device.cpu()
    r = tf.tune(w, cpu, effort="quick", seed=0)
    ok = sum(t.status == "ok" for t in r.trials)
    assert r.default_time is not None and r.speedup is not None
    print(
        f"{w.label} on {cpu.info['name']}: default {r.default_time * 1e3:.3f} ms, "
        f"tuned {r.best_time * 1e3:.3f} ms ({r.speedup:.2f}x, interleaved final rounds) "
        f"in {len(r.trials)} trials ({ok} ran), {r.elapsed:.1f} s"
    )
    # A candidate replaces the default's params only if it beat them in
    # the final interleaved rounds.
    print("  the winner changed:", r.changes or "nothing (the default heuristic won)")
    print("  heuristics() now gives:", w.payload.params_source(cpu))


if __name__ == "__main__":
    main()
