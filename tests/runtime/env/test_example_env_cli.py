"""The example env's real CLI modes, as subprocesses with timeouts, against the stub server."""

from __future__ import annotations

import shutil

import pytest
from conftest import EXAMPLES
from transformers import AutoTokenizer

from hermes_envgen.runtime.chat.trajectory import MASKED
from hermes_envgen.testing import OfflineRun

ENV_FILE = EXAMPLES / "terminal_env.py"
SCRIPT = EXAMPLES / "stub_script.yaml"


@pytest.mark.slow
@pytest.mark.parametrize(
    "backend",
    [
        "local",
        pytest.param(
            "bwrap",
            marks=pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap not installed"),
        ),
    ],
)
def test_process_writes_valid_groups(stub_server, offline_tokenizer, tmp_path, backend):
    server = stub_server(SCRIPT)
    out = tmp_path / "data" / "groups.jsonl"
    run = OfflineRun(ENV_FILE, server.base_url, offline_tokenizer, tmp_path, health_check=None)
    # local as root only when opted in: these tests run as root in CI's containers
    groups = run.process(
        groups=3,
        output=out,
        env__sandbox_backend=backend,
        env__sandbox_allow_unsafe_local=backend == "local",
    )
    assert len(groups) == 3
    tokenizer = AutoTokenizer.from_pretrained(offline_tokenizer)
    all_scores = []
    for group in groups:
        assert len(group["tokens"]) == len(group["masks"]) == len(group["scores"]) == 4
        for tokens, masks, messages in zip(group["tokens"], group["masks"], group["messages"]):
            assert len(tokens) == len(masks)
            assert all(isinstance(t, int) for t in tokens)
            trained = [t for t, m in zip(tokens, masks) if m != MASKED]
            assert trained, "every sequence trains at least one token"
            assert messages[-1]["content"] in tokenizer.decode(trained)
        assert all(0.0 <= s <= 1.0 for s in group["scores"])
        all_scores += group["scores"]
    assert set(all_scores) == {0.0, 1.0}
    assert (out.parent / "groups.html").exists()
    assert not any((tmp_path / "sandboxes").rglob("*.txt")), "sandboxes were cleaned up"


@pytest.mark.slow
def test_evaluate_writes_metrics_and_samples(stub_server, offline_tokenizer, tmp_path):
    server = stub_server(SCRIPT)
    run = OfflineRun(ENV_FILE, server.base_url, offline_tokenizer, tmp_path, health_check=None)
    metrics, samples = run.evaluate()
    assert len(samples) == 3 and metrics["eval/rollouts"] == 3.0
    assert 0.0 <= metrics["eval/mean_reward"] <= 1.0
    assert metrics["eval/tool_calls_per_rollout"] >= 1.0
    assert all(s["tools_used"] for s in samples)
