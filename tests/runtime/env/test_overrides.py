"""What the base env does around an author's overrides: a plain read of ``ctx.terminal`` in
``compute_reward`` runs the command, ``ctx.cleanup()`` runs un-awaited, evaluation's entries stay
out of the env's training buffers, a ``wandb_log`` without ``super()`` is said once, and an
override returning the wrong shape stops the run in one line."""

from __future__ import annotations

import asyncio
import gc
import logging
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from conftest import EXAMPLES
from helpers import TESTS
from helpers.skill_env import SkillEnv

from hermes_envgen.runtime.env.overrides import EVALUATING, TrainingBuffer
from hermes_envgen.runtime.errors import EnvConfigError
from hermes_envgen.runtime.loop import tool_context
from hermes_envgen.runtime.loop.sync_bridge import NotAwaited, bridged, wait_here
from hermes_envgen.runtime.loop.tool_context import ToolContext
from hermes_envgen.testing.envs import build_env
from hermes_envgen.testing.runner import offline_environment

SCRIPT = EXAMPLES / "stub_script.yaml"


async def later(value, delay=0.01):
    await asyncio.sleep(delay)
    return value


def test_a_plain_read_in_a_bridged_coroutine_waits_while_the_loop_runs_on():
    ticks = []

    async def ticker():
        for _ in range(5):
            ticks.append(1)
            await asyncio.sleep(0.002)

    async def reward():
        value = wait_here(later(7, delay=0.03), "later()")  # no await: the loop goes on
        return value + await later(1)

    async def main():
        other = asyncio.create_task(ticker())
        result = await bridged(reward())
        await other
        return result

    assert asyncio.run(main()) == 8
    assert len(ticks) == 5


def test_cancelling_a_bridged_coroutine_mid_read_runs_its_finally():
    cleaned = []

    async def reward():
        try:
            return wait_here(later(1, delay=10), "later()")
        finally:
            cleaned.append(True)

    async def main():
        task = asyncio.create_task(bridged(reward()))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert cleaned == [True]


def test_a_plain_read_outside_compute_reward_says_to_await_in_one_line():
    async def main():
        with pytest.raises(NotAwaited) as error:
            wait_here(later(1), "ctx.terminal('ls')")
        return str(error.value)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "coroutine was never awaited"
        message = asyncio.run(main())
        gc.collect()
    assert message == (
        "ctx.terminal('ls') was read without await outside compute_reward: "
        "write `await ctx.terminal('ls')`"
    )


def test_ctx_terminal_read_or_awaited_and_cleanup_left_unawaited(sandboxes, caplog):
    async def reward(ctx: ToolContext) -> tuple[int, str]:
        await ctx.write_file("a.txt", "alpha\n")
        result = ctx.terminal("cat a.txt; exit 3")  # the Hermes skill's binary reward
        return result["exit_code"], result["output"]

    async def main():
        ctx = ToolContext("skill", sandboxes)
        read = await bridged(reward(ctx))
        awaited = await ctx.terminal("echo hi")
        workspace = ctx.sandbox.workspace
        ctx.cleanup()  # no await, as the skill writes it in a finally
        await asyncio.gather(*tool_context._cleanups_running)  # it was started all the same
        return read, awaited, workspace

    with caplog.at_level(logging.WARNING):
        read, awaited, workspace = asyncio.run(main())
        never_run = ToolContext("x", sandboxes).terminal("touch never")
        del never_run
        gc.collect()
    assert read == (3, "alpha\n")
    assert awaited == {"exit_code": 0, "output": "hi\n"}
    assert not Path(workspace).exists()  # the un-awaited cleanup ran
    assert [m for m in caplog.messages if "never ran" in m] == [
        "ctx.terminal('touch never') never ran: it was neither awaited nor read "
        "(write `await ctx.terminal(...)`)"
    ]


def test_a_training_buffer_keeps_evaluations_entries_apart():
    buffer = TrainingBuffer([1.0])

    async def evaluation():
        EVALUATING.set(True)
        buffer.append(0.0)
        buffer.extend([0.5])
        return len(buffer), sum(buffer), list(buffer)

    async def main():
        seen = await asyncio.create_task(evaluation())
        buffer.append(2.0)  # training, meanwhile
        return seen

    assert asyncio.run(main()) == (3, 1.5, [1.0, 0.0, 0.5])
    assert list(buffer) == [1.0, 2.0] and len(buffer) == 2
    buffer.end_evaluation()
    assert buffer.evaluation_entries == []


