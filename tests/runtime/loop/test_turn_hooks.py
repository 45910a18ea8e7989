"""The turn hooks (new_state, turn_reward, should_stop, env_response) on RolloutState, in the
loop itself: each against the stub server over real HTTP and a real local sandbox, in chat and
token mode."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest
from helpers.token_server import END, token_server
from transformers import AutoTokenizer

from hermes_envgen.runtime.chat.token_mode import ExactTokensBackend
from hermes_envgen.runtime.chat.trajectory import MASKED, trained_runs
from hermes_envgen.runtime.errors import EnvConfigError
from hermes_envgen.runtime.loop.agent_loop import HermesAgentLoop, TurnHooks
from hermes_envgen.runtime.loop.tool_context import ToolContext
from hermes_envgen.runtime.rollout import RolloutState
from hermes_envgen.runtime.tools import REGISTRY
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

    def should_stop(self, state: RolloutState) -> bool:  # a plain def works as well
        return state.turn >= self.turns


def test_should_stop_stops_the_rollout_and_counts_as_finished(stub_server, sandboxes):
    result, _ = run_loop(stub_server(TOOL_FOREVER), sandboxes, StopAfter(2), max_turns=10)
    assert result.turns_used == 2 and result.finished_naturally
    # The last turn's tool ran and was answered before the rule was asked.
    assert [m["role"] for m in result.messages][-2:] == ["assistant", "tool"]


@dataclass
class Tally:
    """A typed per-rollout state: what the env has seen so far."""

    replies: list[str] = field(default_factory=list)
    made_for: str = ""


class Referee(TurnHooks[dict, Tally]):
    """A game that ends when the model says "Paris it is.": asked before the env replies."""

    def new_state(self, task: dict) -> Tally:
        return Tally(made_for=task["prompt"])

    def turn_reward(self, state: RolloutState[dict, Tally]) -> float:
        state.data.replies.append(state.last_reply["content"])
        return float(len(state.data.replies))

    async def should_stop(self, state: RolloutState[dict, Tally]) -> bool:
        return state.last_reply["content"] == "Paris it is."

    def env_response(self, state: RolloutState[dict, Tally]) -> list[dict]:
        return [{"role": "user", "content": f"not yet ({len(state.data.replies)})"}]


def test_the_stop_rule_is_asked_before_the_env_replies_and_state_is_typed(stub_server, sandboxes):
    result, _ = run_loop(stub_server(TALKER), sandboxes, Referee())
    # No trailing reply after the turn that ended the game.
    assert [(m["role"], m["content"]) for m in result.messages] == [
        ("user", "go"),
        ("assistant", "Which city?"),
        ("user", "not yet (1)"),
        ("assistant", "Paris it is."),
    ]
    assert result.finished_naturally and result.turns_used == 2
    # new_state's value, kept across the turns, is the result's data; turn_reward ran first.
    assert result.data == Tally(["Which city?", "Paris it is."], made_for="go")
    assert result.turn_rewards == [1.0, 2.0]


class Farewell(TurnHooks):
    """Replies until the second turn, then says goodbye and ends the rollout with it."""

    async def env_response(self, state: RolloutState) -> list[dict]:
        if state.turn >= 2:
            state.finish()
            return [{"role": "user", "content": "Goodbye."}]
        return [{"role": "user", "content": "And?"}]


def test_finish_ends_the_rollout_with_a_final_message(stub_server, sandboxes):
    result, _ = run_loop(stub_server(TOOL_FOREVER), sandboxes, Farewell(), max_turns=10)
    assert result.turns_used == 2 and result.finished_naturally
    assert result.messages[-1] == {"role": "user", "content": "Goodbye."}


def test_hooks_of_the_earlier_contract_are_refused_in_one_line(stub_server, sandboxes):
    class OldRule(TurnHooks):
        def is_done(self, state: RolloutState) -> bool:
            return True

    with pytest.raises(EnvConfigError) as caught:
        run_loop(stub_server(TALKER), sandboxes, OldRule())
    message = str(caught.value)
    assert message.startswith("OldRule.is_done: the stop rule is now should_stop(state)")
    assert "\n" not in message


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
        (
            "env_response",
            "hello",
            "env_response failed: it returned 'hello', not a list of messages (dicts)",
        ),
        (
            "env_response",
            {"role": "user", "content": "hi"},
            "env_response failed: it returned {'role': 'user', 'content': 'hi'}, not a list of "
            "messages (dicts)",
        ),
        (
            "env_response",
            [{"role": "user", "content": ["a", "list"]}],
            "env_response failed: a message whose content is ['a', 'list'], not a string",
        ),
        ("turn_reward", "high", "turn_reward failed: it returned 'high', not a finite number"),
        ("turn_reward", "0.5", "turn_reward failed: it returned '0.5', not a finite number"),
        (
            "turn_reward",
            float("nan"),
            "turn_reward failed: it returned nan, not a finite number",
        ),
        (
            "env_response",
            [{"role": "assistant", "content": "I give up"}],
            "env_response failed: a message of role 'assistant' (the env speaks as user, "
            "system, tool)",
        ),
        ("should_stop", KeyError("board"), "should_stop failed: KeyError: 'board'"),
        ("should_stop", "yes", "should_stop failed: it returned 'yes', not True or False"),
        ("should_stop", None, "should_stop failed: it returned None, not True or False"),
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


def test_a_failing_new_state_fails_the_rollout_before_the_model_is_asked(stub_server, sandboxes):
    class NoState(TurnHooks):
        def new_state(self, task):
            raise LookupError("no board for " + task["prompt"])

    server = stub_server(TALKER)
    result, _ = run_loop(server, sandboxes, NoState())
    assert result.error == "new_state failed: LookupError: no board for go"
    assert result.failed_hook == "new_state" and result.turns_used == 0


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
