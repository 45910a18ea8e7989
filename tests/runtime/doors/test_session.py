"""One session of an env, with no trainer: a task started in its sandbox, its tools listed and
called there, the env's turn hooks asked, a transcript scored by the env's own compute_reward,
the sandbox closed; and a session nobody closes is reaped once idle."""

from __future__ import annotations

import asyncio
import functools

import pytest
from guess_number_env import MAX_GUESSES, GuessNumberEnv
from terminal_env import TASKS, TerminalTaskEnv

from hermes_envgen.runtime.doors.session import EnvSessions, SessionClosed, open_env

COUNT_TASK = TASKS[1]  # numbers.txt prepared in the sandbox; the reward checks count.txt


@pytest.fixture
def terminal_env(offline_tokenizer, tmp_path):
    return open_env(
        TerminalTaskEnv,
        tokenizer_name=str(offline_tokenizer),
        sandbox_root=str(tmp_path / "sandboxes"),
    )


def synchronous(test):
    """The async test run to its end on a loop of its own."""

    @functools.wraps(test)
    def run(*args, **kwargs):
        return asyncio.run(test(*args, **kwargs))

    return run


def workspace_of(session):
    return session.context.sandboxes.get(session.task_id).workspace


@synchronous
async def test_a_session_runs_a_task_in_its_sandbox_and_scores_it_with_compute_reward(terminal_env):
    sessions = EnvSessions(terminal_env)
    try:
        session = await sessions.open(COUNT_TASK)
        assert [m["role"] for m in session.messages] == ["system", "user"]
        assert session.messages[-1]["content"] == COUNT_TASK["prompt"]
        names = {t["function"]["name"] for t in session.tools}
        assert {"terminal", "write_file", "read_file"} <= names
        terminal = next(t for t in session.tools if t["function"]["name"] == "terminal")
        assert "command" in terminal["function"]["parameters"]["properties"]
        # prepare_sandbox put the task's file into this session's sandbox
        assert "42" in await session.call_tool("terminal", {"command": "cat numbers.txt"})
        workspace = workspace_of(session)
        assert (workspace / "numbers.txt").is_file()

        # what the model gets wrong comes back as the loop's error messages, recorded
        unknown = await session.call_tool("rm_rf", {})
        assert "unknown tool 'rm_rf'" in unknown
        assert "not valid JSON" in await session.call_tool("terminal", "{not json")
        assert [e.tool_name for e in session.result.tool_errors] == ["rm_rf", "terminal"]

        await session.call_tool("terminal", '{"command": "wc -l < numbers.txt > count.txt"}')
        transcript = [
            *session.messages,
            {"role": "assistant", "content": "", "tool_calls": [_call("terminal")]},
            {"role": "tool", "tool_call_id": "c1", "content": ""},
            {"role": "assistant", "content": "6 lines."},
        ]
        reward = await session.score(transcript)
        assert reward.score == 1.0 and reward.failure is None
        assert session.result.turns_used == 2 and session.result.finished_naturally
        assert (await session.score()) is reward  # asked once

        await sessions.close(session.task_id)
        assert not workspace.exists()
        with pytest.raises(SessionClosed):
            await session.call_tool("terminal", {"command": "true"})
    finally:
        await sessions.close_all()


@synchronous
async def test_sessions_are_isolated_and_an_unsolved_task_scores_zero(terminal_env):
    sessions = EnvSessions(terminal_env)
    try:
        solved, unsolved = await asyncio.gather(
            sessions.open(COUNT_TASK), sessions.open(COUNT_TASK)
        )
        assert workspace_of(solved) != workspace_of(unsolved)
        await solved.call_tool("write_file", {"path": "count.txt", "content": "6\n"})
        await unsolved.call_tool("write_file", {"path": "count.txt", "content": "5\n"})
        assert (await solved.score()).score == 1.0
        assert (await unsolved.score()).score == 0.0
    finally:
        await sessions.close_all()


@synchronous
async def test_the_env_draws_its_own_training_tasks(terminal_env):
    sessions = EnvSessions(terminal_env)
    try:
        tasks = await sessions.training_tasks()
        assert sorted(t["prompt"] for t in tasks) == sorted(t["prompt"] for t in TASKS)
        session = await sessions.open()  # the next training task, from get_next_item
        assert session.item in TASKS
    finally:
        await sessions.close_all()


