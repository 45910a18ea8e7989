"""A generated env with Qwen3's own chat template, in token mode, end to end.

A project rendered from the template runs ``process`` against the stub's ``/generate``, which
generates what a Qwen3 hybrid-thinking model writes (a ``<think>`` block, parallel and
sequential ``<tool_call>`` blocks, an answer). The tokenizer carries Qwen3's published template
(tests/chat_templates/Qwen-Qwen3-0.6B.jinja); the start-up check accepts it, the trained spans
of every written sequence are exactly the generated turns, and re-tokenizing each rollout with
the template gives the sampled ids (the check's token fidelity row).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import render_template
from test_chat_template_families import PARALLEL, qwen3
from transformers import AutoTokenizer

from hermes_envgen.devtools.check import PASS, token_fidelity_check
from hermes_envgen.runtime.trajectory import trained_runs
from hermes_envgen.testing import OfflineRun
from hermes_envgen.testing.tokenizer import build_offline_tokenizer

QWEN3 = Path(__file__).parent / "chat_templates" / "Qwen-Qwen3-0.6B.jinja"


@pytest.mark.slow
def test_a_qwen3_env_trains_exactly_what_the_model_generated(stub_server, tmp_path):
    project = render_template(tmp_path / "qwen-agent", {"project_name": "qwen-agent"})
    tokenizer_dir = build_offline_tokenizer(tmp_path / "qwen3-tokenizer", QWEN3.read_text())
    expected = [qwen3(turn) for turn in PARALLEL]
    turns = []
    for text, turn in zip(expected, PARALLEL):
        calls = [{"name": "terminal", "arguments": {"command": c}} for c in turn.commands]
        turns.append(
            {"text": text, "tool_calls": calls} if calls else {"text": text, "content": "x"}
        )
    stub = stub_server({"conversations": [], "default": {"turns": turns}}, tokenizer=tokenizer_dir)
    run = OfflineRun(
        project / "src" / "qwen_agent" / "env.py",
        stub.base_url,
        tokenizer_dir,
        tmp_path / "run",
        health_check=None,
        server_flags={"server_type": "vllm"},
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
        assert [m.get("reasoning_content") for m in replies] == [t.reasoning for t in PARALLEL]
        commands = [
            [json.loads(c["function"]["arguments"])["command"] for c in m.get("tool_calls") or []]
            for m in replies
        ]
        assert commands == [list(t.commands) for t in PARALLEL]
    row = token_fidelity_check(groups, str(tokenizer_dir))
    assert row.status == PASS, row.reason
