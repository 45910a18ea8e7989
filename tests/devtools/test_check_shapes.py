"""``check`` on envs of other shapes than a tool-using task: a game and a simulated user, with
no tools and no ``prompt`` in their tasks, replayed through the scripted players their tasks
carry; and variants of each whose reward can be gamed, or whose hooks an agent can break."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import EXAMPLES, TRAINERS_DIRECTORY
from helpers.check import rows, run_check

from hermes_envgen.devtools.check import FAIL, FAILURES_ROW, PASS, ReplayChecks, find_env

pytestmark = pytest.mark.timeout(1000)


@pytest.mark.slow
@pytest.mark.parametrize("example", ["guess_number_env.py", "user_simulator_env.py"])
def test_a_game_and_a_simulated_user_pass_check_through_their_players(example):
    # --trainer none: the examples sample in chat mode, which atroposlib's GRPO trainer refuses.
    result = run_check(str(EXAMPLES / example), "--trainer", "none")
    assert result.returncode == 0, result.stdout + result.stderr
    table = rows(result)
    # each door plays the game through its reply tool and pays what process pays
    assert table["door trl: parity"] == table["door verifiers: parity"] == PASS, result.stdout
    assert table["door openenv: parity"] == (PASS if TRAINERS_DIRECTORY.is_dir() else "WARN")
    assert "the env answers between turns through its hooks" not in result.stdout
    table.pop("door openenv: parity")
    assert set(table.values()) == {PASS}, result.stdout
    assert len(table) == 18 and "ready to train" in result.stdout
    assert "all 2 samples earn >= 0.9" in result.stdout  # the players, replayed
    assert "no tools offered" in result.stdout
    assert "a 5,000-digit number, a claim of victory" in result.stdout  # tampering, by words
    assert table[FAILURES_ROW] == PASS


def variant(tmp_path: Path, example: str, *changes: tuple[str, str]) -> Path:
    """A copy of an example with ``changes`` made (each ``old`` must be there)."""
    copy = tmp_path / example
    text = (EXAMPLES / example).read_text()
    for old, new in changes:
        assert old in text, old
        text = text.replace(old, new)
    copy.write_text(text)
    return copy


def replay_rows(env_file: Path, work: Path) -> dict[str, tuple[str, str]]:
    """The rows check's replays give ``env_file`` (its reward and failure rows), by name."""
    replays = ReplayChecks(find_env(env_file), work, gold=0.9, noop=0.1, timeout=600)
    replays.start("http://127.0.0.1:9/v1", None)  # no judge: the injection row is skipped
    try:
        return {row.name: (row.status, row.reason) for row in replays.rows(stubbed=True)}
    finally:
        replays.stop()


@pytest.mark.slow
def test_check_catches_a_game_whose_reward_pays_a_shotgun_and_whose_hooks_break(tmp_path):
    env_file = variant(
        tmp_path,
        "guess_number_env.py",
        # won when the secret is anywhere in the last reply: a list of every number wins
        (
            "won = result.finished_naturally and read_guess(result.final_response)"
            ' == item["secret"]',
            'won = str(item["secret"]) in result.final_response',
        ),
        # a guess of any length parsed: past 4,300 digits Python refuses, in the hook
        ('if found is None or len(found.group().lstrip("-")) > MAX_DIGITS:', "if found is None:"),
    )
    table = replay_rows(env_file, tmp_path / "work")
    assert table["gold solutions"][0] == table["no-op"][0] == PASS
    status, reason = table["shotgun answer"]
    assert status == FAIL and "a shotgun list of candidates earned 0.57" in reason
    status, reason = table[FAILURES_ROW]
    assert status == FAIL and reason.startswith("the agent can break the env: sample 0")
    assert "tampering with the checks made turn_reward failed: ValueError: Exceeds the limit" in (
        reason
    )


@pytest.mark.slow
def test_check_catches_a_simulated_user_whose_reward_pays_a_shotgun(tmp_path):
    env_file = variant(
        tmp_path,
        "user_simulator_env.py",
        # solved whenever the agent names the fix, asked or not: a list of every fix solves all
        (
            "return 1.0 if result.data.solved else 0.0",
            "said = [str(m.get('content')).lower() for m in result.messages[1:]]\n"
            "        return 1.0 if any(item['fix'] in s for s in said) else 0.0",
        ),
    )
    table = replay_rows(env_file, tmp_path / "work")
    assert table["gold solutions"][0] == table["no-op"][0] == table[FAILURES_ROW][0] == PASS
    status, reason = table["shotgun answer"]
    assert status == FAIL and "a shotgun list of candidates earned 1" in reason


def replays_report(**changes: object) -> dict:
    """A replays report of one sample whose every replay earned what it should."""
    outcome = {"index": 0, "prompt": "Guess.", "gold": 0.93, "noop": 0.0}
    report: dict = {"outcomes": [outcome], "tools": False, "failure_score": 0.0}
    report |= {
        f"{kind}_failures": [] for kind in ("gold", "noop", "tool_touch", "shotgun", "two_shots")
    }
    report |= {"tamper_failures": [], "broken_failures": [], "eval_pass_threshold": 0.5}
    return report | changes


def test_a_failure_that_pays_more_than_a_no_op_fails_the_failures_row(tmp_path):
    replays = ReplayChecks(find_env(EXAMPLES / "guess_number_env.py"), tmp_path, 0.9, 0.1, 60)
    table = {row.name: row for row in replays.reward_rows(replays_report())}
    assert {row.status for row in table.values()} == {PASS}
    paying = {row.name: row for row in replays.reward_rows(replays_report(failure_score=0.5))}
    assert paying[FAILURES_ROW].status == FAIL
    assert paying[FAILURES_ROW].reason.startswith("failure_score 0.5 pays a broken judge or hook")


def test_a_gold_solution_below_the_pass_threshold_warns_how_to_set_it(tmp_path):
    replays = ReplayChecks(find_env(EXAMPLES / "guess_number_env.py"), tmp_path, 0.9, 0.1, 60)
    (gold, *_) = replays.reward_rows(replays_report(eval_pass_threshold=1.0))
    assert gold.status == "WARN"
    assert "1 earn less than eval_pass_threshold 1 (sample 0: 0.93)" in gold.reason
    assert gold.reason.endswith("set eval_pass_threshold to what a solved task earns at least")


def test_replays_that_run_past_the_timeout_fail_every_replay_and_door_row(tmp_path):
    import subprocess
    import sys

    from hermes_envgen.devtools.check import DOOR_ROWS, REPLAY_ROWS

    replays = ReplayChecks(find_env(EXAMPLES / "guess_number_env.py"), tmp_path, 0.9, 0.1, 0.5)
    replays.process = subprocess.Popen(  # an env process that never reports in time
        [sys.executable, "-c", "import time; time.sleep(30)"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    rows = replays.rows(stubbed=True)
    assert [row.name for row in rows] == [*REPLAY_ROWS, "judge injection", *DOOR_ROWS]
    assert {row.status for row in rows} == {FAIL}
    assert rows[-1].reason == "the env's reward replays took more than 0.5 s (--timeout)"
