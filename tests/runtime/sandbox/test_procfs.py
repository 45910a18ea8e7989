"""procfs: the one reader of /proc, each search run against a real process."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from hermes_envgen.runtime.sandbox import procfs

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="procfs is Linux's"),
]


@pytest.fixture
def sleeper(tmp_path):
    marker = tmp_path / "marker.txt"
    marker.write_text("x")
    process = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)", str(marker)],  # names the marker
        cwd=tmp_path,
        env={**os.environ, "PROCFS_TEST_TAG": f"run.{os.getpid()}.1"},
    )
    yield process
    process.kill()
    process.wait()


def test_each_search_finds_the_process_and_only_while_it_lives(sleeper, tmp_path):
    tag = f"run.{os.getpid()}."
    by_tag = lambda: procfs.with_variable("PROCFS_TEST_TAG", lambda v: v.startswith(tag))  # noqa: E731
    assert by_tag() == [sleeper.pid]
    assert procfs.naming(str(tmp_path)) == [sleeper.pid]
    assert procfs.working_in(str(tmp_path)) == [sleeper.pid]
    namespace = procfs.pid_namespace(sleeper.pid)
    assert namespace and namespace == procfs.pid_namespace(os.getpid())
    assert sleeper.pid in procfs.in_pid_namespace(namespace)
    assert procfs.parent_pid(sleeper.pid) == os.getpid() and procfs.start_time(sleeper.pid)
    assert os.getpid() not in procfs.pids()  # never this process itself

    sleeper.kill()
    sleeper.wait()
    assert by_tag() == [] and procfs.naming(str(tmp_path)) == []
    assert not procfs.exists(sleeper.pid) and not procfs.is_alive(sleeper.pid)


def test_a_zombie_carries_its_tag_but_is_not_found():
    process = subprocess.Popen(["true"], env={**os.environ, "PROCFS_TEST_TAG": "zombie.1"})
    try:
        deadline = time.monotonic() + 30
        while procfs.process_state(process.pid) != "Z":  # exited, not reaped yet: a zombie
            assert time.monotonic() < deadline, procfs.process_state(process.pid)
            time.sleep(0.01)
        assert procfs.exists(process.pid) and not procfs.is_alive(process.pid)
        found = procfs.with_variable("PROCFS_TEST_TAG", lambda value: value == "zombie.1")
        assert process.pid not in found
    finally:
        process.wait()
