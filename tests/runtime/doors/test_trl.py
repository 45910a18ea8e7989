"""The door to TRL, proven with the real library: GRPOTrainer steps on CPU.

``environment_factory``: TRL generates with a tiny model (a random Qwen2 steered by a script
to call ``write_file``: see ``testing.scripted_model``), parses the call with its own Qwen3
template, runs it as a method of the env's TRL class in the task's sandbox, and scores each
rollout with the env's ``compute_reward``. ``rollout_func``: the env's own loop samples in
token mode from the test kit's stub, and TRL trains on exactly the tokens the stub generated.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import pickle

import pytest
from terminal_env import TASKS, TerminalTaskEnv

from hermes_envgen.runtime.errors import DoorUnavailable
from hermes_envgen.testing.tokenizer import build_offline_tokenizer

REQUIRE_VARIABLE = "HERMES_ENVGEN_REQUIRE_TORCH"  # CI: torch and TRL are installed, so run
GREETING, SORTING = "greeting.txt", "sorted.txt"

SLOW = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def trl():
    """TRL and torch (scripts/install-torch-cpu.sh, scripts/install-trainers.sh)."""
    missing = [m for m in ("torch", "trl") if importlib.util.find_spec(m) is None]
    if missing:
        reason = f"{', '.join(missing)} not installed (scripts/install-trainers.sh)"
        if os.environ.get(REQUIRE_VARIABLE) == "1":
            pytest.fail(f"{REQUIRE_VARIABLE}=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import trl

    return trl


def grpo_args(trl, tmp_path, **overrides):
    values = dict(
        output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, max_steps=1,
        per_device_train_batch_size=4, num_generations=2, max_completion_length=256,
        report_to="none", logging_steps=1, save_strategy="no", seed=0,
    )  # fmt: skip
    return trl.GRPOConfig(**(values | overrides))


@SLOW[0]
@SLOW[1]
def test_a_grpo_step_calls_the_envs_tools_in_its_sandbox_and_is_rewarded_by_compute_reward(
    trl, offline_tokenizer, tmp_path
):
    from transformers import AutoTokenizer
    from transformers.utils import get_json_schema
    from trl.chat_template_utils import qwen3_chat_template

    from hermes_envgen.runtime.doors import trl as door
    from hermes_envgen.testing.scripted_model import scripted_model

    factory = door.environment_factory(
        TerminalTaskEnv,
        tokenizer_name=str(offline_tokenizer),
        sandbox_root=str(tmp_path / "sandboxes"),
        enabled_toolsets=["write_file"],
    )
    # picklable, for TRL's async trainer: the factory and an environment it made
    again = pickle.loads(pickle.dumps(factory))
    assert type(pickle.loads(pickle.dumps(again()))).__name__ == "TerminalTaskEnvTRL"
    environment_class = factory.environment_class
    schema = get_json_schema(environment_class.write_file)
    assert schema["function"]["parameters"]["required"] == ["path", "content"]

    rows = door.dataset(factory)
    assert sorted(json.loads(r["task"])["prompt"] for r in rows) == sorted(
        t["prompt"] for t in TASKS
    )
    assert rows[0]["prompt"][0]["role"] == "system"  # the env's opening messages
    rows = rows.filter(lambda r: GREETING in r["task"] or SORTING in r["task"])

    # TRL's own Qwen3 template (it parses tool calls only for templates it knows), over the
    # offline tokenizer's bytes; the model is steered to write hello into greeting.txt
    tokenizer = AutoTokenizer.from_pretrained(
        build_offline_tokenizer(tmp_path / "qwen3-tokenizer", chat_template=qwen3_chat_template)
    )
    greeting = next(r for r in rows if GREETING in r["task"])["prompt"]
    call = {"name": "write_file", "arguments": {"path": GREETING, "content": "hello\n"}}
    conversation = [
        *greeting,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": call}],
        },
        {"role": "tool", "name": "write_file", "content": "ok"},
        {"role": "assistant", "content": "Done."},
    ]
    whole = tokenizer.apply_chat_template(conversation, tools=[schema], tokenize=False)
    opening = tokenizer.apply_chat_template(
        greeting, tools=[schema], tokenize=False, add_generation_prompt=True
    )
    script = tokenizer(whole[len(opening) - 80 :], add_special_tokens=False)["input_ids"]
    model = scripted_model(
        len(tokenizer),
        script,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
    )

    scored = []

    def watched_reward(completions, environments, **kwargs):
        rewards = door.env_reward(completions, environments, **kwargs)
        scored.extend(zip([json.loads(e.task) for e in environments], completions, rewards))
        return rewards

    trainer = trl.GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[watched_reward],
        train_dataset=rows,
        args=grpo_args(trl, tmp_path),
        environment_factory=factory,
    )
    trainer.train()
    log = trainer.state.log_history[0]
    print("GRPO step (environment_factory):", json.dumps(log, default=str))
    for task, completion, reward in scored:
        calls = [c for m in completion for c in m.get("tool_calls") or []]
        print(f"  {task['prompt'][:40]!r}: tool calls {json.dumps(calls)}, reward {reward}")
    assert log["tools/call_frequency"] == 1.0 and log["tools/failure_frequency"] == 0.0
    assert math.isfinite(log["loss"])
    # the write ran in each task's sandbox; compute_reward's check paid the greeting task only
    assert sorted((GREETING in t["prompt"], r) for t, _, r in scored) == [
        (False, 0.0), (False, 0.0), (True, 1.0), (True, 1.0),
    ]  # fmt: skip
    assert log["rewards/watched_reward/mean"] == 0.5


@SLOW[0]
@SLOW[1]
def test_rollout_func_trains_on_the_tokens_the_env_loop_sampled(
    trl, stub_server, offline_tokenizer, tmp_path
):
    from conftest import EXAMPLES
    from transformers import AutoTokenizer

    from hermes_envgen.runtime.doors import trl as door
    from hermes_envgen.testing.grpo import tiny_causal_lm

    stub = stub_server(EXAMPLES / "stub_script.yaml", tokenizer=offline_tokenizer)
    rollouts = door.rollout_func(
        TerminalTaskEnv,
        base_url=stub.base_url,
        model_name="stub-model",
        tokenizer_name=str(offline_tokenizer),
        sandbox_root=str(tmp_path / "sandboxes"),
    )
    rows = door.dataset(rollouts).filter(lambda r: GREETING in r["task"])
    tokenizer = AutoTokenizer.from_pretrained(offline_tokenizer)

    # the stub's script: each greeting rollout either solves it (terminal) or not (write_file)
    out = rollouts([rows[0]["prompt"]] * 2)
    assert sorted(out["env_reward"]) == [0.0, 1.0]
    for completion, mask in zip(out["completion_ids"], out["env_mask"]):
        generated = tokenizer.decode([t for t, m in zip(completion, mask) if m])
        assert "<tool_call>" in generated  # what the stub sampled: trained
        masked = tokenizer.decode([t for t, m in zip(completion, mask) if not m])
        assert "<tool_response>" in masked  # the tool's result: not trained

    trainer = trl.GRPOTrainer(
        model=tiny_causal_lm(len(tokenizer)),
        processing_class=tokenizer,
        reward_funcs=[door.rollout_reward],
        train_dataset=rows,
        args=grpo_args(trl, tmp_path, per_device_train_batch_size=2),
        rollout_func=rollouts,
    )
    trainer.train()
    log = trainer.state.log_history[0]
    print("GRPO step (rollout_func):", json.dumps(log, default=str))
    assert log["reward"] == 0.5 and log["reward_std"] > 0
    assert math.isfinite(log["loss"]) and log["grad_norm"] > 0


def test_a_missing_trainer_library_names_the_extra(monkeypatch):
    import importlib.metadata

    from hermes_envgen.runtime.doors import trl as door

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr("hermes_envgen.runtime.doors.version", missing)
    with pytest.raises(DoorUnavailable, match=r"pip install 'hermes-envgen\[trl\]'"):
        door.require_trl()
    monkeypatch.setattr("hermes_envgen.runtime.doors.version", lambda name: "0.9.0")
    with pytest.raises(DoorUnavailable, match=r"trl 0.9.0 is not supported"):
        door.require_trl()


class Point:
    """A type of the env's own: no JSON schema describes it."""


