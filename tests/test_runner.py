"""run_env_mode stops an env that runs too long or is interrupted the way a user would: with a
signal it can clean up on, and only after a grace period by force."""

from __future__ import annotations

import os
import signal
import threading
import time

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


def test_a_run_against_a_stub_brings_the_offline_tokenizer(tmp_path):
    from transformers import AutoTokenizer

    from hermes_envgen.testing import OfflineRun

    run = OfflineRun.against_stub("my_env", "http://127.0.0.1:9/v1", tmp_path, timeout=5)
    assert run.tokenizer == tmp_path / "tokenizer" and run.timeout == 5
    assert run.flags()["env.tokenizer_name"] == tmp_path / "tokenizer"
    assert run.flags()["openai.health_check"] is False  # a stub has no health endpoint
    tokenizer = AutoTokenizer.from_pretrained(str(run.tokenizer))
    assert tokenizer.decode(tokenizer.encode("héllo", add_special_tokens=False)) == "héllo"
