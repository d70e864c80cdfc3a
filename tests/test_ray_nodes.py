"""Tuning on a cluster started the way the README says, `ray start --head`
and `ray start --address` (two nodes on this machine): the worker node is
killed mid-run, the run finishes on the head with nothing lost or measured
twice."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ray_or_skip

ray_or_skip()  # the driver below imports it


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
            env=_ENV,
        )


def _kill(node: subprocess.Popen[bytes]) -> None:
    if node.poll() is None:
        os.killpg(node.pid, signal.SIGKILL)
    node.wait()


# `ray start` turns Ray's token authentication on; this test's nodes and
# its driver all run here, under the test's own user.
_ENV = {**os.environ, "RAY_AUTH_MODE": "disabled"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """A head and a worker node labelled `head` and `node2`; yields the
    head's address and the worker node's process group."""
    logs = tmp_path_factory.mktemp("ray-nodes")
    port = _free_port()
    # The head's files (and the address `ray.init()` would find) stay out
    # of /tmp/ray; a short path, for the sockets in it.
    temp = tempfile.mkdtemp(prefix="tf-ray-", dir="/tmp")
    head = _ray_start(
        logs / "head.log",
        "--head",
        f"--port={port}",
        "--num-cpus=1",
        '--resources={"head": 1}',
        "--include-dashboard=false",
        f"--temp-dir={temp}",
    )
    worker: subprocess.Popen[bytes] | None = None
    try:
        time.sleep(5)
        address = f"127.0.0.1:{port}"
        worker = _ray_start(
            logs / "node2.log", f"--address={address}", "--num-cpus=1", '--resources={"node2": 1}'
        )
        yield address, worker.pid
    finally:
        for node in (worker, head):
            if node is not None:
                _kill(node)
        shutil.rmtree(temp, ignore_errors=True)


# The driver runs in a process of its own: a process that was connected to
# another Ray cluster (test_distributed's) keeps that one's authentication.
_DRIVER = """
import json, os, signal, sys, time, warnings
import ray
import tilefuse as tf
from tilefuse.distributed import RayExecutor, RayGroup, Worker

address, victim = sys.argv[1], int(sys.argv[2])
ray.init(address=address, log_to_driver=False)
alive = lambda: sum(n["Alive"] for n in ray.nodes())
deadline = time.monotonic() + 60
while alive() != 2:
    assert time.monotonic() < deadline, "the worker node did not join"
    time.sleep(0.5)
ex = RayExecutor([Worker("cpu", 1, {"head": 1}), Worker("cpu", 1, {"node2": 1})])
killed = []

next_result = RayGroup.next

def next_killing_the_worker_node(self):
    # Mid-run whatever the machine's speed: from the third wait on, once
    # both workers hold a candidate.
    waits.append(time.monotonic())
    if not killed and len(waits) >= 3 and len(self.running) == 2:
        os.killpg(victim, signal.SIGKILL)
        killed.append(time.monotonic())
    return next_result(self)

waits = []
RayGroup.next = next_killing_the_worker_node
start = time.monotonic()
fusion = tf.workloads.get("softmax", rows=128, cols=1024).payload
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    r = tf.tune(fusion, executor=ex, trials=16, seconds=120, cache=False, seed=3)
ex.shutdown()
deadline = time.monotonic() + 60
while alive() != 1 and time.monotonic() < deadline:
    time.sleep(0.5)
print(json.dumps({
    "killed_after": killed[0] - start if killed else None,
    "elapsed": r.elapsed,
    "trials": [t.to_dict() for t in r.trials],
    "warnings": [str(w.message) for w in caught],
    "alive": alive(),
}))
"""


def test_a_killed_worker_node_s_candidate_is_measured_on_the_head(
    cluster: tuple[str, int],
) -> None:
    address, victim = cluster
    run = subprocess.run(
        [sys.executable, "-c", _DRIVER, address, str(victim)],
        capture_output=True,
        text=True,
        env=_ENV,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    r = json.loads(run.stdout.strip().splitlines()[-1])
    assert r["killed_after"] is not None, "the worker node was not killed"
    assert r["killed_after"] < r["elapsed"], "the run ended before the node died"
    ids = [t["id"] for t in r["trials"]]
    assert ids == list(range(len(ids))), "a trial was lost"
    measured = [str(t["params"]) for t in r["trials"] if t["status"] != "duplicate"]
    assert len(measured) == len(set(measured)), "a candidate was measured twice"
    assert [t for t in r["trials"] if t["status"] == "failed"] == []
    assert any(
        re.search(r"1 of 2 Ray workers died .* [1-9]\d* candidates", w) for w in r["warnings"]
    )
    assert r["alive"] == 1, "the worker node is still alive"
