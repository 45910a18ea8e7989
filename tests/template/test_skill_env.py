"""An env written as the Hermes skill shows it (tests/helpers/skill_env.py) runs its three modes as written.

Against the stub model of examples/stub_script.yaml (one conversation that solves each task, one
that does not): its binary reward reads ``ctx.terminal(...)`` without ``await`` and still scores
1.0 and 0.0; its own evaluate (HermesAgentLoop built by hand, ``ctx.cleanup()`` without
``await``) saves its results and leaves no sandbox; serve feeds a real run-api. No skill name is
reported as deprecated, and no coroutine goes un-awaited.
"""

from __future__ import annotations

from helpers import HELPERS

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLES

from hermes_envgen.testing.runner import offline_environment
from hermes_envgen.testing.trainer import MinimalTrainer, RunApi

ENV_FILE = HELPERS / "skill_env.py"
SCRIPT = EXAMPLES / "stub_script.yaml"
NOT_IN_OUTPUT = ("deprecated", "never ran", "was never awaited", "coroutine", "Traceback")


def run_mode(mode: str, model_url: str, tokenizer, tmp_path: Path, *flags: str) -> str:
    """The env's ``mode`` as a subprocess with a timeout; its output (it must exit 0)."""
    result = subprocess.run(
        [
            sys.executable,
            str(ENV_FILE),
            mode,
            "--openai.base_url",
            model_url,
            "--env.tokenizer_name",
            str(tokenizer),
            "--env.sandbox_root",
            str(tmp_path / "sandboxes"),
            "--env.sandbox_allow_unsafe_local",
            "true",
            *flags,
        ],
        cwd=tmp_path,
        env=offline_environment(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=240,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert [word for word in NOT_IN_OUTPUT if word in output] == [], output[-4000:]
    return output


def leftover_sandboxes(tmp_path: Path) -> list[Path]:
    return [p for p in (tmp_path / "sandboxes").rglob("*") if p.is_file()]


@pytest.mark.slow
def test_process_and_evaluate_run_as_the_skill_writes_them(
    stub_server, offline_tokenizer, tmp_path
):
    stub = stub_server(SCRIPT)
    groups_file = tmp_path / "groups.jsonl"
    # process on bwrap where it runs (the reward's plain read then goes through its anchor),
    # evaluate on the env's own terminal_backend ("local")
    bwrap = ["--env.sandbox_backend", "bwrap"] if shutil.which("bwrap") else []
    out = run_mode(
        "process", stub.base_url, offline_tokenizer, tmp_path,
        "--env.total_steps", "2", "--env.data_path_to_save_groups", str(groups_file), *bwrap,
    )  # fmt: skip
    groups = [json.loads(line) for line in groups_file.read_text().splitlines()]
    assert len(groups) == 2
    # the un-awaited ctx.terminal ran its check: the solving conversation passes, the other not
    assert all(sorted(g["scores"]) == [0.0, 1.0] for g in groups)
    assert out.count("SKILL_ENV train buffer 2") == 2  # its own wandb_log, with super()
    assert leftover_sandboxes(tmp_path) == []

    evals = tmp_path / "evals"
    out = run_mode(
        "evaluate", stub.base_url, offline_tokenizer, tmp_path,
        "--env.data_dir_to_save_evals", str(evals),
    )  # fmt: skip
    metrics = json.loads((evals / "metrics.json").read_text())
    assert metrics["results"]["all"]["eval/mean_reward"] in (0.0, 1.0)
    assert len((evals / "samples.jsonl").read_text().splitlines()) == 1
    # evaluation reads what its compute_reward appended (the skill's way to avoid a second
    # judge call), in a buffer that held nothing before
    assert "SKILL_ENV eval buffer 1" in out
    assert leftover_sandboxes(tmp_path) == []  # ctx.cleanup() without await still ran


@pytest.mark.slow
def test_serve_feeds_run_api(stub_server, offline_tokenizer, tmp_path):
    stub = stub_server(SCRIPT)
    with RunApi(log=tmp_path / "run-api.log") as api:
        trainer = MinimalTrainer(api.url, batch_size=2, num_steps=1)
        trainer.register()
        log = open(tmp_path / "env.log", "w")  # noqa: SIM115
        env = subprocess.Popen(
            [
                sys.executable,
                str(ENV_FILE),
                "serve",
                "--openai.base_url",
                stub.base_url,
                "--env.tokenizer_name",
                str(offline_tokenizer),
                "--env.rollout_server_url",
                api.url,
                "--env.sandbox_root",
                str(tmp_path / "sandboxes"),
                "--env.sandbox_allow_unsafe_local",
                "true",
                "--env.total_steps",
                "1",
            ],
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=offline_environment(),
        )
        try:
            batch = trainer.next_batch(timeout=120)
            assert env.wait(timeout=120) == 0, (tmp_path / "env.log").read_text()[-3000:]
        finally:
            if env.poll() is None:
                env.kill()
                env.wait()
            log.close()
    assert sum(len(group["tokens"]) for group in batch) == 2
    assert all(sorted(group["scores"]) == [0.0, 1.0] for group in batch)
    output = (tmp_path / "env.log").read_text()
    assert [word for word in NOT_IN_OUTPUT if word in output] == [], output[-3000:]
