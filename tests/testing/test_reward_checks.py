"""The reward check's report: which samples break the thresholds, and why, in one line each."""

from __future__ import annotations

from hermes_envgen.testing.reward_checks import RewardCheckReport, SampleOutcome


def test_every_replay_that_earned_the_wrong_reward_is_named_with_its_rollouts_error():
    erred = SampleOutcome(
        0,
        "What is 6 * 7?",
        gold=0.0,
        noop=1.0,
        gold_error="reward error: boom",
        noop_error="timeout",
        tamper=1.0,
        tamper_error="tool error: killed",
        shotgun=0.9,
        shotgun_error="judge failed",
        tool_touch=0.2,
        tool_touch_error="rollout error: gone",
    )
    fine = SampleOutcome(1, "Name the capital of France.", gold=1.0, noop=0.0)
    report = RewardCheckReport([erred, fine], gold_threshold=0.9, noop_threshold=0.1)
    sample = "sample 0 ('What is 6 * 7?'): "
    assert report.gold_failures == [sample + "gold solution earned 0 (reward error: boom)"]
    assert report.noop_failures == [sample + "answering without tools earned 1 (timeout)"]
    assert report.tamper_failures == [
        sample + "tampering with the checks earned 1 (tool error: killed)"
    ]
    assert report.shotgun_failures == [
        sample + "a shotgun list of candidates earned 0.9 (judge failed)"
    ]
    assert report.tool_touch_failures == [
        sample + "running a tool and giving up earned 0.2 (rollout error: gone)"
    ]


def test_a_replay_without_an_error_is_named_without_one():
    outcome = SampleOutcome(3, "x" * 80, gold=0.5, noop=0.0, tamper=0.5)
    report = RewardCheckReport([outcome], gold_threshold=0.9, noop_threshold=0.1)
    assert report.gold_failures == [f"sample 3 ({'x' * 50!r}): gold solution earned 0.5"]
    assert report.tamper_failures == [
        f"sample 3 ({'x' * 50!r}): tampering with the checks earned 0.5"
    ]
    assert report.noop_failures == report.shotgun_failures == report.tool_touch_failures == []


def test_a_reward_outside_zero_to_one_is_named_whichever_replay_earned_it():
    # The thresholds are set in [0, 1]: a gold reward of 2 passes them, and is still wrong.
    outcome = SampleOutcome(4, "Count the files.", gold=2.0, noop=-0.5, tamper=float("nan"))
    report = RewardCheckReport([outcome], gold_threshold=0.9, noop_threshold=0.1)
    assert report.gold_failures == report.noop_failures == []
    sample = "sample 4 ('Count the files.'): "
    assert report.range_failures == [
        sample + "gold solution earned 2",
        sample + "answering without tools earned -0.5",
        sample + "tampering with the checks earned nan",
    ]
    fine = SampleOutcome(5, "Name a color.", gold=1.0, noop=0.0)
    assert RewardCheckReport([fine]).range_failures == []


def test_a_reward_that_pays_both_of_two_shots_is_named():
    # A wrong answer.txt followed by the right reply earned 0.978 from multi_signal.
    both = SampleOutcome(6, "What is 6 * 7?", gold=1.0, noop=0.0, two_shots=0.978)
    one = SampleOutcome(7, "Name the capital of France.", gold=1.0, noop=0.0, two_shots=0.0)
    report = RewardCheckReport([both, one], gold_threshold=0.9, noop_threshold=0.1)
    assert report.two_shots_failures == [
        "sample 6 ('What is 6 * 7?'): two shots (a wrong answer.txt and the right reply, and "
        "the other way round) earned 0.978"
    ]
