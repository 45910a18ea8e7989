"""A generated env with Qwen3's own chat template, in token mode, end to end.

A project rendered from the template runs ``process`` against the stub's ``/generate``, which
generates what a Qwen3 hybrid-thinking model writes (a ``<think>`` block, parallel and
sequential ``<tool_call>`` blocks, an answer). The tokenizer carries Qwen3's published template
(tests/fixtures/chat_templates/Qwen-Qwen3-0.6B.jinja); the start-up check accepts it, the trained
spans of every written sequence are exactly the generated turns, and re-tokenizing each rollout with
the template gives the sampled ids (the check's token fidelity row); the run and its checks
are tests/helpers/token_mode.py's, shared with tests/runtime/chat/test_gpt_oss_token_mode.py.
"""

from __future__ import annotations

import pytest
from helpers import CHAT_TEMPLATES
from helpers.chat_families import PARALLEL, qwen3
from helpers.token_mode import assert_trains_what_was_generated

from hermes_envgen.testing.tokenizer import build_offline_tokenizer

QWEN3 = CHAT_TEMPLATES / "Qwen-Qwen3-0.6B.jinja"


@pytest.mark.slow
def test_a_qwen3_env_trains_exactly_what_the_model_generated(stub_server, tmp_path):
    tokenizer_dir = build_offline_tokenizer(tmp_path / "qwen3-tokenizer", QWEN3.read_text())
    assert_trains_what_was_generated(
        stub_server, tmp_path, "qwen-agent", tokenizer_dir, qwen3, PARALLEL
    )
