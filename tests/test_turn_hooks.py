"""The turn hooks (env_response, turn_reward, is_done) on RolloutState, in the loop itself:
each against the stub server over real HTTP and a real local sandbox, in chat and token mode."""

from __future__ import annotations

import asyncio

import pytest
from test_phase2 import END, token_server
from transformers import AutoTokenizer

from hermes_envgen.runtime.agent_loop import HermesAgentLoop, RolloutState, TurnHooks
from hermes_envgen.runtime.exact_tokens import ExactTokensBackend
from hermes_envgen.runtime.tool_context import ToolContext
from hermes_envgen.runtime.tools import REGISTRY
from hermes_envgen.runtime.trajectory import MASKED, trained_runs
from hermes_envgen.testing.client import DirectChatServer

TOOLS = REGISTRY.resolve(["terminal", "file"])
SCHEMAS = [t.schema for t in TOOLS]
NAMES = {t.name for t in TOOLS}

# A model that answers twice in words, then once more: what a simulated user talks to.
TALKER = {
    "conversations": [
        {
            "turns": [
                {"content": "Which city?"},
                {"content": "Paris it is."},
                {"content": "Anything else?"},
            ]
        }
    ]
}
# A model that calls a tool on every turn, for ever (the script repeats its last turn).
TOOL_FOREVER = {
    "conversations": [
        {"turns": [{"tool_calls": [{"name": "terminal", "arguments": {"command": "echo x"}}]}]}
    ]
}


