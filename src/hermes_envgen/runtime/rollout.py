"""The shape of a task: what the datasets loader yields, the env formats and the rewards check."""

from __future__ import annotations

from typing import Any, TypedDict


class _Prompted(TypedDict):
    # The one required key, in a base of its own: typing.Required is Python 3.11+.
    prompt: str


class Task(_Prompted, total=False):
    """One task of an env's dataset. Only ``prompt`` is required; the rest is what the built-in
    samples, the datasets loader and the reward building blocks read when it is there.

    - ``prompt``: the task as the agent reads it (the env's ``format_prompt`` may add to it);
    - ``answer``: the reference the reward compares with;
    - ``files``: workspace path -> content, put into the sandbox before the agent starts;
    - ``checks``: check-file path -> content, placed after the rollout (binary verification);
    - ``solution`` / ``gold_answer``: a command that solves the task and a correct reply, which
      the tests replay to show that the reward pays for solving the task, and only for that;
    - ``metadata``: anything else the env keeps per task (ids, difficulty, source...).
    """

    answer: str
    files: dict[str, str]
    checks: dict[str, str]
    solution: str
    gold_answer: str
    metadata: dict[str, Any]
