"""atroposlib's own GRPO trainer trains on what ``serve`` delivers: real steps on CPU.

The example env serves groups to a real run-api; the batches run-api hands out go, untouched,
through the example trainer's batching and training step (``hermes_envgen.testing.grpo``) on a
tiny randomly initialised model. Token-mode data trains: finite loss, gradient exactly on the
trained positions, and those are exactly the assistant tokens. Chat-mode data is refused by the
trainer for want of inference logprobs, as the trainer-ready verdict says beforehand.
"""

from __future__ import annotations

import copy
import importlib.util
import math
import os
import subprocess

import pytest
from conftest import EXAMPLES
from helpers.serve import GROUP_SIZE, serve_command

from hermes_envgen.runtime.chat.trajectory import trained_runs, untrained_tool_calls
from hermes_envgen.runtime.inference import CHAT_MODE_DATA
from hermes_envgen.testing.runner import offline_environment
from hermes_envgen.testing.trainer import MinimalTrainer, RunApi
from hermes_envgen.testing.trainer_contract import NO_LOGPROBS, trainer_problems

# Set by .ci/run: CI machines have a CPU build of torch, so the test must run there.
REQUIRE_TORCH_VARIABLE = "HERMES_ENVGEN_REQUIRE_TORCH"
BATCH_SIZE = 2 * GROUP_SIZE
STEPS = 2

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def grpo():
    """The test kit's wrapper of the example trainer; skipped (or failed in CI) without torch."""
    if importlib.util.find_spec("torch") is None:
        reason = "torch is not installed (scripts/install-torch-cpu.sh installs a CPU build)"
        if os.environ.get(REQUIRE_TORCH_VARIABLE) == "1":
            pytest.fail(f"{REQUIRE_TORCH_VARIABLE}=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    from hermes_envgen.testing import grpo

    return grpo


def served_batches(stub, tokenizer, tmp_path, *flags: str) -> list[list[dict]]:
    """``STEPS`` batches of the example env's groups, as run-api hands them to a trainer."""
    with RunApi(log=tmp_path / "run-api.log") as api:
        trainer = MinimalTrainer(api.url, batch_size=BATCH_SIZE, num_steps=STEPS)
        trainer.register()
        log = open(tmp_path / "env.log", "w")  # noqa: SIM115
        env = subprocess.Popen(
            serve_command(
                stub.base_url, tokenizer, api.url, tmp_path / "sandboxes",
                "--env.total_steps", str(STEPS), "--env.steps_per_eval", "1000", *flags,
            ),
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=offline_environment(),
        )  # fmt: skip
        try:
            batches = [trainer.next_batch(timeout=180) for _ in range(STEPS)]
            assert env.wait(timeout=120) == 0, (tmp_path / "env.log").read_text()[-3000:]
        finally:
            if env.poll() is None:
                env.kill()
                env.wait()
            log.close()
    return batches


def test_token_mode_groups_train_on_exactly_the_assistant_tokens(
    grpo, stub_server, offline_tokenizer, tmp_path
):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(offline_tokenizer)
    stub = stub_server(EXAMPLES / "stub_script.yaml", tokenizer=offline_tokenizer)
    batches = served_batches(stub, offline_tokenizer, tmp_path, "--openai.server_type", "vllm")
    assert CHAT_MODE_DATA not in (tmp_path / "env.log").read_text()
    trainer = grpo.ExampleTrainer(len(tokenizer))
    for batch in batches:
        verdict = trainer_problems(batch)
        assert verdict.ready, verdict.problems
        sequences = [
            (tokens, masks, messages)
            for group in batch
            for tokens, masks, messages in zip(group["tokens"], group["masks"], group["messages"])
        ]
        report = trainer.step(batch)

        assert math.isfinite(report.metrics["loss"])
        assert report.metrics["grad_norm"] > 0
        assert len(report.label_positions) == len(sequences) == BATCH_SIZE
        for (tokens, masks, messages), labels, moved, advantage in zip(
            sequences, report.label_positions, report.gradient_positions, report.advantages
        ):
            # The trainer's labels are the positions the env marked trained (shifted by one:
            # the logits at p predict token p + 1) ...
            assert labels == {p - 1 for p, m in enumerate(masks) if m != -100}
            # ... which hold the assistant turns and nothing else: one run per reply, its
            # calls whole, ending where the model stopped.
            runs = [tokenizer.decode(run) for run in trained_runs(tokens, masks)]
            replies = [m for m in messages if m["role"] == "assistant"]
            assert len(runs) == len(replies)
            assert untrained_tool_calls(messages, runs) == []
            for run, reply in zip(runs, replies):
                assert run.endswith("<|im_end|>")
                assert (reply.get("content") or "") in run
            # The loss moves the logits of trained positions only, and all of them when the
            # rollout's advantage is not zero.
            assert moved <= labels
            if advantage != 0:
                assert moved == labels


def test_chat_mode_groups_are_refused_by_the_trainer_as_the_verdict_says(
    grpo, stub_server, offline_tokenizer, tmp_path
):
    from example_trainer.data import pad_data_to_good_offset
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(offline_tokenizer)
    stub = stub_server(EXAMPLES / "stub_script.yaml")
    batches = served_batches(stub, offline_tokenizer, tmp_path)
    batch = batches[0]
    # serve said so at start-up, once
    assert (tmp_path / "env.log").read_text().count(CHAT_MODE_DATA) == 1

    verdict = trainer_problems(batch)
    assert verdict.problems == [NO_LOGPROBS]
    trainer = grpo.ExampleTrainer(len(tokenizer))
    # run-api hands the groups out with "inference_logprobs": null, on which the trainer's
    # batching fails outright ...
    assert all(group["inference_logprobs"] is None for group in batch)
    with pytest.raises(TypeError):
        trainer.step(batch)
    # ... and without the key (as process writes them) they batch, tokens and labels lining up,
    # but its loss refuses them, for the reason the verdict gave.
    written = [{k: v for k, v in g.items() if k != "inference_logprobs"} for g in batch]
    assert trainer_problems(written).problems == [NO_LOGPROBS]
    tokens, labels, *_, logprobs = pad_data_to_good_offset({"batch": copy.deepcopy(written)}, 4)
    assert [t.shape for t in tokens] == [shape.shape for shape in labels]
    assert logprobs is None
    with pytest.raises(ValueError, match="GRPO requires inference_logprobs"):
        trainer.step(written)
