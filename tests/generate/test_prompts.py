"""``hermes-envgen new`` on a terminal: every question of every provider and branch is reachable,
and validators judge the answer typed, never a default nobody chose.

copier validates a question's default before it shows the question: a question that needs an
answer must have none, or the flow exits before the user can type one.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pexpect
import pytest
import yaml
from helpers.envgen import ANSI, PROMPT_STARTS, QUESTION, REPO, answers_of, spawn_new

DOWN = "\x1b[B"
CLEAR = "\x15"  # Ctrl-U: clears a pre-filled default


def typed(text: str) -> str:
    """Keys that replace a text prompt's pre-filled answer with ``text``."""
    return f"{CLEAR}{text}\r"


def provider_keys(provider: str) -> str:
    """Keys that pick ``provider`` from the select list (in copier.yml's order)."""
    spec = yaml.safe_load((REPO / "copier.yml").read_text())
    return DOWN * list(spec["provider"]["choices"].values()).index(provider) + "\r"


ESC_ENTER = "\x1b\r"  # ends a multi-line answer (a plain Enter starts a new line)
# Keys that take a question's default: Enter, but for the multi-line system prompt.
DEFAULT_KEYS = {"System prompt of the agent": [ESC_ENTER]}


def drive(child: pexpect.spawn, replies: Mapping[str, list[str]]) -> list[str]:
    """Answer each question whose text starts with a key of ``replies`` with its keys, in turn.

    Each list holds the keys of successive attempts: an attempt the validator refuses keeps the
    prompt open, its message is awaited, then the next attempt is typed. Other questions take
    their default. Returns the questions asked, in order.
    """
    asked: list[str] = []
    pending = {prefix: list(keys) for prefix, keys in replies.items()}
    while child.expect([PROMPT_STARTS, pexpect.EOF]) == 0:
        child.expect(QUESTION, timeout=20)
        question = ANSI.sub("", child.match.group(1)).strip()
        asked.append(question)
        prefix = next((p for p in pending if question.startswith(p)), None)
        default = next((k for p, k in DEFAULT_KEYS.items() if question.startswith(p)), ["\r"])
        attempts = pending.pop(prefix, default) if prefix else default
        for keys in attempts[:-1]:
            child.send(keys)
            child.expect(r"Validation error|must |needed|needs |no spaces|expected ", timeout=20)
        child.send(attempts[-1])
    return asked


def answer_new_on_a_terminal(
    tmp_path: Path, cli_env: dict[str, str], replies: Mapping[str, list[str]]
) -> list[str]:
    """``hermes-envgen new demo-env`` on a terminal with ``replies``: it succeeds, asking each.

    Returns the questions asked, in order.
    """
    child = spawn_new(tmp_path, cli_env, "demo-env")
    try:
        asked = drive(child, replies)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, child.before
    for prefix in replies:
        assert any(question.startswith(prefix) for question in asked), (prefix, asked)
    return asked


PROVIDERS = {
    "atropos": {"Model name the training server serves": [typed("org/served-model")]},
    "openrouter": {
        # Enter on the empty prompt is refused by the validator, then a name is typed.
        "OpenRouter model id": ["\r", typed("meta-llama/llama-3.1-8b-instruct")],
    },
    "vllm": {
        "Model name the server serves": [typed("Qwen/Qwen3-8B")],
        "Base URL": [typed("http://gpu-box:8001/v1")],
    },
    "sglang": {
        "Model name the server serves": [typed("Qwen/Qwen3-8B")],
        "How is the policy sampled from SGLang": [DOWN + "\r"],  # its OpenAI chat API
        "Base URL": [typed("http://gpu-box:30001/v1")],
    },
    "openai_compatible": {
        "Model name the server serves": [typed("gpt-x")],
        "Base URL": ["\r", typed("https://api.example.com/v1")],
        "Name of the environment variable": [typed("EXAMPLE_API_KEY")],
    },
}


@pytest.mark.slow
@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_every_provider_can_be_answered_on_a_terminal(
    provider: str, tmp_path: Path, cli_env: dict[str, str]
):
    replies = PROVIDERS[provider]
    answer_new_on_a_terminal(
        tmp_path, cli_env, {"Which inference provider": [provider_keys(provider)], **replies}
    )
    answers = answers_of(tmp_path / "demo-env")
    assert answers["provider"] == provider
    model = next(keys[-1] for prefix, keys in replies.items() if "odel" in prefix)
    assert answers["model_name"] == model.removeprefix(CLEAR).removesuffix("\r")
    env_py = (tmp_path / "demo-env" / "src" / "demo_env" / "env.py").read_text()
    assert f'model_name="{answers["model_name"]}"' in env_py
    if provider in {"vllm", "sglang", "openai_compatible"}:
        assert f'base_url="{answers["base_url"]}"' in env_py
    if provider == "sglang":
        assert answers["sglang_api"] == "chat"
    if provider == "openai_compatible":
        assert 'os.environ.get("EXAMPLE_API_KEY", "")' in env_py


