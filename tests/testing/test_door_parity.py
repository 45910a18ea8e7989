"""The gold solutions of a generated env earn through each door's own adapter (TRL's
environment_factory class as GRPOTrainer calls it, the OpenEnv server and the verifiers door's
server on 127.0.0.1, each driven by its client) exactly what they earn through the env's own
loop, as process runs it; a no-op and tampering through any door earn nothing. And an adapter
that pays tampering, or crashes, makes its row of check fail."""

from __future__ import annotations

import importlib
import importlib.util
import sys

import pytest
from conftest import render_template

from hermes_envgen.devtools.check import FAIL, PASS, WARN, door_rows
from hermes_envgen.runtime.rewards import Reward
from hermes_envgen.testing.door_parity import DOORS, door_parity
from hermes_envgen.testing.envs import builtin_samples

pytestmark = pytest.mark.slow


def load_env(project, package: str, monkeypatch) -> type:
    monkeypatch.syspath_prepend(str(project / "src"))
    return next(
        value
        for value in vars(importlib.import_module(f"{package}.env")).values()
        if isinstance(value, type) and value.__module__ == f"{package}.env"
        and hasattr(value, "compute_reward")
    )  # fmt: skip


def forget(package: str) -> None:
    for module in [m for m in sys.modules if m.startswith(package)]:
        del sys.modules[module]


@pytest.fixture
def binary_env(tmp_path, monkeypatch):
    """The default project's env (the binary reward: a shell check in the sandbox)."""
    project = render_template(tmp_path / "doors-env", {"project_name": "doors-env"})
    yield load_env(project, "doors_env", monkeypatch)
    forget("doors_env")


@pytest.mark.parametrize("pattern", ["binary", "judge"])
def test_each_door_pays_the_gold_solutions_what_process_pays_and_nothing_for_nothing(
    pattern, offline_tokenizer, tmp_path, monkeypatch
):
    name = f"parity-{pattern}"
    data = {"project_name": name, "provider": "atropos", "reward_pattern": pattern}
    if pattern == "judge":  # the stub server plays the judge too: the policy's own server
        data["judge_base_url"] = "policy"
    package = name.replace("-", "_")
    env_cls = load_env(render_template(tmp_path / name, data), package, monkeypatch)
    try:
        samples = builtin_samples(env_cls)[:6]  # check replays them all
        report = door_parity(env_cls, samples, offline_tokenizer, tmp_path / "work")
    finally:
        forget(package)
    assert report.atropos_gold and all(r >= 0.9 for r in report.atropos_gold)
    openenv_missing = importlib.util.find_spec("openenv") is None
    for door in DOORS:
        replays = report.doors[door]
        if door == "openenv" and openenv_missing:  # scripts/install-trainers.sh installs it
            assert "pip install 'hermes-envgen[openenv]'" in str(replays.unavailable)
            continue
        assert replays.error is replays.unavailable is None, (door, replays)
        assert report.gold_mismatches(door) == [], report.as_dict()
        assert report.paid_for_nothing(door) == [], report.as_dict()
        assert len(replays.gold) == len(replays.noop) == len(replays.tamper) == len(samples)
    rows = {row.name: row.status for row in door_rows(report.as_dict(), 0.1)}
    assert rows["door trl: parity"] == rows["door verifiers: parity"] == PASS
    assert rows["door openenv: parity"] == (WARN if openenv_missing else PASS)


def test_an_adapter_that_pays_tampering_fails_its_row(binary_env, offline_tokenizer, tmp_path):
    from hermes_envgen.runtime.doors import trl as door

    scored = door.Environment._score

    def pays_a_run_tool(self, completion):  # a door that trusts whatever ran in the sandbox
        reward = scored(self, completion)
        ran = any(m.get("role") == "tool" for m in completion)
        return Reward(1.0) if ran else reward

    samples = builtin_samples(binary_env)[:3]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(door.Environment, "_score", pays_a_run_tool)
        report = door_parity(
            binary_env, samples, offline_tokenizer, tmp_path / "work", doors=("trl",)
        )
    assert report.gold_mismatches("trl") == []  # the gold solutions earn 1 either way
    assert report.paid_for_nothing("trl") == [f"task {i}: tampering earned 1" for i in range(3)]
    (row,) = [r for r in door_rows(report.as_dict(), 0.1) if r.name == "door trl: parity"]
    assert row.status == FAIL
    assert row.reason.startswith("through TRL's environment_factory: task 0: tampering earned 1")


