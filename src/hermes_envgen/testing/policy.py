"""Scripted policies for the stub server, built from an env's tasks and their gold solutions.

For every task the scripted model alternates between two conversations: one that replays the
gold solution (a terminal call running ``solution``, then ``gold_answer``; or, for a game or a
simulated user, the task's scripted ``player``: the replies that win it) and one that gives up
at once without a tool; every third task starts with giving up. Rewards of a group therefore
differ, as they must for training, evaluations show both outcomes, and a test can check that
the reward pays for solving the task and not for giving up. With
``judge=True`` it also plays the LLM judge: a strict ``{"score": 1}`` for a task's gold answer,
``{"score": 0}`` for anything else.
"""

from __future__ import annotations

import importlib
import re
import sys
from typing import Any

from hermes_envgen.errors import UsageError
from hermes_envgen.runtime.rewards import JUDGE_PROMPT_HEADER, quote_for_judge

GIVE_UP_ANSWER = "I could not solve this task."


def anchored(prompt: str) -> str:
    """A script ``match`` for conversations whose first user message starts with ``prompt``."""
    # Anchored at the start: the judge's prompt quotes the task too, and must not match here.
    return r"\A" + re.escape(prompt)


def has_gold(task: Any) -> bool:
    """Whether a task can be replayed: it has a prompt and a gold solution or player."""
    return isinstance(task, dict) and "prompt" in task and ("solution" in task or "player" in task)


def gold_turns(task: dict[str, Any]) -> list[dict]:
    """The turns that solve a task: its scripted ``player`` (each reply a text, or a turn of
    the stub's script: ``{"tool_calls": [...]}``), else one terminal call per solution command,
    then the answer."""
    if "player" in task:
        return [
            turn if isinstance(turn, dict) else {"content": str(turn)} for turn in task["player"]
        ]
    commands = task["solution"] if isinstance(task["solution"], list) else [task["solution"]]
    turns: list[dict] = [
        {"tool_calls": [{"name": "terminal", "arguments": {"command": command}}]}
        for command in commands
    ]
    turns.append({"content": task.get("gold_answer") or task["answer"]})
    return turns


def reference(task: dict[str, Any]) -> str:
    """What a task's right answer says: ``gold_answer`` or ``answer``, else its player's last
    reply (a game's winning move, a support agent's fix)."""
    if task.get("gold_answer") or task.get("answer"):
        return str(task.get("gold_answer") or task["answer"])
    last = gold_turns(task)[-1] if "player" in task else {}
    return str(last.get("content") or "")


def judge_conversation(task: dict[str, Any]) -> dict:
    """The scripted judge's strict ``{"score": 1}`` for the task's gold answer."""
    quoted = quote_for_judge(reference(task))
    return {
        "match": r"\A"
        + re.escape(JUDGE_PROMPT_HEADER)
        + r".*<candidate_answer>"
        + re.escape(quoted)
        + r"</candidate_answer>",
        "turns": [{"content": '{"score": 1}'}],
    }


def scripted_policy(tasks: list[dict[str, Any]], *, judge: bool = False) -> dict:
    """A stub-server script that solves each task every other rollout and gives up otherwise."""
    conversations: list[dict] = []
    for index, task in enumerate(tasks):
        match = anchored(task["prompt"])
        solve = {"match": match, "turns": gold_turns(task)}
        give_up = {"match": match, "turns": [{"content": GIVE_UP_ANSWER}]}
        conversations += [give_up, solve] if index % 3 == 2 else [solve, give_up]
        if judge:
            conversations.append(judge_conversation(task))
    script: dict[str, Any] = {"conversations": conversations}
    if judge:  # any other answer the judge sees is wrong
        script["default"] = {"turns": [{"content": '{"score": 0}'}]}
    return script


def tasks_policy(module: str) -> dict:
    """``scripted_policy`` (judge included) of the ``SAMPLES`` in ``module`` (``my_env.samples``).

    UsageError (one line) when the module cannot be imported or has no tasks with solutions.
    """
    if "" not in sys.path:  # as `python -m` would: a project's own directory counts
        sys.path.insert(0, "")
    try:
        tasks = importlib.import_module(module).SAMPLES
    except ImportError as exc:
        raise UsageError(
            f"--tasks {module}: cannot import it ({exc}); is the project installed "
            "(pip install -e .)?"
        ) from None
    except AttributeError:
        raise UsageError(f"--tasks {module}: it has no SAMPLES") from None
    if not tasks or not all(has_gold(t) for t in tasks):
        raise UsageError(
            f"--tasks {module}: SAMPLES needs tasks with a prompt and a solution (or a player)"
        )
    return scripted_policy(tasks, judge=True)
