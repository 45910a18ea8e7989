"""The end-to-end run of tests/runtime/chat/test_qwen3_token_mode.py and
tests/runtime/chat/test_gpt_oss_token_mode.py.

A project rendered from the template runs ``process`` in token mode against the stub's
``/generate``, which generates each turn's text as the model family writes it; the tokenizer
carries that family's published chat template. :func:`assert_trains_what_was_generated` proves
that the trained spans of every written sequence are exactly the generated turns, that the
parser read back each turn's reasoning, calls and final answer, and that re-tokenizing each
rollout with the template gives the sampled ids (the check's token fidelity row).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from conftest import render_template
from transformers import AutoTokenizer

from helpers.chat_families import Turn
from hermes_envgen.devtools.check import PASS, token_fidelity_check
from hermes_envgen.runtime.chat.trajectory import trained_runs
from hermes_envgen.testing import OfflineRun


def assert_trains_what_was_generated(
    stub_server,
    tmp_path: Path,
    project_name: str,
    tokenizer_dir: Path,
    generated: Callable[[Turn], str],
    turns: list[Turn],
    env_flags: dict | None = None,
) -> None:
    """Run one group of two rollouts of a fresh project and check what it wrote, as above."""
    project = render_template(tmp_path / project_name, {"project_name": project_name})
    expected = [generated(turn) for turn in turns]
    stub_turns = []
    for text, turn in zip(expected, turns):
        calls = [{"name": "terminal", "arguments": {"command": c}} for c in turn.commands]
        stub_turns.append(
            {"text": text, "tool_calls": calls} if calls else {"text": text, "content": "x"}
        )
    script = {"conversations": [], "default": {"turns": stub_turns}}
    stub = stub_server(script, tokenizer=tokenizer_dir)
    run = OfflineRun(
        project / "src" / project_name.replace("-", "_") / "env.py",
        stub.base_url,
        tokenizer_dir,
        tmp_path / "run",
        health_check=None,
        server_flags={"server_type": "vllm"},
        env_flags=env_flags or {},
        timeout=300,
        extra_env={"PYTHONPATH": str(project / "src")},
    )
    (tmp_path / "run").mkdir()
    groups = run.process(groups=1, group_size=2)
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    (group,) = groups
    assert len(group["tokens"]) == 2 and len(group["inference_logprobs"]) == 2
    for tokens, masks, messages in zip(group["tokens"], group["masks"], group["messages"]):
        assert [tokenizer.decode(r) for r in trained_runs(tokens, masks)] == expected
        replies = [m for m in messages if m["role"] == "assistant"]
        assert [m.get("reasoning_content") for m in replies] == [t.reasoning for t in turns]
        commands = [
            [json.loads(c["function"]["arguments"])["command"] for c in m.get("tool_calls") or []]
            for m in replies
        ]
        assert commands == [list(t.commands) for t in turns]
        assert replies[-1]["content"] == turns[-1].content
    row = token_fidelity_check(groups, str(tokenizer_dir))
    assert row.status == PASS, row.reason
