"""``hermes-envgen rescore``: a real run of a small env (process mode against the stub model, in
bwrap sandboxes) scored again by the env as it is now, its tool calls replayed in fresh
sandboxes. One run serves the module; each rescore is the real CLI and its env process.
"""

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
from typer.testing import CliRunner

from hermes_envgen.cli import app
from hermes_envgen.testing import OfflineRun

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap is not installed"),
]

ENV = '''
from pathlib import Path

from atroposlib.envs.server_handling.server_baseline import APIServerConfig

from hermes_envgen.runtime import HermesAgentBaseEnv, HermesAgentEnvConfig, tool

LEDGER = Path(__file__).with_name("ledger.txt")


@tool(toolset="ledger")
def stamp(note: str) -> str:
    """Write a note into the ledger, a file outside the sandbox (a side effect replay repeats).

    Args:
        note: what to write.
    """
    with LEDGER.open("a") as ledger:
        ledger.write(note + "\\n")
    return f"entry {len(LEDGER.read_text().splitlines())}"


SAMPLES = TASKS


class RescoreEnv(HermesAgentBaseEnv):
    name = "rescore_env"
    env_config_cls = HermesAgentEnvConfig
    samples = SAMPLES

    @classmethod
    def config_init(cls):
        config = HermesAgentEnvConfig(
            group_size=2,
            max_agent_turns=4,
            enabled_toolsets=["terminal", "ledger"],
            sandbox_backend="bwrap",
            eval_size=1,
            ensure_scores_are_not_same=False,
            tokenizer_name="unused",
            use_wandb=False,
        )
        return config, [APIServerConfig(base_url="http://127.0.0.1:9/v1", model_name="stub")]

    async def setup(self):
        await super().setup()
        self.train_items = list(SAMPLES)  # process draws each task once, in this order

    def format_prompt(self, item):
        return item["prompt"]

    async def prepare_sandbox(self, item, ctx):
        await ctx.write_file("task.txt", item["prompt"])

    async def compute_reward(self, item, result, ctx):
        written = (await ctx.terminal("cat answer.txt"))["output"].strip()
        return REWARD


if __name__ == "__main__":
    RescoreEnv.cli()
'''
TASKS = [
    {"prompt": "Write hello into answer.txt.", "answer": "hello"},
    {"prompt": "Write world into answer.txt.", "answer": "world"},
    {"prompt": "Write nothing useful into answer.txt.", "answer": "42"},
    {"prompt": "Stamp the ledger, then write done into answer.txt.", "answer": "done"},
]
STRICT = '1.0 if written == item["answer"] else 0.0'
# The changed reward: case no longer matters. Only the rollouts that wrote WORLD change.
LENIENT = '1.0 if written.lower() == item["answer"].lower() else 0.0'
RANDOM = "__import__('random').random()"


def write(command: str) -> dict:
    return {"tool_calls": [{"name": "terminal", "arguments": {"command": command}}]}


SCRIPT = {
    "conversations": [
        {"match": "Write hello", "turns": [write("echo hello > answer.txt"), {"content": "ok"}]},
        {"match": "Write world", "turns": [write("echo WORLD > answer.txt"), {"content": "ok"}]},
        {"match": "nothing useful", "turns": [write("echo 7 > answer.txt"), {"content": "ok"}]},
        {
            "match": "Stamp the ledger",
            "turns": [
                {"tool_calls": [{"name": "stamp", "arguments": {"note": "was here"}}]},
                write("echo done > answer.txt"),
                {"content": "ok"},
            ],
        },
    ]
}


def env_file(directory: Path, reward: str) -> Path:
    path = directory / "rescore_env.py"
    path.write_text(ENV.replace("REWARD", reward).replace("TASKS", repr(TASKS)))
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory, stub_server_module):
    """Four groups of two rollouts of the strict env (every task once)."""
    workdir = tmp_path_factory.mktemp("run")
    target = env_file(workdir, STRICT)
    stub = stub_server_module(SCRIPT)
    groups = OfflineRun.against_stub(target, stub.base_url, workdir).process(groups=4, group_size=2)
    return workdir, workdir / "groups.jsonl", groups


