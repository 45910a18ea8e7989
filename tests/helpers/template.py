"""Render the project template with a user's answers: the answers per provider and pattern, and
the lock the README's fixed ports need."""

from __future__ import annotations

import fcntl
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from conftest import render_template

PROVIDERS = {
    "atropos": {},
    "openrouter": {"model_name": "meta-llama/llama-3.1-8b-instruct"},
    "vllm": {"model_name": "NousResearch/Hermes-3-Llama-3.1-8B", "base_url": "http://gpu:8000/v1"},
    "openai_compatible": {
        "model_name": "my-model",
        "base_url": "https://api.example.com/v1",
        "api_key_env": "EXAMPLE_API_KEY",
    },
}


# The judge as users answer it: an API of many models offers another model of its own by
# default (only the model is typed); a self-hosted server has none, and the user says
# "policy" to let the policy grade its own answers.
JUDGES = {
    "openrouter": {"judge_model": "openai/gpt-4o-mini"},
    "openai_compatible": {"judge_model": "my-judge-model"},
}


POLICY_JUDGE = {"judge_base_url": "policy"}


def answers(provider: str, pattern: str, ci: bool, use_dataset: bool) -> dict:
    data = {
        "project_name": f"{provider.replace('_', '-')}-{pattern.replace('_', '-')}",
        "provider": provider,
        "reward_pattern": pattern,
        "ci": ci,
        "use_dataset": use_dataset,
        **PROVIDERS[provider],
    }
    if use_dataset:
        data["dataset_name"] = "example-org/terminal-tasks"
    if pattern == "judge":
        data |= JUDGES.get(provider, POLICY_JUDGE)
    return data


def render(tmp_path: Path, data: dict) -> Path:
    return render_template(tmp_path / data["project_name"], data)


# A judge at an endpoint of its own, as a user answers it: nothing listens there offline.
JUDGE_OF_ITS_OWN = {
    "judge_base_url": "http://127.0.0.1:8080/v1",
    "judge_model": "judge-model",
    "judge_api_key_env": "JUDGE_API_KEY",
}


def judge_of_its_own(provider: str) -> dict:
    """A judge project whose judge is not the policy's server (for vLLM: Atropos's, no chat)."""
    data = answers(provider, "judge", False, False) | JUDGE_OF_ITS_OWN
    data["project_name"] = f"{provider.replace('_', '-')}-own-judge"
    if provider == "vllm":
        data["vllm_server"] = "generate"
    return data


# One project per provider (and pattern, and a judge of its own), as users answer them.
README_PROJECTS = {
    "atropos": {"project_name": "offline-env"},  # every default: no model, no tokenizer
    "openrouter": answers("openrouter", "judge", False, False),
    "vllm-own-judge": judge_of_its_own("vllm"),
    "sglang": {
        "project_name": "sglang-multi-signal",
        "provider": "sglang",
        "model_name": "Qwen/Qwen3-8B",
        "reward_pattern": "multi_signal",
    },
    "openai_compatible": answers("openai_compatible", "binary", False, False),  # model "my-model"
}


@contextmanager
def readme_ports() -> Iterator[None]:
    """The README's commands use fixed ports (18000, 18001, 9001): one run at a time."""
    with open(Path(tempfile.gettempdir()) / "hermes-envgen-readme-ports.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
