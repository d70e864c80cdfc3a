"""Where a GPU call's time goes: the chain's call ``k(a, b)``, with
``out=``, and its kernel alone, beside what the host's copies could cost
(``np.copyto`` of 64 MB on 1 to 16 threads, into touched and into fresh
memory) and, where torch has CUDA, its transfers (pinned and pageable) and
its own round trip of the same chain from numpy arrays.

    python benches/gpu_call.py [--rows 4096 1024] [--cols 4096]

The call copies its inputs into mapped buffers and its outputs back on the
CPU device's threads (``TILEFUSE_NUM_THREADS``); run it with
``TILEFUSE_NUM_THREADS=1`` to see those copies on one thread.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import statistics
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

import tilefuse as tf
from tilefuse.timing import Budget, call_sampler, measure

BUDGET = Budget(warmup=0.2, rep=0.5)

Arr = np.ndarray[Any, Any]


def ms(fn: Callable[[], Any]) -> float:
    return statistics.median(measure(call_sampler(fn), BUDGET)) * 1e3


def chain_call(gpu: tf.Device, rows: int, cols: int) -> None:
    w = tf.workloads.get("chain", rows=rows, cols=cols)
    f, ins = w.payload, list(w.inputs())
    k = f.schedule(f.heuristics(device=gpu, cache=False), gpu)
    got = k(*ins)
    np.testing.assert_allclose(got, w.expected()[0], rtol=1e-4, atol=1e-5)
    out = np.empty_like(got)
    moved = sum(x.nbytes for x in ins) + got.nbytes
    kernel = k.benchmark(*ins, warmup=5, repeat=30).median * 1e3
    print(
        f"chain {rows} x {cols} ({moved / 1e6:.0f} MB moved): call {ms(lambda: k(*ins)):.2f} ms, "
        f"out= {ms(lambda: k(*ins, out=out)):.2f} ms, kernel {kernel:.3f} ms"
    )


def split_copy(pool: ThreadPoolExecutor, threads: int, src: Arr, dst: Arr) -> None:
    """``dst[:] = src`` in ``threads`` equal pieces on ``pool``."""
    cut = [len(src) * i // threads for i in range(threads + 1)]
    pieces = [(dst[lo:hi], src[lo:hi]) for lo, hi in itertools.pairwise(cut)]
    list(pool.map(lambda p: np.copyto(*p), pieces))


def host_copies(n: int = 1 << 24) -> None:
    src = np.random.rand(n).astype(np.float32)
    touched = np.empty_like(src)
    for threads in (1, 2, 4, 8, 16):
        with ThreadPoolExecutor(threads) as pool:
            copy = functools.partial(split_copy, pool, threads, src)
            into_touched = ms(lambda c=copy: c(touched))
            into_fresh = ms(lambda c=copy: c(np.empty_like(src)))
        print(
            f"np.copyto of {src.nbytes >> 20} MB on {threads} threads: into touched memory "
            f"{into_touched:.2f} ms, into fresh {into_fresh:.2f} ms"
        )


def torch_transfers(rows: int, cols: int) -> None:
    try:
        import torch  # type: ignore[import-not-found]
    except ImportError:
        print("torch: not installed")
        return
    if not torch.cuda.is_available():
        print("torch: no CUDA device")
        return
    sync = torch.cuda.synchronize
    host = torch.rand(1 << 24)
    pinned, dev = host.pin_memory(), torch.empty(1 << 24, device="cuda")
    print(
        f"torch, 64 MB up: pinned {ms(lambda: (dev.copy_(pinned), sync())):.2f} ms, "
        f"pageable {ms(lambda: (dev.copy_(host), sync())):.2f} ms; down: pinned "
        f"{ms(lambda: (pinned.copy_(dev), sync())):.2f} ms, pageable {ms(lambda: dev.cpu()):.2f} ms"
    )
    a, b = (torch.from_numpy(x) for x in tf.workloads.get("chain", rows=rows, cols=cols).inputs())

    def round_trip() -> Any:
        ga, gb = a.cuda(), b.cuda()
        return (torch.tanh(ga * gb + 1) * 0.5 + torch.exp(-ga)).cpu()

    print(f"torch's chain {rows} x {cols} from numpy arrays and back: {ms(round_trip):.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[4096, 1024])
    parser.add_argument("--cols", type=int, default=4096)
    args = parser.parse_args()
    gpu = tf.Device.gpu()
    threads = os.environ.get("TILEFUSE_NUM_THREADS", "all")
    print(f"{gpu.info['name']}, host copies on {threads} threads")
    for rows in args.rows:
        chain_call(gpu, rows, args.cols)
    host_copies()
    torch_transfers(args.rows[0], args.cols)


if __name__ == "__main__":
    main()