@pytest.mark.slow
def test_the_dataset_branch_asks_its_questions(tmp_path: Path, cli_env: dict[str, str]):
    replies = {
        "Load tasks from a Hugging Face dataset": ["y"],
        # Enter on the empty prompt is refused by the validator, then a name is typed.
        "Dataset name on the Hugging Face hub": ["\r", typed("org/tasks")],
        "Dataset split": [typed("test")],
        "Field that holds the task prompt": [typed("question")],
        "Field that holds the reference answer": [typed("solution")],
    }
    answer_new_on_a_terminal(tmp_path, cli_env, replies)
    answers = answers_of(tmp_path / "demo-env")
    assert answers["use_dataset"] is True
    assert (answers["dataset_name"], answers["dataset_split"]) == ("org/tasks", "test")
    assert (answers["prompt_field"], answers["answer_field"]) == ("question", "solution")
    env_py = (tmp_path / "demo-env" / "src" / "demo_env" / "env.py").read_text()
    assert 'dataset_name="org/tasks"' in env_py and 'prompt_field="question"' in env_py


def test_the_judge_branch_asks_for_its_model_once_it_has_an_endpoint(
    tmp_path: Path, cli_env: dict[str, str]
):
    replies = {
        "How are rollouts rewarded": [DOWN + "\r"],  # the LLM judge
        "Base URL of the judge's": [typed("https://openrouter.ai/api/v1")],
        # Enter on the empty prompt is refused by the validator, then a name is typed.
        "Model name of the judge": ["\r", typed("openai/gpt-4o-mini")],
        "Environment variable that holds the judge's": ["\r"],  # its default, from the URL
    }
    answer_new_on_a_terminal(tmp_path, cli_env, replies)
    answers = answers_of(tmp_path / "demo-env")
    assert answers["reward_pattern"] == "judge"
    assert answers["judge_base_url"] == "https://openrouter.ai/api/v1"
    assert answers["judge_model"] == "openai/gpt-4o-mini"
    assert answers["judge_api_key_env"] == "OPENROUTER_API_KEY"
    env_py = (tmp_path / "demo-env" / "src" / "demo_env" / "env.py").read_text()
    assert '"openai/gpt-4o-mini"' in env_py and '"OPENROUTER_API_KEY"' in env_py


def test_the_vllm_server_choice_and_no_ci(tmp_path: Path, cli_env: dict[str, str]):
    replies = {
        "Which inference provider": [provider_keys("vllm")],
        "Model name the server serves": [typed("Qwen/Qwen3-8B")],
        "Which vLLM server": [DOWN * 2 + "\r"],  # Atropos's own vLLM server
        "Add a GitHub Actions workflow": ["n"],
    }
    asked = answer_new_on_a_terminal(tmp_path, cli_env, replies)
    # Atropos's server is no OpenAI API: its URL is asked as the server's, /v1 optional
    (url_question,) = [question for question in asked if question.startswith("Base URL")]
    assert "OpenAI" not in url_question and "ending in /v1" not in url_question
    assert "/generate" in url_question
    project = tmp_path / "demo-env"
    answers = answers_of(project)
    assert (answers["provider"], answers["vllm_server"], answers["ci"]) == (
        "vllm",
        "generate",
        False,
    )
    env_py = (project / "src" / "demo_env" / "env.py").read_text()
    assert 'inference_api="generate"' in env_py
    assert not (project / ".github").exists()


def test_a_multi_line_system_prompt_and_a_number_that_is_not_one(
    tmp_path: Path, cli_env: dict[str, str]
):
    replies = {
        # cleared, the field is no number: said so; then a number is typed
        "Most model turns per rollout": [typed(""), typed("4")],
        # Enter starts a new line; Esc then Enter ends the answer
        "System prompt of the agent": [f"{CLEAR}You are careful.\rCheck twice.{ESC_ENTER}"],
    }
    answer_new_on_a_terminal(tmp_path, cli_env, replies)
    answers = answers_of(tmp_path / "demo-env")
    assert answers["max_agent_turns"] == 4
    assert answers["system_prompt"] == "You are careful.\nCheck twice."
    prompt_file = tmp_path / "demo-env" / "src" / "demo_env" / "system_prompt.txt"
    assert prompt_file.read_text() == "You are careful.\nCheck twice.\n"
