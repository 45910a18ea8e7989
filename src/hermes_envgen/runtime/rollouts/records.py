"""The files of an evaluation's run directory (--env.data_dir_to_save_evals): where its rollout
records (:class:`~hermes_envgen.runtime.rollout.RolloutRecord`), its settings and its metrics
are written, and read back by a resume, ``view`` and ``check``.
"""

from __future__ import annotations

SAMPLES_FILE = "samples.jsonl"  # one RolloutRecord per scored rollout
FAILURES_FILE = "failures.jsonl"  # one RolloutRecord per rollout whose score was not measured
SETTINGS_FILE = "eval_settings.json"  # what a resume must not change
METRICS_FILE = "metrics.json"  # atroposlib's evaluate_log, with our config_general added