def test_an_adapter_that_crashes_fails_its_row_with_the_first_line(
    binary_env, offline_tokenizer, tmp_path, monkeypatch
):
    from hermes_envgen.runtime.doors import verifiers as door

    def broken_app(*args, **kwargs):
        raise RuntimeError("the door's app broke\nand said more on the next line")

    monkeypatch.setattr(door, "verifiers_app", broken_app)
    samples = builtin_samples(binary_env)[:2]
    report = door_parity(
        binary_env, samples, offline_tokenizer, tmp_path / "work", doors=("verifiers",)
    )
    assert report.doors["verifiers"].error == "RuntimeError: the door's app broke"
    (row,) = [r for r in door_rows(report.as_dict(), 0.1) if r.name == "door verifiers: parity"]
    assert row.status == FAIL
    assert row.reason == "the verifiers door's server crashed: RuntimeError: the door's app broke"


def test_a_door_that_fails_mid_replay_fails_its_row_and_leaves_nothing_running(
    binary_env, offline_tokenizer, tmp_path, monkeypatch
):
    import threading

    from hermes_envgen.runtime.doors.session import EnvSession

    async def broken_score(self, messages=None):  # every door's scoring breaks (500 over HTTP)
        raise RuntimeError("scoring broke")

    monkeypatch.setattr(EnvSession, "score", broken_score)
    samples = builtin_samples(binary_env)[:2]
    work = tmp_path / "work"
    report = door_parity(binary_env, samples, offline_tokenizer, work, doors=("verifiers",))
    error = report.doors["verifiers"].error
    assert error and error.startswith("RuntimeError: POST /sessions/.../score: 500"), error
    # the door's server was stopped and every session's sandbox closed
    assert not [t for t in threading.enumerate() if t.name.startswith("served-")]
    assert not list((work / "verifiers").rglob("hermes-envgen/*"))


def test_a_game_earns_through_each_door_what_process_pays(offline_tokenizer, tmp_path):
    # its scripted players' guesses go through each door's reply tool, answered by the hooks
    # (the simulated user: below, and both through check's door rows in test_check_shapes)
    from guess_number_env import GuessNumberEnv as env_cls

    samples = builtin_samples(env_cls)
    report = door_parity(env_cls, samples, offline_tokenizer, tmp_path / "work")
    assert report.atropos_gold and all(r >= 0.9 for r in report.atropos_gold)
    openenv_missing = importlib.util.find_spec("openenv") is None
    rows = {row.name: row for row in door_rows(report.as_dict(), 0.1)}
    for door in DOORS:
        if door == "openenv" and openenv_missing:
            continue
        replays = report.doors[door]
        assert replays.error is replays.unavailable is None, (door, replays)
        assert replays.gold == report.atropos_gold, report.as_dict()
        assert replays.noop == replays.tamper == [0.0] * len(samples), report.as_dict()
        assert rows[f"door {door}: parity"].status == PASS


def test_a_simulated_user_whose_reward_pays_an_angry_goodbye_fails_each_doors_row(
    offline_tokenizer, tmp_path, monkeypatch
):
    from conftest import EXAMPLES

    # solved, or left out of patience: three hostile replies drive the customer away, and pay
    text = (EXAMPLES / "user_simulator_env.py").read_text()
    fair = "return 1.0 if result.data.solved else 0.0"
    assert fair in text
    gameable = "return 1.0 if result.data.solved or result.data.unhelpful >= PATIENCE else 0.0"
    (tmp_path / "angry_goodbye_env.py").write_text(text.replace(fair, gameable))
    monkeypatch.syspath_prepend(str(tmp_path))  # TRL's factory pickles the class by name
    try:
        env_cls = importlib.import_module("angry_goodbye_env").UserSimulatorEnv
        samples = builtin_samples(env_cls)
        report = door_parity(env_cls, samples, offline_tokenizer, tmp_path / "work")
    finally:
        forget("angry_goodbye_env")
    rows = {row.name: row for row in door_rows(report.as_dict(), 0.1)}
    doors = ("trl", "verifiers") if importlib.util.find_spec("openenv") is None else DOORS
    for door in doors:
        assert report.gold_mismatches(door) == []  # the gold play is paid as process pays it
        assert report.paid_for_nothing(door) == [f"task {i}: tampering earned 1" for i in (0, 1)]
        assert rows[f"door {door}: parity"].status == FAIL
    assert "task 0: tampering earned 1" in rows["door trl: parity"].reason
