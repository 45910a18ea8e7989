"""The check's "token fidelity" row: token-mode rollouts re-tokenized with the chat template.

Groups come from the example env's token-mode rollouts against the stub's ``/generate``; the
row passes with the template of the model's format and says where a deliberately mismatched
template (no newline after ``<tool_call>``) gives other ids than were sampled.
"""

from __future__ import annotations

import asyncio

import pytest
from helpers.token_server import GREETING_SCRIPT
from terminal_env import TASKS, TerminalTaskEnv

from hermes_envgen.devtools.check import FAIL, FIDELITY_ROW, PASS, token_fidelity_check
from hermes_envgen.runtime.chat.template_data import HERMES_TEMPLATE
from hermes_envgen.testing.envs import build_env

MISMATCHED = HERMES_TEMPLATE.replace("'<tool_call>\\n{", "'<tool_call>{")


@pytest.fixture
def token_mode_groups(stub_server, offline_tokenizer, tmp_path) -> list[dict]:
    stub = stub_server(GREETING_SCRIPT, tokenizer=offline_tokenizer)
    env = build_env(
        TerminalTaskEnv,
        stub.base_url,
        offline_tokenizer,
        tmp_path,
        server_overrides={"server_type": "vllm"},
        group_size=2,
    )
    group, _ = asyncio.run(asyncio.wait_for(env.collect_trajectories(TASKS[0]), 120))
    assert "inference_logprobs" in group
    return [group]


def test_the_row_passes_when_the_template_gives_the_sampled_ids(
    token_mode_groups, offline_tokenizer
):
    row = token_fidelity_check(token_mode_groups, str(offline_tokenizer))
    assert (row.name, row.status) == (FIDELITY_ROW, PASS), row.reason
    assert row.reason == "all 2 rollouts re-tokenize with the chat template to the sampled ids"


def test_the_row_says_where_a_mismatched_template_differs(
    token_mode_groups, offline_tokenizer, tmp_path
):
    assert MISMATCHED != HERMES_TEMPLATE
    template = tmp_path / "mismatched.jinja"
    template.write_text(MISMATCHED)
    row = token_fidelity_check(
        token_mode_groups, str(offline_tokenizer), chat_template=str(template)
    )
    assert row.status == FAIL
    assert row.reason.startswith("2 of 2 rollouts re-tokenize to other ids than were sampled")
    # Where: the first turn, right after <tool_call>, the newline the model generated.
    assert "rollout 1: turn 1, token 11: sampled 'ol_call>\\n{\"name\"'" in row.reason
    assert "the template renders 'ol_call>{\"name\":'" in row.reason


@pytest.mark.slow
@pytest.mark.timeout(1000)  # two whole checks: past 300 s on a busy machine
def test_check_shows_the_row_for_a_token_mode_endpoint(stub_server, offline_tokenizer, tmp_path):
    import subprocess
    import sys

    from conftest import EXAMPLES
    from helpers.check import SCRIPT

    stub = stub_server(SCRIPT, tokenizer=offline_tokenizer)
    base = [sys.executable, "-m", "hermes_envgen", "check", str(EXAMPLES / "terminal_env.py")]
    base += ["--base-url", stub.base_url, "--server-type", "vllm"]
    base += ["--tokenizer", str(offline_tokenizer)]
    template = tmp_path / "mismatched.jinja"
    template.write_text(MISMATCHED)
    tables = {}
    for name, extra in (("model's", []), ("mismatched", ["--chat-template", str(template)])):
        done = subprocess.run(
            [*base, *extra],
            capture_output=True,
            text=True,
            timeout=900,
            stdin=subprocess.DEVNULL,
            cwd=tmp_path,
        )
        tables[name] = done.stdout + done.stderr
    assert "PASS  token fidelity" in tables["model's"], tables["model's"]
    assert "FAIL  token fidelity" in tables["mismatched"], tables["mismatched"]
    assert "re-tokenize to other ids than were sampled" in tables["mismatched"]