def test_a_tool_trl_cannot_describe_or_would_shadow_its_methods_is_refused_with_the_reason():
    from hermes_envgen.runtime.doors import trl as door
    from hermes_envgen.runtime.tools.registry import tool_from_function

    def move(to: Point) -> str:
        """Move somewhere.

        Args:
            to: Where to.
        """
        return ""

    def reset(hard: bool) -> str:
        """Reset the board.

        Args:
            hard: Whether to clear it.
        """
        return ""

    with pytest.raises(DoorUnavailable, match=r"the tool 'move' cannot be offered to TRL: "):
        door._method(tool_from_function(move))
    with pytest.raises(DoorUnavailable, match=r"TRL reserves reset"):
        door._method(tool_from_function(reset))
    # a tool it can describe: typed, with its description and the sandbox kept out
    method = door._method(tool_from_function(_write, name="write"))
    from transformers.utils import get_json_schema

    schema = get_json_schema(method)["function"]
    assert schema["name"] == "write" and schema["description"] == "Write a file."
    assert schema["parameters"]["properties"] == {
        "path": {"type": "string", "description": "Where."},
        "lines": {"type": "integer", "description": "How many."},
    }


def _write(path: str, lines: int, sandbox=None) -> str:
    """Write a file.

    Args:
        path: Where.
        lines: How many.
    """
    return ""