@pytest.fixture(scope="module")
def stub_server_module():
    from hermes_envgen.testing.stub_server import StubServer

    started = []

    def start(script):
        server = StubServer(script).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def rescore(*args: str):
    return CliRunner().invoke(app, ["rescore", *args])


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()[1:]]


def prompts_of(groups: list[dict]) -> list[str]:
    return [
        next(m["content"] for m in conversation if m["role"] == "user")
        for group in groups
        for conversation in group["messages"]
    ]


@pytest.fixture(scope="module")
def strict(run, tmp_path_factory):
    """The run rescored by the env as it was: the CLI's output and its lines."""
    workdir, groups_file, _ = run
    out = tmp_path_factory.mktemp("strict") / "out.jsonl"
    result = rescore(str(groups_file), "--env", str(workdir / "rescore_env.py"), "-o", str(out))
    assert result.exit_code == 0, result.output
    return result.output, out


def test_the_env_as_it_was_changes_nothing_and_scores_the_same_twice(run, strict):
    _, _, groups = run
    output, out = strict
    rescored = lines(out)
    assert len(rescored) == len(prompts_of(groups)) == 8
    assert not any(r["changed"] for r in rescored)
    assert all(r["deterministic"] for r in rescored)
    assert "0 changed" in output and "0 not deterministic" in output


def test_a_changed_reward_changes_exactly_the_rollouts_it_should(run, tmp_path):
    _, groups_file, groups = run
    prompts = prompts_of(groups)
    out = tmp_path / "lenient.jsonl"
    result = rescore(str(groups_file), "--env", str(env_file(tmp_path, LENIENT)), "-o", str(out))
    assert result.exit_code == 0, result.output
    rescored = lines(out)
    changed = sorted(r["index"] for r in rescored if r["changed"])
    expected = [i for i, p in enumerate(prompts) if p.startswith("Write world")]
    assert len(expected) == 2 and changed == expected
    assert all(r["old_reward"] == 0.0 and r["new_reward"] == 1.0 for r in rescored if r["changed"])
    assert "2 changed" in result.output


def test_evaluation_records_are_rescored_by_their_items(run, tmp_path):
    # The same rollouts as evaluate saves them: an item each, failures without a reward.
    _, _, groups = run
    samples = {s["prompt"]: s for s in TASKS}
    records = []
    for group in groups:
        for conversation, score in zip(group["messages"], group["scores"]):
            prompt = next(m["content"] for m in conversation if m["role"] == "user")
            records.append(
                {"item": samples[prompt], "reward": score, "failure": None}
                | {"messages": conversation, "turns_used": 2, "tool_errors": []}
            )
    records[0] |= {"reward": None, "failure": "judge failed: no reply"}
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = rescore(str(path), "--env", str(env_file(tmp_path, LENIENT)))
    assert result.exit_code == 0, result.output
    rescored = {r["index"]: r for r in lines(tmp_path / "samples.jsonl.rescored.jsonl")}
    changed = sorted(i for i, r in rescored.items() if r["changed"])
    world = [i for i, r in enumerate(records) if r["item"]["answer"] == "world"]
    assert changed == [0, *world]  # the failure is measured now, and the two WORLD rollouts
    assert rescored[0]["old_reward"] is None and rescored[0]["new_reward"] == 1.0


JUDGED = """

    def make_judge(self):
        return judge_client(self.policy, "JUDGE_URL", "judge-model")

    async def compute_reward(self, item, result, ctx):
        verdict = await ask_judge(self.judge, item["prompt"], result.final_response, item["answer"])
        return Reward(0.0, failure="judge failed") if verdict.failed else verdict.score
"""


