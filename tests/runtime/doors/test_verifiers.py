"""The door to verifiers, proven with the real library: verifiers' own evaluation entry point
(vf-eval, in .venv-vf: verifiers pins mcp 2.0, which the project cannot share) runs the example
env's tasks as a verifiers taskset against the test kit's stub server. The env is served on
127.0.0.1 by hermes_envgen.runtime.doors.verifiers; each rollout's tool calls run in a sandbox
of its own through the env's code, and its reward is the env's compute_reward: the gold
solutions earn what they earn through the env's own loop (as process runs it), a no-op nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from terminal_env import TASKS, TerminalTaskEnv

from hermes_envgen.runtime.errors import DoorUnavailable
from hermes_envgen.testing.stub_server import StubServer

REPO = Path(__file__).resolve().parents[3]
VERIFIERS_VENV = REPO / ".venv-vf"
REQUIRE_VARIABLE = "HERMES_ENVGEN_REQUIRE_TORCH"  # CI installs the trainers' libraries
NOOP_REPLY = "I cannot do this task."


def gold_conversations() -> list[dict]:
    """examples/stub_script.yaml's conversations that solve the tasks (the first of each)."""
    script = yaml.safe_load((REPO / "examples" / "stub_script.yaml").read_text())
    seen: set[str] = set()
    gold = []
    for conversation in script["conversations"]:
        if conversation["match"] not in seen:
            seen.add(conversation["match"])
            gold.append(conversation)
    assert len(gold) == len(TASKS)
    return gold


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def evaluated(offline_tokenizer, tmp_path_factory):
    """vf-eval over the env's tasks, two rollouts each: the stub hands each task's rollouts the
    gold solution and a no-op in turn. Returns the traces by task, the rewards the env's own
    loop gives the gold solutions, and the door's sessions and sandboxes."""
    if not (VERIFIERS_VENV / ".complete").is_file():
        reason = "verifiers is not installed (scripts/install-verifiers.sh)"
        if os.environ.get(REQUIRE_VARIABLE) == "1":
            pytest.fail(f"{REQUIRE_VARIABLE}=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    from hermes_envgen.runtime.doors import shared_sessions
    from hermes_envgen.runtime.doors import verifiers as door
    from hermes_envgen.testing.envs import build_env
    from hermes_envgen.testing.serving import served

    gold = gold_conversations()
    noop = [{"match": c["match"], "turns": [{"content": NOOP_REPLY}]} for c in gold]
    model = "stub-model"
    work = tmp_path_factory.mktemp("verifiers-door")
    sandboxes = work / "sandboxes"

    # The env's own loop, as process runs it, on the gold solutions alone.
    with StubServer({"model": model, "conversations": gold}) as stub:
        env = build_env(TerminalTaskEnv, stub.base_url, offline_tokenizer, work / "loop")

        async def through_loop() -> list[float]:
            rollouts = [await env.run_agent(task, split="eval") for task in TASKS]
            await env.sandboxes.close_all()
            return [r.reward for r in rollouts]

        loop_rewards = asyncio.run(through_loop())
    by_prompt = {task["prompt"]: reward for task, reward in zip(TASKS, loop_rewards)}

    settings = {"tokenizer_name": str(offline_tokenizer), "sandbox_root": str(sandboxes)}
    app = door.verifiers_app(TerminalTaskEnv, idle_timeout=120.0, **settings)
    # Gold first, then the no-op, for each task (the stub hands matching conversations in turn).
    script = {"model": model, "conversations": [c for pair in zip(gold, noop) for c in pair]}
    with served(app) as url:
        with StubServer(script) as stub:
            ran = vf_eval(url, stub.base_url, model, work)
        assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
        (traces_file,) = (work / "out").rglob("traces.jsonl")
        episodes = [json.loads(line) for line in traces_file.read_text().splitlines()]
        thread_of_env = shared_sessions(TerminalTaskEnv, settings, 120.0)
        yield {
            "episodes": episodes,
            "loop_rewards": by_prompt,
            "sessions": thread_of_env.sessions,
            "sandboxes": sandboxes,
            "url": url,
            "work": work,
        }


def vf_eval(url: str, base_url: str, model: str, work: Path) -> subprocess.CompletedProcess:
    """``python -m hermes_envgen_verifiers`` (vf-eval with the taskset and its chat harness) in
    .venv-vf: the env's training tasks at ``url``, two rollouts each, the model at ``base_url``;
    its traces under ``work / "out"``."""
    environment = {
        **os.environ,
        "PYTHONPATH": str(REPO / "src"),  # hermes_envgen_verifiers, nothing else of ours
        "PATH": f"{VERIFIERS_VENV / 'bin'}:{os.environ['PATH']}",  # its uv, its python
        # verifiers' chat harness is a PEP 723 script that uv prepares: from the wheels the
        # install downloaded, never the index
        "UV_NO_INDEX": "1",
        "UV_FIND_LINKS": str(VERIFIERS_VENV / "wheels"),
        "PRIME_API_KEY": "unused",  # the stub asks for none; verifiers wants the variable
        "NO_COLOR": "1",
    }
    environment.pop("VIRTUAL_ENV", None)
    command = [
        str(VERIFIERS_VENV / "bin" / "python"),
        "-m",
        "hermes_envgen_verifiers",  # vf-eval hermes-envgen-verifiers, the chat harness
        url,
        "--env.taskset.split",
        "train",  # the example envs keep their tasks as one list
        "-r",
        "2",
        "-m",
        model,
        "--client.base-url",
        base_url,
        "--no-push",
        "-o",
        str(work / "out"),
    ]
    return subprocess.run(
        command, env=environment, capture_output=True, text=True, timeout=300, cwd=work
    )


def rollouts_by_task(episodes: list[dict]) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for episode in episodes:
        assert episode["ok"] and not episode["errors"], episode["errors"]
        (trace,) = episode["traces"]
        prompt = json.loads(trace["task"]["data"]["task"])["prompt"]
        found.setdefault(prompt, []).append(trace)
    return found


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_vf_eval_pays_the_gold_solutions_what_the_envs_loop_pays_and_a_noop_nothing(evaluated):
    by_task = rollouts_by_task(evaluated["episodes"])
    assert sorted(by_task) == sorted(t["prompt"] for t in TASKS)
    paid = {}
    for prompt, traces in by_task.items():
        assert len(traces) == 2
        # the taskset's own harness (verifiers' chat loop), verifiers' default for it
        assert {t["agent"]["config"]["harness"]["id"] for t in traces} == {
            "hermes-envgen-verifiers"
        }
        assert {t["name"] for t in traces[0]["tools"]} >= {"terminal", "write_file", "read_file"}
        rewards = {}
        for trace in traces:
            replies = [n["message"] for n in trace["nodes"] if "message" in n]
            said = [m.get("content") for m in replies if m["role"] == "assistant"]
            kind = "noop" if said == [NOOP_REPLY] else "gold"
            rewards[kind] = trace["rewards"]["env_reward"]["score"]
            if kind == "gold":  # its tool calls ran, their results came back from the env
                assert any(m["role"] == "tool" for m in replies)
            assert trace["metrics"]["env/failed"] == 0.0
        assert rewards["gold"] == evaluated["loop_rewards"][prompt] == 1.0
        assert rewards["noop"] == 0.0
        paid[prompt[:30]] = rewards
    print("verifiers door, vf-eval's rewards per task:", paid)


@pytest.fixture(scope="module")
def game_evaluated(offline_tokenizer, tmp_path_factory):
    """vf-eval over the guess game's two games, two rollouts each: the scripted model plays
    each game through the reply tool and wins, then gives up at once."""
    if not (VERIFIERS_VENV / ".complete").is_file():
        pytest.skip("verifiers is not installed (scripts/install-verifiers.sh)")
    from guess_number_env import SAMPLES, GuessNumberEnv

    from hermes_envgen.runtime.doors import verifiers as door
    from hermes_envgen.testing.policy import anchored
    from hermes_envgen.testing.serving import served

    work = tmp_path_factory.mktemp("verifiers-game")
    conversations = []
    for game in SAMPLES:
        match = anchored(GuessNumberEnv.format_prompt(None, game))
        moves = [{"tool_calls": [{"name": "reply", "arguments": {"message": guess}}]}
                 for guess in game["player"]]  # fmt: skip
        conversations += [
            {"match": match, "turns": [*moves, {"content": "I won."}]},
            {"match": match, "turns": [{"content": NOOP_REPLY}]},
        ]
    settings = {"tokenizer_name": str(offline_tokenizer), "sandbox_root": str(work / "sb")}
    app = door.verifiers_app(GuessNumberEnv, idle_timeout=120.0, **settings)
    with served(app) as url:
        with StubServer({"model": "stub-model", "conversations": conversations}) as stub:
            ran = vf_eval(url, stub.base_url, "stub-model", work)
        assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
        (traces_file,) = (work / "out").rglob("traces.jsonl")
        yield [json.loads(line) for line in traces_file.read_text().splitlines()], url


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_vf_eval_plays_a_game_through_the_reply_tool_and_is_paid_what_the_loop_pays(
    game_evaluated,
):
    episodes, _ = game_evaluated
    paid = []
    for episode in episodes:
        assert episode["ok"] and not episode["errors"], episode["errors"]
        (trace,) = episode["traces"]
        assert {t["name"] for t in trace["tools"]} == {"reply"}
        replies = [n["message"] for n in trace["nodes"] if "message" in n]
        heard = [str(m.get("content")) for m in replies if m["role"] == "tool"]
        reward = trace["rewards"]["env_reward"]["score"]
        if heard:  # the gold play: a hint, then the end of the game, from the env's hooks
            assert heard[0].startswith(("Lower than", "Higher than"))
            assert "The conversation is over" in heard[-1]
        paid.append((bool(heard), reward))
    # each game won at the second guess, as process pays it (test_door_trl); a give-up nothing
    assert sorted(paid) == [(False, 0.0)] * 2 + [(True, pytest.approx(1.0 - 0.5 / 7))] * 2


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_turn_of_a_game_over_http_is_answered_by_its_hooks(game_evaluated):
    import httpx
    from guess_number_env import SAMPLES

    _, url = game_evaluated
    opened = httpx.post(f"{url}/sessions", json={"task": json.dumps(SAMPLES[1])}, timeout=30)
    session = opened.json()["session"]
    turn = httpx.post(f"{url}/sessions/{session}/turn", json={"message": "10"}, timeout=30)
    assert turn.json() == {
        "messages": [{"role": "user", "content": "Lower than 10."}],
        "reward": 1.0,
        "over": False,
        "text": "Lower than 10.",
    }
    won = httpx.post(f"{url}/sessions/{session}/turn", json={"message": "6"}, timeout=30).json()
    assert won["over"] and won["messages"] == []
    malformed = httpx.post(f"{url}/sessions/{session}/turn", json={"message": 6}, timeout=30)
    assert malformed.status_code == 400 and "message" in malformed.json()["error"]
    # scored as the loop scores it: won at the second guess; the session closed after it
    scored = httpx.post(f"{url}/sessions/{session}/score", json={"messages": []}, timeout=30)
    assert scored.json()["reward"] == pytest.approx(1.0 - 0.5 / 7)
    gone = httpx.post(f"{url}/sessions/{session}/turn", json={"message": "6"}, timeout=30)
    assert gone.status_code == 404


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_each_rollout_had_a_sandbox_of_its_own_closed_once_scored(evaluated):
    # the count task's gold run wrote count.txt in its own sandbox; the no-op's never saw it
    # (it earned 0), and once scored every session was closed with its sandbox
    assert len(evaluated["sessions"]) == 0
    assert not list(evaluated["sandboxes"].rglob("count.txt"))
    assert not list(evaluated["sandboxes"].rglob("numbers.txt"))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_door_refuses_what_it_cannot_serve_in_one_line(evaluated):
    import httpx

    url = evaluated["url"]
    unknown = httpx.post(f"{url}/sessions/train-nope/score", json={"messages": []}, timeout=30)
    assert unknown.status_code == 404 and "no open session" in unknown.json()["error"]
    malformed = httpx.post(f"{url}/sessions", json={"task": 3}, timeout=30)
    assert malformed.status_code == 400 and "task" in malformed.json()["error"]
    assert httpx.get(f"{url}/tasks?split=test", timeout=30).status_code == 400


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_taskset_whose_env_is_not_served_says_so_in_one_line(evaluated):
    port = free_port()  # nothing listens there
    python = str(VERIFIERS_VENV / "bin" / "python")
    output = str(evaluated["work"] / "unserved")
    ran = subprocess.run(
        [
            python,
            "-m",
            "hermes_envgen_verifiers",
            f"http://127.0.0.1:{port}",
            "--no-push",
            "-o",
            output,
        ],
        env={**os.environ, "PYTHONPATH": str(REPO / "src"), "PRIME_API_KEY": "unused"},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert ran.returncode == 2, ran.stdout[-2000:] + ran.stderr[-2000:]
    (line,) = [line for line in ran.stderr.splitlines() if line.startswith("error:")]
    assert f"127.0.0.1:{port} did not list its tasks" in line
    assert "python -m hermes_envgen.runtime.doors.verifiers" in line
    assert "Traceback" not in ran.stderr


class JudgedByThePolicy(TerminalTaskEnv):
    """The example env with a judge on the policy's own server (judge_base_url None)."""

    def make_judge(self):  # type: ignore[no-untyped-def]
        return self.policy


def test_a_reward_whose_judge_is_the_policys_server_is_refused_at_export(offline_tokenizer, capsys):
    from hermes_envgen.runtime.doors import verifiers as door

    with pytest.raises(DoorUnavailable, match="judge on the policy's server") as refused:
        door.verifiers_app(JudgedByThePolicy, tokenizer_name=str(offline_tokenizer))
    assert "judge_base_url" in str(refused.value) and "\n" not in str(refused.value)
    # served from the command line: that reason in one line, exit 2, nothing served
    where = f"{__name__}:JudgedByThePolicy"
    assert door.main([where, "--tokenizer", str(offline_tokenizer)]) == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error:")]
    assert "judge on the policy's server" in line


def test_without_verifiers_the_taskset_says_how_to_install_it_and_exits_2():
    """In the project's own venv (no verifiers): one line naming the install, exit 2."""
    ran = subprocess.run(
        [sys.executable, "-m", "hermes_envgen_verifiers", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
    )
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert ran.stdout == ""
    (line,) = ran.stderr.splitlines()
    assert line.startswith("error: verifiers is not installed: pip install 'verifiers>=0.4,<0.5'")


def test_the_taskset_imports_nothing_of_hermes_envgen():
    """It runs in verifiers' environment, where hermes_envgen's dependencies are not."""
    import ast

    for path in (REPO / "src" / "hermes_envgen_verifiers").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            assert not any(n == "hermes_envgen" or n.startswith("hermes_envgen.") for n in names)
