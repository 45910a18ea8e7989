"""End to end on a real Docker engine: a generated env's process and evaluate modes with
``--env.sandbox_backend docker``, against the stub model that solves each task once and gives
up once. The reward runs the task's checks in the container, so solved and given-up rollouts
score apart only if the agent's commands really ran there."""

from __future__ import annotations

from helpers.docker_env import left_of
from helpers.sandbox import needs_docker

from hermes_envgen.testing.envs import read_eval_results, validate_groups

pytestmark = needs_docker


def test_process_runs_the_rollouts_in_containers(run_on_docker, tmp_path):
    out = tmp_path / "groups.jsonl"
    created = run_on_docker(
        "process",
        {"env.total_steps": 1, "env.group_size": 2, "env.data_path_to_save_groups": out},
    )
    (group,) = validate_groups(out, group_size=2)
    assert sorted(group["scores"]) == [0.0, 1.0], "solved and given up should score apart"
    assert len(created) >= 2  # one per rollout, on the engine
    assert left_of(created) == []  # and every one removed


def test_evaluate_runs_the_rollouts_in_containers(run_on_docker, tmp_path):
    eval_dir = tmp_path / "eval"
    created = run_on_docker("evaluate", {"env.data_dir_to_save_evals": eval_dir})
    metrics, samples_saved = read_eval_results(eval_dir)
    assert samples_saved and metrics["eval/rollouts"] == len(samples_saved)
    assert metrics["eval/failures"] == 0, "a rollout failed: see failures.jsonl"
    assert any(sample["tools_used"] for sample in samples_saved)
    assert 0.0 < metrics["eval/mean_reward"] <= 1.0
    assert len(created) >= len(samples_saved)
    assert left_of(created) == []
