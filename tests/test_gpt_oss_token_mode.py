"""A generated env with gpt-oss's own chat template (harmony), in token mode, end to end.

As tests/test_qwen3_token_mode.py for Qwen3: a project rendered from the template runs
``process`` against the stub's ``/generate``, which generates what gpt-oss writes (an
``analysis`` channel with the reasoning, then a ``commentary`` call to ``functions.terminal``
ending ``<|call|>``, and a ``final`` answer ending ``<|return|>``), read by the ``harmony``
parser. The tokenizer carries gpt-oss-120b's published template
(tests/chat_templates/openai-gpt-oss-120b.jinja); the start-up check accepts it, the trained
spans of every written sequence are exactly the generated turns, reasoning included, and
re-tokenizing each rollout with the template gives the sampled ids (the check's fidelity row).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import render_template
from test_chat_template_families import FAMILIES, harmony
from transformers import AutoTokenizer

from hermes_envgen.devtools.check import PASS, token_fidelity_check
from hermes_envgen.runtime.trajectory import trained_runs
from hermes_envgen.testing import OfflineRun
from hermes_envgen.testing.tokenizer import build_offline_tokenizer

FAMILY = FAMILIES["gpt-oss (reasoning)"]
TEMPLATE = Path(__file__).parent / "chat_templates" / FAMILY.template


@pytest.mark.slow
def test_a_gpt_oss_env_trains_exactly_what_the_model_generated(stub_server, tmp_path):
    project = render_template(tmp_path / "oss-agent", {"project_name": "oss-agent"})
    tokenizer_dir = build_offline_tokenizer(
        tmp_path / "gpt-oss-tokenizer", TEMPLATE.read_text(), FAMILY.specials, FAMILY.eos
    )
    expected = [harmony(turn) for turn in FAMILY.turns]
    assert all("<|channel|>analysis<|message|>" in text for text in expected)
    turns = []
    for text, turn in zip(expected, FAMILY.turns):
        calls = [{"name": "terminal", "arguments": {"command": c}} for c in turn.commands]
        turns.append(
            {"text": text, "tool_calls": calls} if calls else {"text": text, "content": "x"}
        )
    stub = stub_server({"conversations": [], "default": {"turns": turns}}, tokenizer=tokenizer_dir)
    run = OfflineRun(
        project / "src" / "oss_agent" / "env.py",
        stub.base_url,
        tokenizer_dir,
        tmp_path / "run",
        health_check=None,
        server_flags={"server_type": "vllm"},
        env_flags={"tool_call_parser": "harmony"},
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
        assert [m.get("reasoning_content") for m in replies] == [t.reasoning for t in FAMILY.turns]
        commands = [
            [json.loads(c["function"]["arguments"])["command"] for c in m.get("tool_calls") or []]
            for m in replies
        ]
        assert commands == [list(t.commands) for t in FAMILY.turns]
        assert replies[-1]["content"] == FAMILY.turns[-1].content
    row = token_fidelity_check(groups, str(tokenizer_dir))
    assert row.status == PASS, row.reason