def test_a_tool_known_by_its_schema_alone_gets_its_parameters_from_it():
    """An MCP server's tool runs through a function that takes any keywords: TRL (and OpenEnv's
    FastMCP) read the parameters from its JSON schema, not an empty signature."""
    from transformers.utils import get_json_schema

    from hermes_envgen.runtime.doors import trl as door
    from hermes_envgen.runtime.tools.registry import Tool

    async def run(context=None, **arguments):
        return ""

    schema = {
        "type": "object",
        "properties": {
            "title": {"type": "string", "description": "The note's title."},
            "count": {"type": "integer"},
        },
        "required": ["title"],
    }
    method = door._method(Tool("notes_add", "Add a note.", schema, run, "mcp"))
    described = get_json_schema(method)["function"]
    assert described["parameters"]["required"] == ["title"]
    assert described["parameters"]["properties"]["title"] == {
        "type": "string",
        "description": "The note's title.",
    }
    assert described["parameters"]["properties"]["count"]["type"] == "integer"
    odd = dict(schema, properties={"not a name": {"type": "string"}}, required=[])
    with pytest.raises(DoorUnavailable, match=r"'not a name' that is no Python name"):
        door._method(Tool("odd", "Odd.", odd, run, "mcp"))


# -- an env with turn hooks: a game played through the reply method --------------------------

WIN = ["50", "37"]  # halves the range, wins at the second guess
LOSE = ["90", "95", "99", "98", "97", "96", "94"]  # ignores the hints until the turns run out


def loop_reward(env_cls, task, turns, tokenizer, workdir) -> float:
    """What the env's own loop (as process runs it) pays ``turns`` of the scripted model."""
    import asyncio

    from hermes_envgen.testing.envs import build_env
    from hermes_envgen.testing.stub_server import StubServer

    prompt = env_cls.format_prompt(None, task)
    script = {"model": "stub-model", "conversations": [
        {"match": prompt, "turns": [{"content": t} for t in turns]}]}  # fmt: skip
    with StubServer(script) as stub:
        env = build_env(env_cls, stub.base_url, tokenizer, workdir)

        async def run() -> float:
            try:
                return float((await env.run_agent(task, split="eval")).reward)
            finally:
                await env.sandboxes.close_all()

        return asyncio.run(run())


