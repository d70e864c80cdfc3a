"""Tuning on a cluster started the way the README says, `ray start --head`
and `ray start --address` (two nodes on this machine): the worker node is
killed mid-run, the run finishes on the head with nothing lost or measured
twice."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import tilefuse as tf
from conftest import in_ci
from tilefuse.distributed import RayExecutor, Worker

try:
    import ray
except ImportError:
    if in_ci():  # CI installs the test extras, Ray among them: never skip there
        raise
    pytest.skip("the Ray executor's tests need Ray (tilefuse[ray])", allow_module_level=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ray_start(log: Path, *args: str) -> subprocess.Popen[bytes]:
    """`ray start ... --block` in a session of its own, so that killing its
    process group takes the node's raylet and workers down with it."""
    # Ray's command sits beside this Python (a venv need not be on PATH).
    here = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    ray_cli = shutil.which("ray", path=here)
    assert ray_cli is not None, "Ray's `ray` command is not on PATH"
    with log.open("wb") as out:
        return subprocess.Popen(
            [ray_cli, "start", "--block", "--disable-usage-stats", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # `ray start` turns Ray's token authentication on; this test's
            # nodes all run here, under the test's own user.
            env={**os.environ, "RAY_AUTH_MODE": "disabled"},
        )


def _wait_for_nodes_alive(n: int, deadline: float) -> None:
    while sum(node["Alive"] for node in ray.nodes()) != n:
        assert time.monotonic() < deadline, f"the cluster did not come to {n} live nodes"
        time.sleep(0.5)


def _kill(node: subprocess.Popen[bytes]) -> None:
    if node.poll() is None:
        os.killpg(node.pid, signal.SIGKILL)
    node.wait()


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[subprocess.Popen[bytes]]:
    """A head and a worker node labelled `head` and `node2`; yields the
    worker node's `ray start` process."""
    logs = tmp_path_factory.mktemp("ray-nodes")
    address = f"127.0.0.1:{_free_port()}"
    # The head's files (and the address `ray.init()` would find) stay out
    # of /tmp/ray; a short path, for the sockets in it.
    temp = tempfile.mkdtemp(prefix="tf-ray-", dir="/tmp")
    head = _ray_start(
        logs / "head.log",
        "--head",
        f"--port={address.split(':')[1]}",
        "--num-cpus=1",
        '--resources={"head": 1}',
        "--include-dashboard=false",
        f"--temp-dir={temp}",
    )
    worker: subprocess.Popen[bytes] | None = None
    try:
        time.sleep(5)
        worker = _ray_start(
            logs / "node2.log", f"--address={address}", "--num-cpus=1", '--resources={"node2": 1}'
        )
        ray.init(address=address, log_to_driver=False)
        _wait_for_nodes_alive(2, time.monotonic() + 60)
        yield worker
    finally:
        ray.shutdown()
        for node in (worker, head):
            if node is not None:
                _kill(node)
        shutil.rmtree(temp, ignore_errors=True)


def test_a_killed_worker_node_s_candidate_is_measured_on_the_head(
    nodes: subprocess.Popen[bytes],
) -> None:
    ex = RayExecutor([Worker("cpu", 1, {"head": 1}), Worker("cpu", 1, {"node2": 1})])
    killed_at: list[float] = []

    def kill_the_worker_node() -> None:
        time.sleep(1.0)
        _kill(nodes)
        killed_at.append(time.monotonic())

    start = time.monotonic()
    threading.Thread(target=kill_the_worker_node, daemon=True).start()
    fusion = tf.workloads.get("softmax", rows=128, cols=1024).payload
    try:
        with pytest.warns(RuntimeWarning, match=r"1 of 2 Ray workers died .* [1-9]\d* candidates"):
            r = tf.tune(fusion, executor=ex, trials=16, seconds=120, cache=False, seed=3)
    finally:
        ex.shutdown()
    assert killed_at, "the worker node was not killed"
    assert killed_at[0] - start < r.elapsed, "the run ended before the node died"
    ids = [t["id"] for t in r.trials]
    assert ids == list(range(len(ids))), "a trial was lost"
    measured = [str(t["params"]) for t in r.trials if t["status"] != "duplicate"]
    assert len(measured) == len(set(measured)), "a candidate was measured twice"
    assert [t for t in r.trials if t["status"] == "failed"] == []
    # The node itself is gone, not only its worker process.
    _wait_for_nodes_alive(1, time.monotonic() + 60)