def test_the_judge_pattern_asks_the_configured_judge_and_no_judge_scores_none(
    run, tmp_path, stub_server_module
):
    _, groups_file, groups = run
    judge = stub_server_module({"default": {"turns": [{"content": '{"score": 1}'}]}})
    source = env_file(tmp_path, STRICT).read_text()
    source = source.replace(
        "from hermes_envgen.runtime import HermesAgentBaseEnv, HermesAgentEnvConfig, tool",
        "from hermes_envgen.runtime import (\n    HermesAgentBaseEnv, HermesAgentEnvConfig, "
        "Reward, ask_judge, judge_client, tool\n)",
    )
    head, tail = source.split("    async def compute_reward", 1)
    tail = tail.split("\n\n\n", 1)[1]
    path = tmp_path / "judged_env.py"
    path.write_text(head + JUDGED.replace("JUDGE_URL", judge.base_url).lstrip("\n") + "\n\n" + tail)
    result = rescore(str(groups_file), "--env", str(path), "--no-judge", "-o", str(tmp_path / "a"))
    assert result.exit_code == 0, result.output
    assert "rescored 0 of 8 rollouts" in result.output and "8 not scored" in result.output
    assert all("asks an LLM judge" in r["skipped"] for r in lines(tmp_path / "a"))
    result = rescore(str(groups_file), "--env", str(path), "-o", str(tmp_path / "b"))
    assert result.exit_code == 0, result.output
    rescored = lines(tmp_path / "b")
    assert all(r["new_reward"] == 1.0 for r in rescored)  # the judge said 1 to every answer
    failed_before = sum(1 for g in groups for score in g["scores"] if score == 0.0)
    assert sum(r["changed"] for r in rescored) == failed_before == 4


def test_a_sandbox_that_cannot_be_rebuilt_leaves_its_rollouts_unscored(run, tmp_path):
    _, groups_file, _ = run
    source = env_file(tmp_path, STRICT).read_text()
    broken = source.replace(
        '        await ctx.write_file("task.txt", item["prompt"])',
        '        if "nothing" in item["prompt"]:\n'
        '            raise RuntimeError("the fixture is gone")\n'
        '        await ctx.write_file("task.txt", item["prompt"])',
    )
    assert broken != source
    path = tmp_path / "broken_env.py"
    path.write_text(broken)
    result = rescore(str(groups_file), "--env", str(path), "-o", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    assert "rescored 6 of 8 rollouts" in result.output and "2 not scored" in result.output
    assert "not scored: the sandbox could not be rebuilt: the fixture is gone" in result.output


def test_a_tool_with_a_side_effect_outside_the_sandbox_diverges(run, strict):
    _, _, groups = run
    output, out = strict
    rescored = {r["index"]: r for r in lines(out)}
    stamped = {i for i, p in enumerate(prompts_of(groups)) if p.startswith("Stamp")}
    assert len(stamped) == 2
    assert {i for i, r in rescored.items() if not r["reliable"]} == stamped
    for index in stamped:
        (diverged,) = rescored[index]["diverged"]
        # The run's two rollouts made entries 1 and 2; their replays make later ones.
        assert diverged.startswith("turn 1, stamp: recorded 'entry ")
        assert "replayed 'entry " in diverged
    assert "2 unreliable (replay diverged)" in output
    assert "replay diverged: turn 1, stamp" in output


def test_a_reward_that_is_not_deterministic_is_named(run, tmp_path):
    _, groups_file, _ = run
    out = tmp_path / "random.jsonl"
    result = rescore(str(groups_file), "--env", str(env_file(tmp_path, RANDOM)), "-o", str(out))
    assert result.exit_code == 0, result.output
    assert all(not r["deterministic"] for r in lines(out))
    assert "8 not deterministic" in result.output


def test_an_interrupted_rescore_resumes_where_it_stopped(run, strict, tmp_path):
    workdir, groups_file, _ = run
    out = tmp_path / "out.jsonl"
    written = strict[1].read_text().splitlines()
    # As an interruption leaves it: a header, three rollouts written, the fourth cut short.
    out.write_text("\n".join([*written[:4], written[4][:30]]) + "\n")
    target = str(workdir / "rescore_env.py")
    refused = rescore(str(groups_file), "--env", target, "-o", str(out))
    assert refused.exit_code == 2 and "--resume continues that rescore" in refused.output
    result = rescore(str(groups_file), "--env", target, "-o", str(out), "--resume")
    assert result.exit_code == 0, result.output
    assert "rescored 5 of 8 rollouts (3 from an earlier rescore)" in result.output
    assert sorted(r["index"] for r in lines(out)) == list(range(8))


def test_process_writes_its_page_with_token_views_in_the_envs_tokenizer(run):
    workdir, _, _ = run
    html = (workdir / "groups.html").read_text()
    assert html.count('<details class="tokens') == 8
    assert "&lt;|im_start|&gt;" in html  # the token's text, not its id
    assert html.count("3 trained spans · lines up") == 2  # the ledger task: three turns each
    assert "4 of 4 groups (100%) have zero variance" in html


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"event": "start"}\n', "line 1: neither a rollout nor a group"),
        ('{"messages": [{"role": "user"', "line 1: not JSON (cut short?)"),
        ("\n", "no rollouts in it"),
    ],
)
def test_a_file_of_no_rollouts_is_refused_before_the_env_is_imported(tmp_path, content, message):
    path = tmp_path / "run.jsonl"
    path.write_text(content)
    result = rescore(str(path), "--env", str(tmp_path / "no_env.py"))
    assert result.exit_code == 2 and message in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1


