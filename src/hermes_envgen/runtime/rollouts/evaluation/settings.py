"""EvalSettings: how an evaluation runs and is scored, as one group."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EvalSettings:
    """An evaluation's settings (``config.evaluation_settings()``): where its results go, how
    many rollouts per item and how many at once, at what temperature, and how they are scored."""

    save_dir: str | None  # data_dir_to_save_evals: samples.jsonl, failures.jsonl, metrics.json
    samples_per_item: int = 1  # k: pass@k and pass^k need k > 1
    pass_threshold: float = 1.0  # a rollout at or above it passes
    temperature: float = 0.0  # the evaluation rollouts' sampling temperature
    failure_score: float = 0.0  # what a failed rollout counts as in every metric
    resume: bool = False  # continue the run saved in save_dir
    workers: int = 1  # rollouts at once (max_eval_workers)
