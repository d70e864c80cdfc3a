"""The CPU device's threads (issue 12): one persistent pool per process,
sized by ``TILEFUSE_NUM_THREADS``; launches spawn no thread."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tilefuse as tf


@pytest.mark.parametrize("value", ["0", "-2", "many", "1.5"])
def test_a_bad_thread_count_is_a_device_error(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("TILEFUSE_NUM_THREADS", value)
    with pytest.raises(tf.DeviceError, match="TILEFUSE_NUM_THREADS"):
        tf.Device.cpu()


@pytest.mark.parametrize("threads", ["1", "3", "8"])
def test_results_do_not_depend_on_the_thread_count(threads: str) -> None:
    code = """
        import numpy as np, tilefuse as tf
        f = tf.Fusion(); a = f.input((256, 512), "f32")
        f.output((a * 2.0 + 1.0).tanh().sum(axis=1))
        cpu = tf.Device.cpu()
        x = np.random.default_rng(0).random((256, 512), dtype=np.float32)
        k = f.schedule(f.heuristics(device=cpu), cpu)
        np.testing.assert_allclose(k(x), f.evaluate(x), rtol=1e-5)
        print("ok", cpu.info["cores"])
        """
    env = {**os.environ, "TILEFUSE_NUM_THREADS": threads}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["ok", threads]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads threads from /proc")
def test_launches_reuse_the_pool_threads() -> None:
    # Two threads whatever the machine has, in a process of its own.
    code = """
        from pathlib import Path
        import time
        import numpy as np, tilefuse as tf
        f = tf.Fusion(); a = f.input((256, 512), "f32"); f.output((a * 2.0 + 1.0).tanh())
        cpu = tf.Device.cpu()
        k = f.schedule(f.heuristics(device=cpu), cpu)
        x = np.ones((256, 512), np.float32)

        def pool_threads():
            tasks = Path("/proc/self/task").iterdir()
            return {t.name for t in tasks if (t / "comm").read_text().startswith("tilefuse-cpu")}

        k(x)
        # A new thread names itself once it first runs: on a loaded
        # machine that can come after the launch returns.
        deadline = time.monotonic() + 5
        while not (before := pool_threads()) and time.monotonic() < deadline:
            time.sleep(0.01)
        for _ in range(50):
            k(x)
        print(len(before), pool_threads() == before)
        """
    env = {**os.environ, "TILEFUSE_NUM_THREADS": "2"}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, result.stderr
    count, same = result.stdout.split()
    assert int(count) >= 1, "no tilefuse-cpu thread after a parallel launch"
    assert same == "True", "launches started new threads"