def test_ctrl_c_stops_the_rescore_cleanly_and_resume_finishes_it(run, tmp_path):
    _, groups_file, _ = run
    slow = env_file(tmp_path, "__import__('time').sleep(1.5) or 1.0")
    out = tmp_path / "out.jsonl"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    command = [sys.executable, "-m", "hermes_envgen", "rescore", str(groups_file)]
    command += ["--env", str(slow), "-o", str(out), "--workers", "1"]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(scratch)},
        start_new_session=True,  # the signal goes to the CLI alone, as a supervisor's would
    )
    try:
        deadline = time.monotonic() + 120
        while not (out.exists() and len(out.read_text().splitlines()) >= 2):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "no rollout was rescored in 120 s"
            time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 130, stderr
    assert "rescore interrupted: the rollouts done are in" in stderr
    assert not list(scratch.glob("rescore-*")), "the env process left its sandboxes' root"
    done = len(lines(out))
    assert 1 <= done < 8
    result = rescore(str(groups_file), "--env", str(slow), "-o", str(out), "--resume")
    assert result.exit_code == 0, result.output
    assert f"({done} from an earlier rescore)" in result.output
    assert sorted(r["index"] for r in lines(out)) == list(range(8))


def test_rollouts_of_another_env_are_refused_with_the_mismatch_named(run, tmp_path):
    workdir, groups_file, _ = run
    other = tmp_path / "other_env.py"
    source = (workdir / "rescore_env.py").read_text()
    other.write_text(
        source.replace("'Write world into answer.txt.'", "'Write planet into answer.txt.'").replace(
            '["terminal", "ledger"]', '["terminal"]'
        )
    )
    result = rescore(str(groups_file), "--env", str(other))
    assert result.exit_code == 2
    message = result.output.strip()
    assert "these rollouts are not of RescoreEnv" in message
    assert "the run calls tools this env does not have: stamp (it has terminal)" in message
    assert "rollouts are of tasks this env does not have" in message
    assert "Write world into answer.txt." in message
    assert not (tmp_path / "groups.jsonl.rescored.jsonl").exists()
