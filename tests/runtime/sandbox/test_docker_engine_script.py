"""scripts/docker-engine.sh: a dockerd it started never outlives an ``up`` that did not finish.

Needs root and dockerd (scripts/test.sh installs docker.io when it runs as root); the engine
these tests start is their own, on its own socket and data root, whatever engine the suite uses.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest
from helpers.sandbox import alive, eventually

from hermes_envgen.runtime.sandbox.host_limits import mounts_below

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "docker-engine.sh"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("dockerd") is None or shutil.which("docker") is None,
    reason="starting dockerd needs root and docker.io (scripts/test.sh installs it as root)",
)

# A docker client for which no engine ever answers: `up` starts dockerd and waits for it.
NEVER_ANSWERS = """#!/bin/sh
[ "$1" = info ] && exit 1
exec {docker} "$@"
"""


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_up_interrupted_while_waiting_stops_the_dockerd_it_started(signum, tmp_path):
    client = tmp_path / "bin" / "docker"
    client.parent.mkdir()
    client.write_text(NEVER_ANSWERS.format(docker=shutil.which("docker")))
    client.chmod(0o755)
    state = Path(tempfile.mkdtemp(prefix="hedocker-", dir="/tmp")) / "s"  # sockets: short paths
    environment = {
        **os.environ,
        "PATH": f"{client.parent}:{os.environ['PATH']}",
        "DOCKER_HOST": "unix:///nonexistent/docker.sock",
        "HERMES_ENVGEN_SYSTEM_CACHE": str(tmp_path / "cache"),
        "HERMES_ENVGEN_DOCKER_STATE": str(state),
    }
    up = subprocess.Popen(
        ["bash", str(SCRIPT), "up"],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    started = state / "dockerd.started"
    dockerd = None
    try:
        assert eventually(lambda: started.is_file() and started.read_text().strip(), 60)
        dockerd = int(started.read_text())
        assert eventually(lambda: alive(dockerd), 10)
        up.send_signal(signum)
        out, err = up.communicate(timeout=60)
        assert up.returncode != 0
        assert out == ""  # nothing for the caller to eval
        assert eventually(lambda: not alive(dockerd), 40), err
        assert "docker engine: stopped" in err
        assert not state.exists()
        assert mounts_below(tmp_path) == [], "dockerd's data root is still mounted"
    finally:
        if up.poll() is None:
            up.kill()
            up.communicate()
        if dockerd is not None and alive(dockerd):
            os.kill(dockerd, signal.SIGKILL)
        shutil.rmtree(state.parent, ignore_errors=True)