@pytest.fixture(scope="module")
def game(offline_tokenizer, tmp_path_factory):
    """The guess game's TRL environment class, and its first game's dataset row."""
    from guess_number_env import SAMPLES, GuessNumberEnv

    from hermes_envgen.runtime.doors import trl as door

    work = tmp_path_factory.mktemp("trl-game")
    factory = door.environment_factory(
        GuessNumberEnv, tokenizer_name=str(offline_tokenizer), sandbox_root=str(work / "sb")
    )
    (row,) = [r for r in door.dataset(factory) if json.loads(r["task"]) == SAMPLES[0]]
    return factory, row, GuessNumberEnv, SAMPLES[0], work


def play(factory, row, guesses, last_word=None):
    """One TRL rollout: each guess sent through ``reply``, ``last_word`` the model's answer
    without a tool call (TRL's end of an episode); the reward and what the model read."""
    from hermes_envgen.runtime.doors import trl as door

    environment = pickle.loads(pickle.dumps(factory()))
    environment.reset(**row)
    completion, heard = [], []
    for guess in guesses:
        heard.append(environment.reply(message=guess))
        call = {"type": "function", "function": {"name": "reply", "arguments": {"message": guess}}}
        completion += [
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "name": "reply", "content": heard[-1]},
        ]
    if last_word is not None:
        completion.append({"role": "assistant", "content": last_word})
    (reward,) = door.env_reward(completions=[completion], environments=[environment])
    return reward, heard


def test_a_game_is_played_through_the_reply_method_and_paid_what_its_loop_pays(
    game, offline_tokenizer
):
    from transformers.utils import get_json_schema

    from hermes_envgen.runtime.doors import trl as door

    factory, row, env_cls, task, work = game
    schema = get_json_schema(factory.environment_class.reply)["function"]
    assert schema["name"] == "reply" and "your move in the game" in schema["description"]
    assert schema["parameters"]["required"] == ["message"]

    won, heard = play(factory, row, WIN, last_word="I won!")
    # the env's hints came back; the right guess ended the game, and the model was told so
    assert heard[0] == "Lower than 50."
    assert heard[1] == "(The conversation is over: stop calling reply and finish.)"
    lost, heard = play(factory, row, LOSE)
    assert heard[-1].endswith("(The conversation is over: stop calling reply and finish.)")
    gave_up, heard = play(factory, row, [], last_word="I could not solve this task.")
    assert (won, lost, gave_up) == (
        loop_reward(env_cls, task, WIN, offline_tokenizer, work / "win"),
        loop_reward(env_cls, task, LOSE, offline_tokenizer, work / "lose"),
        0.0,
    )
    assert won == pytest.approx(1.0 - 0.5 / 7) and lost == 0.0
    # the model's answer without a tool call is its last move, as the loop takes it
    assert play(factory, row, ["50"], last_word="37")[0] == won
    # the env's turn rewards logged as its loop logs them: each guess the hints allowed pays 1
    environment = factory()
    environment.reset(**row)
    for guess in ("50", "60", "37"):  # 60 was wasted: the hint said lower than 50
        environment.reply(message=guess)
    logged: dict[str, float] = {}
    door.env_reward(completions=[[]], environments=[environment], log_metric=logged.__setitem__)
    assert logged["env/mean_turn_reward"] == pytest.approx(2 / 3)


def test_a_reply_after_the_game_ended_is_refused_in_one_line_and_changes_nothing(game):
    factory, row, *_ = game
    environment = factory()
    environment.reset(**row)
    environment.reply(message="37")  # won at the first guess
    refused = environment.reply(message="12")
    assert refused.startswith("Error: the conversation is over (the env ended the conversation)")
    assert "\n" not in refused
    completion = [{"role": "assistant", "content": "Yes!"}]
    from hermes_envgen.runtime.doors import trl as door

    assert door.env_reward(completions=[completion], environments=[environment]) == [1.0]


def test_an_env_without_turn_hooks_has_no_reply_method(offline_tokenizer):
    from hermes_envgen.runtime.doors import trl as door

    factory = door.environment_factory(TerminalTaskEnv, tokenizer_name=str(offline_tokenizer))
    assert not hasattr(factory.environment_class, "reply")