@synchronous
async def test_the_envs_turn_hooks_answer_each_turn_and_reach_the_reward(
    offline_tokenizer, tmp_path
):
    env = open_env(
        GuessNumberEnv, tokenizer_name=str(offline_tokenizer), sandbox_root=str(tmp_path)
    )
    sessions = EnvSessions(env)
    try:
        session = await sessions.open({"secret": 6, "low": 1, "high": 20})
        assert session.tools == []
        transcript = [*session.messages, {"role": "assistant", "content": "10"}]
        turn = await session.end_turn(transcript)
        assert turn.added == [{"role": "user", "content": "Lower than 10."}]
        assert turn.reward == 1.0 and not turn.done
        transcript += [*turn.added, {"role": "assistant", "content": "6"}]
        turn = await session.end_turn(transcript)
        assert turn.done and turn.added == []
        reward = await session.score(transcript)
        assert reward.score == pytest.approx(1.0 - 0.5 * 1 / MAX_GUESSES)  # won at guess 2
    finally:
        await sessions.close_all()


class BrittleGame(GuessNumberEnv):
    """The guess game whose hint breaks on a reply that is no number (a hook an agent breaks)."""

    def env_response(self, state):  # type: ignore[no-untyped-def]
        if not state.last_reply.get("content", "").strip().isdigit():
            raise ValueError("no number")
        return super().env_response(state)


@synchronous
async def test_a_reply_that_breaks_a_hook_ends_the_conversation_and_scores_a_failure(
    offline_tokenizer, tmp_path
):
    env = open_env(BrittleGame, tokenizer_name=str(offline_tokenizer), sandbox_root=str(tmp_path))
    sessions = EnvSessions(env)
    try:
        session = await sessions.open({"secret": 6, "low": 1, "high": 20})
        assert session.hooked
        assert (await session.reply("10")).text == "Lower than 10."
        broken = await session.reply({"not": "text"})  # whatever the model sent, as its text
        assert broken.over and broken.messages == []
        refused = await session.reply("6")  # the winning guess, too late: nothing changes
        assert refused.text.startswith("Error: the conversation is over")
        reward = await session.score([{"role": "assistant", "content": "6"}])
        assert reward.score == 0.0
        assert reward.failure == "env_response failed: ValueError: no number"
    finally:
        await sessions.close_all()


class SlowGame(GuessNumberEnv):
    """The guess game whose answer takes a moment (an async hook that awaits)."""

    async def env_response(self, state):  # type: ignore[no-untyped-def, override]
        await asyncio.sleep(0.05)
        return super().env_response(state)


@synchronous
async def test_replies_sent_at_once_are_answered_one_after_another(offline_tokenizer, tmp_path):
    # A model may call reply several times in one turn (parallel tool calls): each is a turn of
    # its own, in the order sent, and none sees the conversation half-way through another.
    env = open_env(SlowGame, tokenizer_name=str(offline_tokenizer), sandbox_root=str(tmp_path))
    sessions = EnvSessions(env)
    try:
        session = await sessions.open({"secret": 6, "low": 1, "high": 20})
        answers = await asyncio.gather(*(session.reply(guess) for guess in ("10", "3", "6")))
        assert [a.text for a in answers[:2]] == ["Lower than 10.", "Higher than 3."]
        assert answers[2].over and not answers[0].over and not answers[1].over
        said = [(m["role"], m["content"]) for m in session.result.messages[len(session.messages) :]]
        assert said == [
            ("assistant", "10"),
            ("user", "Lower than 10."),
            ("assistant", "3"),
            ("user", "Higher than 3."),
            ("assistant", "6"),
        ]
        reward = await session.score()
        assert reward.score == pytest.approx(1.0 - 0.5 * 2 / MAX_GUESSES)  # won at guess 3
    finally:
        await sessions.close_all()


@synchronous
async def test_a_session_never_closed_has_its_sandbox_reaped_once_idle(terminal_env):
    sessions = EnvSessions(terminal_env, idle_timeout=0.3)
    try:
        session = await sessions.open(COUNT_TASK)
        sandbox = session.context.sandboxes.get(session.task_id)
        assert workspace_of(session).is_dir()
        # the user goes away: nothing calls close
        for _ in range(100):
            if session.task_id not in sessions and sandbox.closed:
                break
            await asyncio.sleep(0.05)
        assert session.task_id not in sessions
        # bwrap's workspace is reached through a descriptor of this process, closed with it
        assert session.closed and sandbox.closed
        assert session.task_id not in session.context.sandboxes  # and out of its manager
        with pytest.raises(SessionClosed):
            sessions.get(session.task_id)
    finally:
        await sessions.close_all()


def _call(name: str) -> dict:
    return {"id": "c1", "type": "function", "function": {"name": name, "arguments": "{}"}}
