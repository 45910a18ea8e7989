"""A generated env with gpt-oss's own chat template (harmony), in token mode, end to end.

As tests/runtime/chat/test_qwen3_token_mode.py for Qwen3: a project rendered from the template runs
``process`` against the stub's ``/generate``, which generates what gpt-oss writes (an
``analysis`` channel with the reasoning, then a ``commentary`` call to ``functions.terminal``
ending ``<|call|>``, and a ``final`` answer ending ``<|return|>``), read by the ``harmony``
parser. The tokenizer carries gpt-oss-120b's published template
(tests/fixtures/chat_templates/openai-gpt-oss-120b.jinja); the start-up check accepts it, the
trained spans of every written sequence are exactly the generated turns, reasoning included, and
re-tokenizing each rollout with the template gives the sampled ids (the check's fidelity row).
"""

from __future__ import annotations

import pytest
from helpers import CHAT_TEMPLATES
from helpers.chat_families import FAMILIES, harmony
from helpers.token_mode import assert_trains_what_was_generated

from hermes_envgen.testing.tokenizer import build_offline_tokenizer

FAMILY = FAMILIES["gpt-oss (reasoning)"]
TEMPLATE = CHAT_TEMPLATES / FAMILY.template


@pytest.mark.slow
def test_a_gpt_oss_env_trains_exactly_what_the_model_generated(stub_server, tmp_path):
    tokenizer_dir = build_offline_tokenizer(
        tmp_path / "gpt-oss-tokenizer", TEMPLATE.read_text(), FAMILY.specials, FAMILY.eos
    )
    assert all("<|channel|>analysis<|message|>" in harmony(turn) for turn in FAMILY.turns)
    assert_trains_what_was_generated(
        stub_server,
        tmp_path,
        "oss-agent",
        tokenizer_dir,
        harmony,
        FAMILY.turns,
        env_flags={"tool_call_parser": "harmony"},
    )
