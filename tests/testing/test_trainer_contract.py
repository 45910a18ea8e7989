"""What atroposlib's example GRPO trainer needs of groups, checked without torch."""

from __future__ import annotations

import pytest

from hermes_envgen.testing.trainer_contract import NO_LOGPROBS, summary, trainer_problems

M = -100  # not trained


def group(**changes) -> dict:
    """Two sequences as token mode makes them: prompt masked, generated tokens trained."""
    base = {
        "tokens": [[5, 6, 7, 8], [5, 6, 9]],
        "masks": [[M, M, 7, 8], [M, M, 9]],
        "scores": [1.0, 0.0],
        "inference_logprobs": [[1.0, 1.0, -0.2, -0.7], [1.0, 1.0, -1.5]],
        "overrides": None,
    }
    return base | changes


def test_token_mode_groups_are_ready():
    verdict = trainer_problems([group(), group(scores=[0.0, 0.5])])
    assert verdict.ready and not verdict.warnings
    assert (verdict.groups, verdict.sequences, verdict.trained_tokens) == (2, 4, 6)
    assert summary(verdict).startswith("2 groups, 4 sequences, 6 trained tokens")


@pytest.mark.parametrize("missing", [{"inference_logprobs": None}, {}])
def test_groups_without_logprobs_are_chat_mode_data_and_say_what_to_do(missing):
    bare = {k: v for k, v in group().items() if k != "inference_logprobs"} | missing
    verdict = trainer_problems([bare, bare])
    assert verdict.problems == [NO_LOGPROBS]
    assert "token mode" in summary(verdict) and "GRPO" in summary(verdict)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"masks": [[M, M, 7], [M, M, 9]]}, "group 0, sequence 0: 4 tokens but 3 mask values"),
        ({"masks": [[M, M, 7, 1], [M, M, 9]]}, "mask 1 at position 3 is neither -100 nor"),
        ({"masks": [[M, M, M, M], [M, M, 9]]}, "sequence 0 trains no token"),
        ({"scores": [1.0]}, "2 token sequences, 2 masks and 1 scores"),
        ({"scores": [1.0, float("nan")]}, "not a finite number"),
        ({"inference_logprobs": [[1.0, 1.0, -0.2, -0.7]]}, "for 1 of 2 sequences"),
        (
            {"inference_logprobs": [[1.0, 1.0, 0.3, -0.7], [1.0, 1.0, -1.5]]},
            "logprob 0.3 at trained position 2 is not a log-probability",
        ),
        (
            {"inference_logprobs": [[1.0, -0.2, -0.7], [1.0, 1.0, -1.5]]},
            "4 tokens but 3 inference logprobs",
        ),
    ],
)
def test_each_broken_need_is_named_where_it_is(changes, expected):
    verdict = trainer_problems([group(**changes)])
    assert not verdict.ready
    assert expected in verdict.problems[0], verdict.problems


def test_a_missing_overrides_key_is_named():
    bare = {k: v for k, v in group().items() if k != "overrides"}
    assert "no 'overrides' key" in trainer_problems([bare]).problems[0]


def test_only_some_groups_with_logprobs_is_a_problem():
    chat = {k: v for k, v in group().items() if k != "inference_logprobs"}
    verdict = trainer_problems([group(), chat])
    assert verdict.problems == [
        "1 of 2 groups have no inference_logprobs; the trainer would compare the others' "
        "with a placeholder"
    ]


def test_equal_scores_warn_that_they_add_no_gradient():
    verdict = trainer_problems([group(), group(scores=[0.5, 0.5])])
    assert verdict.ready
    assert verdict.warnings == [
        "1 of 2 groups have equal scores: their advantages are zero, so they add no gradient"
    ]
    everything_equal = trainer_problems([group(scores=[1.0, 1.0])])
    assert "a step on them changes nothing" in everything_equal.warnings[0]
    assert "changes nothing" in summary(everything_equal)


def test_repeated_problems_are_counted_not_listed():
    broken = group(masks=[[M, M, 7], [M, M]])
    verdict = trainer_problems([broken, broken])
    assert verdict.problems == ["group 0, sequence 0: 4 tokens but 3 mask values (and 3 more)"]


@pytest.mark.timeout(120)
def test_a_trainer_asking_before_any_env_registered_is_told_why(tmp_path):
    from hermes_envgen.errors import NoBatchInTime
    from hermes_envgen.testing.trainer import MinimalTrainer, RunApi

    with RunApi(log=tmp_path / "run-api.log") as api:
        trainer = MinimalTrainer(api.url, batch_size=8)
        trainer.register()
        with pytest.raises(NoBatchInTime) as raised:
            trainer.next_batch(timeout=1)
    assert "no batch within 1 s: no env has registered with run-api" in str(raised.value)
    assert f"--env.rollout_server_url {api.url}" in str(raised.value)
