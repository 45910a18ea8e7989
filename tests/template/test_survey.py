"""The survey: every chat template llama-cpp-python 0.3.36 ships, through the start-up check.

llama-cpp-python's source distribution vendors llama.cpp, whose ``models/templates/`` holds the
published templates of the models it supports (70 in 0.3.36). Each goes through the start-up
check in chat mode and in token mode with a byte-level tokenizer that knows the special tokens
the template writes; the verdict of each is recorded here with its reason, so that a change
in what is accepted or refused shows as a diff of this table. Verdicts: ``accepted``; ``not
rebuildable`` (the template's rendered reply does not continue its own generation prompt, as
when the prompt opens a think block: chat mode cannot rebuild the turns as generated, token
mode can); ``drops calls`` / ``drops results``; ``no turn boundary`` (no special token ends a
turn and the turn is re-rendered once more follows); ``template error`` (the template raises on
the probe, with this tokenizer: a ``bos_token`` or variables of its own missing, roles it
refuses).

The templates come from the sdist in uv's cache (``uv pip install llama-cpp-python==0.3.36``
builds from it; ``scripts/llama-server.sh`` does) or from ``HERMES_ENVGEN_LLAMA_CPP_TEMPLATES``.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from hermes_envgen.runtime.chat.template_check import (
    ChatTemplateDropsToolCalls,
    check_tool_calls_rendered,
)
from hermes_envgen.testing.tokenizer import build_offline_tokenizer

VERDICTS = {
    "Apertus-8B-Instruct": ("not rebuildable", "accepted"),
    "Apriel-1.6-15b-Thinker-fixed": ("not rebuildable", "no turn boundary"),
    "Bielik-11B-v3.0-Instruct": ("accepted", "accepted"),
    "ByteDance-Seed-OSS": ("accepted", "accepted"),
    "Cohere2MoE": ("not rebuildable", "accepted"),
    "CohereForAI-c4ai-command-r-plus-tool_use": ("template error", "template error"),
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": ("not rebuildable", "drops results"),
    "GLM-4.6": ("accepted", "accepted"),
    "GLM-4.7-Flash": ("not rebuildable", "accepted"),
    "GigaChat3-10B-A1.8B": ("accepted", "accepted"),
    "GigaChat3.1-10B-A1.8B": ("accepted", "accepted"),
    "HuggingFaceTB-SmolLM3-3B": ("drops calls", "accepted"),
    "Kimi-K2-Instruct": ("template error", "template error"),
    "Kimi-K2-Thinking": ("template error", "template error"),
    "Kimi-K3": ("accepted", "accepted"),
    "LFM2-8B-A1B": ("drops calls", "accepted"),
    "LFM2.5-8B-A1B": ("accepted", "accepted"),
    "LFM2.5-Instruct": ("drops calls", "accepted"),
    "MiMo-VL": ("accepted", "accepted"),
    "MiniMax-M1": ("accepted", "accepted"),
    "MiniMax-M2": ("not rebuildable", "accepted"),
    "MiniMax-M3": ("accepted", "accepted"),
    "Mistral-Small-3.2-24B-Instruct-2506": ("accepted", "accepted"),
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": ("not rebuildable", "accepted"),
    "NVIDIA-Nemotron-Nano-v2": ("reasoning not rebuildable", "no turn boundary"),
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": ("accepted", "accepted"),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": ("accepted", "accepted"),
    "Qwen-QwQ-32B": ("reasoning not rebuildable", "accepted"),
    "Qwen-Qwen2.5-7B-Instruct": ("accepted", "accepted"),
    "Qwen-Qwen3-0.6B": ("accepted", "accepted"),
    "Qwen3-Coder": ("accepted", "accepted"),
    "Qwen3.5-4B": ("accepted", "accepted"),
    "Reka-Edge": ("accepted", "accepted"),
    "Spark2.5": ("not rebuildable", "accepted"),
    "StepFun3.5-Flash": ("accepted", "accepted"),
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": ("reasoning not rebuildable", "accepted"),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": ("reasoning not rebuildable", "accepted"),
    "deepseek-ai-DeepSeek-V3.1": ("accepted", "accepted"),
    "deepseek-ai-DeepSeek-V3.2": ("reasoning not rebuildable", "accepted"),
    "deepseek-ai-DeepSeek-V4-Flash-0731": ("accepted", "accepted"),
    "deepseek-ai-DeepSeek-V4": ("accepted", "accepted"),
    "fireworks-ai-llama-3-firefunction-v2": ("template error", "template error"),
    "google-gemma-2-2b-it": ("template error", "template error"),
    "google-gemma-4-31B-it-interleaved": ("not rebuildable", "accepted"),
    "google-gemma-4-31B-it": ("not rebuildable", "accepted"),
    "ibm-granite-granite-3.3-2B-Instruct": ("drops calls", "accepted"),
    "ibm-granite-granite-4.0": ("accepted", "accepted"),
    "ibm-granite-granite-4.1": ("accepted", "accepted"),
    "inclusionai-ling-3.0-flash": ("accepted", "accepted"),
    "llama-cpp-deepseek-r1": ("template error", "template error"),
    "llama-cpp-rwkv-world": ("drops results", "drops results"),
    "meetkai-functionary-medium-v3.1": ("template error", "template error"),
    "meetkai-functionary-medium-v3.2": ("template error", "template error"),
    "meta-llama-Llama-3.1-8B-Instruct": ("accepted", "accepted"),
    "meta-llama-Llama-3.2-3B-Instruct": ("accepted", "accepted"),
    "meta-llama-Llama-3.3-70B-Instruct": ("accepted", "accepted"),
    "microsoft-Phi-3.5-mini-instruct": ("drops results", "drops results"),
    "mistralai-Ministral-3-14B-Reasoning-2512": ("accepted", "accepted"),
    "mistralai-Mistral-Nemo-Instruct-2407": ("accepted", "accepted"),
    "moonshotai-Kimi-K2": ("accepted", "accepted"),
    "muse-glimmer": ("accepted", "accepted"),
    "openai-gpt-oss-120b": ("accepted", "accepted"),
    "openbmb-MiniCPM5-1B": ("accepted", "accepted"),
    "poolside-Laguna-S-2.1": ("accepted", "accepted"),
    "poolside-Laguna-XS-2.1": ("accepted", "accepted"),
    "poolside-Laguna-XS.2": ("accepted", "accepted"),
    "tencent-Hy3": ("accepted", "accepted"),
    "unsloth-Apriel-1.5": ("accepted", "accepted"),
    "unsloth-mistral-Devstral-Small-2507": ("accepted", "accepted"),
    "upstage-Solar-Open-100B": ("accepted", "accepted"),
}
REASONS = {
    "renders no reply's reasoning": "reasoning not rebuildable",
    "renders a finished reply otherwise than it prompts for one": "not rebuildable",
    "drops tool calls": "drops calls",
    "drops tool results": "drops results",
    "cannot render tool results after a turn": "no turn boundary",
    "fails on a tool call": "template error",
}
SPECIAL = re.compile(r"<\|[^|<>\s'\"]+\|>|<｜[^｜'\"]+｜>|\[/?[A-Z_]+\]")


def templates_folder() -> Path | None:
    given = os.environ.get("HERMES_ENVGEN_LLAMA_CPP_TEMPLATES")
    if given:
        return Path(given)
    cache = Path(os.environ.get("UV_CACHE_DIR", Path.home() / ".cache" / "uv"))
    found = sorted(
        cache.glob("sdists-v*/pypi/llama-cpp-python/0.3.36/*/src/vendor/llama.cpp/models/templates")
    )
    return found[0] if found else None


FOLDER = templates_folder()


def verdict(tokenizer, name: str, token_mode: bool) -> str:
    try:
        check_tool_calls_rendered(tokenizer, name, token_mode=token_mode)
    except ChatTemplateDropsToolCalls as exc:
        return next((v for k, v in REASONS.items() if k in str(exc)), str(exc))
    return "accepted"


@pytest.mark.skipif(FOLDER is None, reason="llama-cpp-python 0.3.36's sdist is not in uv's cache")
def test_every_shipped_template_gets_its_recorded_verdict(tmp_path):
    assert FOLDER is not None
    files = sorted(FOLDER.glob("*.jinja"))
    assert sorted(f.stem for f in files) == sorted(VERDICTS)
    logging.disable(logging.WARNING)
    try:
        found = {}
        for index, path in enumerate(files):
            template = path.read_text(encoding="utf-8")
            specials = tuple(sorted(set(SPECIAL.findall(template))))
            directory = build_offline_tokenizer(tmp_path / str(index), template, specials)
            tokenizer = AutoTokenizer.from_pretrained(str(directory))
            found[path.stem] = (
                verdict(tokenizer, path.stem, False),
                verdict(tokenizer, path.stem, True),
            )
    finally:
        logging.disable(logging.NOTSET)
    assert found == VERDICTS
    chat = sum(c == "accepted" for c, _ in found.values())
    token = sum(t == "accepted" for _, t in found.values())
    assert (len(found), chat, token) == (70, 41, 57)
