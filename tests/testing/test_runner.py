"""run_env_mode stops an env that runs too long or is interrupted the way a user would: with a
signal it can clean up on, and only after a grace period by force."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import ClassVar

import pytest

from hermes_envgen.errors import EnvRunFailed
from hermes_envgen.testing import runner
from hermes_envgen.testing.runner import run_env_mode

# An "env" that writes which signal ended it (its cleanup), or ignores them all.
ENV = """
import signal, sys, time
from pathlib import Path

mark = Path(sys.argv[2])
def cleanup(signum, frame):
    mark.write_text(signal.Signals(signum).name)
    sys.exit(128 + signum)
handler = signal.SIG_IGN if sys.argv[1] == "stubborn" else cleanup
for signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, handler)
print("running", flush=True)
time.sleep(120)
"""


@pytest.fixture
def env_file(tmp_path):
    path = tmp_path / "env.py"
    path.write_text(ENV)
    return path


def test_an_env_past_its_timeout_gets_sigterm_and_cleans_up(env_file, tmp_path):
    mark = tmp_path / "ended-by"
    with pytest.raises(EnvRunFailed, match="ran past 1 s") as failed:
        run_env_mode(env_file, "polite", str(mark), timeout=1)
    assert mark.read_text() == "SIGTERM"
    assert "running" in str(failed.value)  # what it wrote is in the error


def test_an_env_that_ignores_signals_is_killed_after_the_grace_period(
    env_file, tmp_path, monkeypatch
):
    monkeypatch.setattr(runner, "GRACE_SECONDS", 1.0)
    started = time.monotonic()
    with pytest.raises(EnvRunFailed, match="ran past 1 s"):
        run_env_mode(env_file, "stubborn", str(tmp_path / "never"), timeout=1)
    assert time.monotonic() - started < 30
    assert not (tmp_path / "never").exists()


def test_ctrl_c_reaches_the_env_once_and_is_waited_for(env_file, tmp_path):
    mark = tmp_path / "ended-by"
    # the interrupt the terminal would deliver, to this process, while the env runs
    timer = threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_env_mode(env_file, "polite", str(mark), timeout=60)
    finally:
        timer.cancel()
    assert mark.read_text() == "SIGINT"  # run_env_mode returned only after the env's cleanup


class InterruptedAsItStarts(subprocess.Popen):
    """A Popen that gets Ctrl-C the moment its child exists, before the caller has a handle."""

    started: ClassVar[list[int]] = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        InterruptedAsItStarts.started.append(self.pid)
        os.kill(os.getpid(), signal.SIGINT)


def assert_reaped(pid: int) -> None:
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_ctrl_c_while_the_env_starts_stops_it_too(env_file, tmp_path, monkeypatch):
    monkeypatch.setattr(subprocess, "Popen", InterruptedAsItStarts)
    InterruptedAsItStarts.started.clear()
    with pytest.raises(KeyboardInterrupt):
        run_env_mode(env_file, "polite", str(tmp_path / "ended-by"), timeout=60)
    (pid,) = InterruptedAsItStarts.started
    assert_reaped(pid)  # without the hold: raised inside Popen, and the env ran on for 120 s
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_ctrl_c_while_checks_env_process_starts_kills_it(tmp_path, monkeypatch):
    from hermes_envgen.devtools.check import EnvTarget, start_env_process

    monkeypatch.setattr(subprocess, "Popen", InterruptedAsItStarts)
    InterruptedAsItStarts.started.clear()
    with pytest.raises(KeyboardInterrupt):
        start_env_process(EnvTarget(tmp_path, str(tmp_path / "env.py")))
    (pid,) = InterruptedAsItStarts.started
    assert_reaped(pid)


def test_interrupts_are_held_only_in_the_main_thread():
    with runner.interrupts_held() as held:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)  # a signal's Python handler runs between bytecodes: it has run now
    assert held == [signal.SIGINT]
    in_thread: list[object] = []

    def hold() -> None:
        with runner.interrupts_held() as held_there:
            in_thread.append(signal.getsignal(signal.SIGINT))
        in_thread.append(held_there)

    thread = threading.Thread(target=hold)
    thread.start()
    thread.join()
    assert in_thread == [signal.default_int_handler, []]


def test_a_run_against_a_stub_brings_the_offline_tokenizer(tmp_path):
    from transformers import AutoTokenizer

    from hermes_envgen.testing import OfflineRun

    run = OfflineRun.against_stub("my_env", "http://127.0.0.1:9/v1", tmp_path, timeout=5)
    assert run.tokenizer == tmp_path / "tokenizer" and run.timeout == 5
    assert run.flags()["env.tokenizer_name"] == tmp_path / "tokenizer"
    assert run.flags()["openai.health_check"] is False  # a stub has no health endpoint
    tokenizer = AutoTokenizer.from_pretrained(str(run.tokenizer))
    assert tokenizer.decode(tokenizer.encode("héllo", add_special_tokens=False)) == "héllo"