@pytest.mark.slow
def test_the_guards_on_an_env_written_as_the_skill_shows(
    stub_server, offline_tokenizer, tmp_path, caplog, monkeypatch
):
    class ForgetsSuper(SkillEnv):
        async def wandb_log(self, wandb_metrics=None):
            self._reward_buffer.clear()  # and no super().wandb_log

    class NoItem(SkillEnv):
        async def get_next_item(self):
            return None

    stub = stub_server(SCRIPT)
    flags = {"sandbox_backend": "local", "sandbox_allow_unsafe_local": True}

    async def main():
        env = build_env(SkillEnv, stub.base_url, offline_tokenizer, tmp_path, **flags)
        await env.setup()
        env._reward_buffer.append(0.25)  # a training rollout's
        await env.evaluate()  # its compute_reward appends one more, seen by evaluate only
        after_eval = list(env._reward_buffer)
        # The skill's LLM judge asks self.server.chat_completion() (here the stub's fixed reply).
        judged = await env.server.chat_completion(
            messages=[{"role": "user", "content": 'Score the answer; reply {"score": x}.'}],
            max_tokens=32,
        )

        forgets = build_env(ForgetsSuper, stub.base_url, offline_tokenizer, tmp_path, **flags)
        await forgets.setup()
        for _ in range(3):
            await forgets.wandb_log({})

        # evaluate always saves: with no data_dir_to_save_evals, to eval_results/<name>
        monkeypatch.chdir(tmp_path)
        unset = build_env(
            SkillEnv,
            stub.base_url,
            offline_tokenizer,
            tmp_path,
            data_dir_to_save_evals=None,
            **flags,
        )
        assert unset.config.data_dir_to_save_evals == "eval_results/skill-env"
        # default_toolsets, the skill's hint, stands in when enabled_toolsets is left unset
        hinted = build_env(
            SkillEnv, stub.base_url, offline_tokenizer, tmp_path, enabled_toolsets=None, **flags
        )
        assert hinted._resolve_tools_for_group()[1] == env._resolve_tools()[1]
        assert (
            "terminal" in hinted._resolve_tools()[1] and "python" not in hinted._resolve_tools()[1]
        )

        none = build_env(NoItem, stub.base_url, offline_tokenizer, tmp_path, **flags)
        await none.setup()
        with pytest.raises(EnvConfigError) as error:
            await none.get_next_item()
        return after_eval, judged.choices[0].message.content, str(error.value)

    with caplog.at_level(logging.WARNING):
        after_eval, judge_reply, error = asyncio.run(main())
    assert after_eval == [0.25]
    assert judge_reply == "(the stub's script has no conversation for this prompt)"
    assert [m for m in caplog.messages if "super().wandb_log" in m] == [
        "warning: ForgetsSuper.wandb_log did not call `await super().wandb_log(wandb_metrics)`: "
        "the base's metrics (reward, turns, tool errors, evaluation) are not logged, nothing "
        "goes to W&B"
    ]
    assert error.startswith("NoItem.get_next_item returned None: it must return the next")


BAD_ENV = """
import sys
sys.path.insert(0, {tests!r})
from helpers.skill_env import SkillEnv


class Bad(SkillEnv):
{override}


if __name__ == "__main__":
    Bad.cli()
"""
NO_ITEM = """\
    async def get_next_item(self):
        return None"""
NO_EVAL_TASKS = """\
    async def setup(self):
        await super().setup()
        self._eval_items = []"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "override", "message"),
    [
        ("process", NO_ITEM, "Bad.get_next_item returned None: it must return the next"),
        ("evaluate", NO_EVAL_TASKS, "Bad.setup left no evaluation tasks: self._eval_items is []"),
    ],
)
def test_an_override_of_the_wrong_shape_stops_the_run_in_one_line(
    stub_server, offline_tokenizer, tmp_path, mode, override, message
):
    source = BAD_ENV.format(tests=str(TESTS), override=override)
    env_file = tmp_path / "bad_env.py"
    env_file.write_text(source)
    stub = stub_server(SCRIPT)
    result = subprocess.run(
        [
            sys.executable,
            str(env_file),
            mode,
            "--openai.base_url",
            stub.base_url,
            "--env.tokenizer_name",
            str(offline_tokenizer),
            "--env.sandbox_root",
            str(tmp_path / "sandboxes"),
            "--env.sandbox_allow_unsafe_local",
            "true",
            "--env.data_dir_to_save_evals",
            str(tmp_path / "evals"),
            "--env.data_path_to_save_groups",
            str(tmp_path / "groups.jsonl"),
        ],
        cwd=tmp_path,
        env=offline_environment(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and message in errors[0], result.stderr[-3000:]
