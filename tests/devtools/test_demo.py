"""``hermes-envgen demo``: the whole pipeline offline, and a clean stop on Ctrl-C."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.sandbox import eventually

from hermes_envgen.runtime.sandbox.host_limits import mounts_below
from hermes_envgen.runtime.sandbox.runs import RUNS_DIRECTORY
from hermes_envgen.testing.runner import offline_environment


def processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if int(entry.name) != os.getpid() and (text in cmdline or cwd.startswith(text)):
            found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_demo_runs_process_and_evaluate_and_says_where_the_results_are(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "hermes_envgen", "demo", str(tmp_path), "--groups", "2"],
        capture_output=True,
        text=True,
        timeout=600,
        env=offline_environment(),
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = tmp_path / "demo-output"
    assert f"rollouts (JSONL):  {out / 'data/rollouts.jsonl'}" in result.stdout
    assert "process:   2 groups, 8 rollouts" in result.stdout
    assert "sandboxes: bwrap (bubblewrap: read-only system" in result.stdout  # auto, said
    groups = [json.loads(line) for line in (out / "data/rollouts.jsonl").read_text().splitlines()]
    assert len(groups) == 2 and {s for g in groups for s in g["scores"]} == {0.0, 1.0}
    # process writes the `hermes-envgen view` page beside its groups: a card per rollout
    page = (out / "data/rollouts.html").read_text()
    assert page.count('<article class="card"') == 8 and "rollouts.jsonl · rollouts" in page
    metrics = json.loads((out / "eval/metrics.json").read_text())["results"]["all"]
    assert 0.0 < metrics["eval/mean_reward"] < 1.0  # the scripted policy solves some, not all
    # the generated project is left committed and clean
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=tmp_path / "demo-env", capture_output=True, text=True
    )
    assert status.stdout == ""
    assert processes_mentioning(str(tmp_path)) == []


def test_a_second_demo_into_the_same_directory_says_what_to_do(tmp_path):
    (tmp_path / "demo-env").mkdir()
    (tmp_path / "demo-env" / "README.md").write_text("the first demo's project")
    result = subprocess.run(
        [sys.executable, "-m", "hermes_envgen", "demo", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=offline_environment(),
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"error: {tmp_path} already holds a demo")
    assert "--output-dir" not in result.stderr and "Traceback" not in result.stderr
    assert "pass another directory" in result.stderr


@pytest.mark.slow
def test_ctrl_c_stops_every_process_the_demo_started(tmp_path):
    demo = subprocess.Popen(
        [sys.executable, "-m", "hermes_envgen", "demo", str(tmp_path), "--groups", "50"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=offline_environment(),
        stdin=subprocess.DEVNULL,
    )
    runs = tmp_path / "demo-output" / "sandboxes" / RUNS_DIRECTORY
    try:
        deadline = time.monotonic() + 300
        for line in demo.stderr:  # wait until the env's process mode is running
            if "process:" in line or time.monotonic() > deadline:
                break
        # Interrupted mid-rollout: once the env has made its run's sandbox directory
        rolling = eventually(lambda: any(runs.glob("*/*")), seconds=120)
        assert rolling and processes_mentioning(str(tmp_path)), "the env should be running now"
        demo.send_signal(signal.SIGINT)
        assert demo.wait(timeout=60) == 130
    finally:
        if demo.poll() is None:
            demo.kill()
    # What was killed may take a moment to be gone; what was left would not be in 10 s.
    assert eventually(lambda: processes_mentioning(str(tmp_path)) == [], seconds=10), (
        processes_mentioning(str(tmp_path))
    )
    assert mounts_below(tmp_path) == [], "size-limited workspaces left mounted"
    assert not list((tmp_path / "demo-output").glob("sandboxes/*"))


def test_demo_sh_takes_a_relative_directory_from_where_it_is_run(tmp_path):
    # The script in a copy whose set-up is done and whose CLI reports where and how it was run.
    root = tmp_path / "hermes-envgen"
    (root / "scripts").mkdir(parents=True)
    shutil.copy2(Path(__file__).resolve().parents[2] / "scripts" / "demo.sh", root / "scripts")
    (root / "scripts" / "setup.sh").write_text("exit 0\n")
    cli = root / ".venv" / "bin" / "hermes-envgen"
    cli.parent.mkdir(parents=True)
    cli.write_text('#!/bin/sh\nprintf "%s\\n" "$PWD" "$@"\n')
    cli.chmod(0o755)
    caller = tmp_path / "work"
    caller.mkdir()
    result = subprocess.run(
        ["bash", str(root / "scripts" / "demo.sh"), "demo", "--groups", "2"],
        cwd=caller,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    cwd, *args = result.stdout.splitlines()
    assert args == ["demo", "demo", "--groups", "2"]
    assert Path(cwd) / args[1] == caller / "demo"