class ScriptedUser(TurnHooks):
    """Replies once to the model's first answer, then has nothing more to say."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.seen: list[RolloutState] = []

    async def env_response(self, state: RolloutState) -> list[dict]:
        self.seen.append(state)
        if state.last_reply.get("tool_calls") or not self.replies:
            return []
        return [{"role": "user", "content": self.replies.pop(0)}]


def run_loop(server, sandboxes, hooks, prompt="go", backend_of=None, **kwargs):
    """One rollout with ``hooks``; returns its result (and the backend, when one is made)."""

    async def main():
        client = server if backend_of else DirectChatServer(server.base_url)
        ctx = ToolContext("task-h", sandboxes)
        backend = backend_of(client) if backend_of else None
        loop = HermesAgentLoop(
            client,
            SCHEMAS,
            NAMES,
            task_id="task-h",
            tool_context=ctx,
            hooks=hooks,
            task={"prompt": prompt},
            backend=backend,
            **kwargs,
        )
        try:
            return await loop.run([{"role": "user", "content": prompt}]), backend
        finally:
            await ctx.cleanup()
            if not backend_of:
                await client.close()

    return asyncio.run(main())


def test_an_env_response_after_an_answer_keeps_the_rollout_going(stub_server, sandboxes):
    hooks = ScriptedUser(["Paris, please."])
    result, _ = run_loop(stub_server(TALKER), sandboxes, hooks)
    assert [(m["role"], m["content"]) for m in result.messages] == [
        ("user", "go"),
        ("assistant", "Which city?"),
        ("user", "Paris, please."),
        ("assistant", "Paris it is."),
    ]
    assert result.turns_used == 2 and result.finished_naturally
    assert result.final_response == "Paris it is."
    # Every hook got the same state, which saw each turn.
    state = hooks.seen[0]
    assert all(s is state for s in hooks.seen) and state.turn == 2
    assert state.task == {"prompt": "go"} and state.task_id == "task-h"
    assert state.result is result and state.messages is result.messages
    assert state.tool_context.task_id == "task-h" and state.split == "train"


def test_without_hooks_an_answer_ends_the_rollout(stub_server, sandboxes):
    result, _ = run_loop(stub_server(TALKER), sandboxes, None)
    assert result.turns_used == 1 and result.finished_naturally
    assert result.turn_rewards == [None] and result.metadata == {}
    assert result.token_trace is None  # chat mode: no exact tokens


class StopAfter(TurnHooks):
    def __init__(self, turns: int) -> None:
        self.turns = turns

    def is_done(self, state: RolloutState) -> bool:  # a plain def works as well
        return state.turn >= self.turns


def test_is_done_stops_the_rollout_and_counts_as_finished(stub_server, sandboxes):
    result, _ = run_loop(stub_server(TOOL_FOREVER), sandboxes, StopAfter(2), max_turns=10)
    assert result.turns_used == 2 and result.finished_naturally
    # The last turn's tool ran and was answered before the rule was asked.
    assert [m["role"] for m in result.messages][-2:] == ["assistant", "tool"]


def test_turns_run_out_whatever_the_env_says(stub_server, sandboxes):
    class Chatty(TurnHooks):
        async def env_response(self, state):
            return [{"role": "user", "content": f"again ({state.turn})"}]

    result, _ = run_loop(stub_server(TALKER), sandboxes, Chatty(), max_turns=3)
    assert result.turns_used == 3 and not result.finished_naturally
    assert result.messages[-1] == {"role": "user", "content": "again (3)"}


class Scored(TurnHooks):
    """A reward per turn: 1.0 for a reply without tools, none (None) for a tool turn."""

    async def env_response(self, state):
        state.metadata.setdefault("turns_seen", []).append(state.turn)
        return [] if state.turn >= 3 else [{"role": "user", "content": "more"}]

    async def turn_reward(self, state):
        return None if state.last_reply.get("tool_calls") else 1


def test_turn_rewards_are_kept_per_turn_with_the_envs_metadata(stub_server, sandboxes):
    server = stub_server(
        {
            "conversations": [
                {
                    "turns": [
                        {"content": "one"},
                        {"tool_calls": [{"name": "terminal", "arguments": {"command": "true"}}]},
                        {"content": "three"},
                    ]
                }
            ]
        }
    )
    result, _ = run_loop(server, sandboxes, Scored())
    assert result.turns_used == 3 and result.finished_naturally
    assert result.turn_rewards == [1.0, None, 1.0]
    assert all(isinstance(r, float) for r in result.turn_rewards if r is not None)
    assert result.metadata == {"turns_seen": [1, 2, 3]}


@pytest.mark.parametrize(
    ("hook", "returns", "error"),
    [
        ("env_response", ValueError("no user"), "env_response failed: ValueError: no user"),
        ("env_response", "hello", "env_response failed: it returned str, not a list of dicts"),
        ("turn_reward", "high", "turn_reward failed: it returned 'high', not a number"),
        (
            "env_response",
            [{"role": "assistant", "content": "I give up"}],
            "env_response failed: a message of role 'assistant' (the env speaks as user, "
            "system, tool)",
        ),
        ("is_done", KeyError("board"), "is_done failed: KeyError: 'board'"),
    ],
)
def test_a_hook_that_fails_ends_the_rollout_with_the_reason(
    stub_server, sandboxes, hook, returns, error
):
    class Broken(TurnHooks):
        pass

    def broken(self, state):
        if isinstance(returns, Exception):
            raise returns
        return returns

    setattr(Broken, hook, broken)
    result, _ = run_loop(stub_server(TOOL_FOREVER), sandboxes, Broken(), max_turns=5)
    assert result.error == error and result.failed_hook == hook
    assert result.turns_used == 1 and not result.finished_naturally


def test_the_time_budget_covers_the_hooks(stub_server, sandboxes):
    class NeverAnswers(TurnHooks):
        async def env_response(self, state):
            await asyncio.Event().wait()  # a simulated user that never replies
            return []

    result, _ = run_loop(stub_server(TALKER), sandboxes, NeverAnswers(), max_seconds=1.0)
    assert result.timed_out and not result.finished_naturally and result.turns_used == 1


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_token_mode_masks_what_the_env_adds_and_the_trace_is_in_the_result(
    kind, stub_server, offline_tokenizer, sandboxes
):
    tokenizer = AutoTokenizer.from_pretrained(offline_tokenizer)
    stub = stub_server(TALKER, tokenizer=offline_tokenizer)
    server = token_server(kind, stub.base_url, offline_tokenizer)
    hooks = ScriptedUser(["Paris, please."])
    result, backend = run_loop(
        server,
        sandboxes,
        hooks,
        backend_of=lambda s: ExactTokensBackend(s, tokenizer, "hermes", default_max_tokens=64),
    )
    trace = result.token_trace
    assert trace is backend.trace and result.turns_used == 2
    assert len(trace.tokens) == len(trace.masks) == len(trace.logprobs)
    # Trained: exactly the two generations. The user's reply is in the prompt, masked.
    trained = [tokenizer.decode(run) for run in trained_runs(trace.tokens, trace.masks)]
    assert trained == ["Which city?" + END, "Paris it is." + END]
    text = tokenizer.decode(trace.tokens)
    assert "Paris, please." in text
    masked = [t for t, m in zip(trace.tokens, trace.masks) if m == MASKED]
    assert "Paris, please." in tokenizer.decode(masked)
