"""Evaluation researchers can trust and read: k samples per item, pass@k, 95% intervals,
failures kept apart, and a journal of samples that lets an interrupted run resume.

``HermesAgentBaseEnv.run_eval`` plans the rollouts (:func:`plan_eval`), skips those its
:class:`SampleJournal` already holds, appends each finished one to it, and at the end turns the
records into metrics with :func:`summarize`.

The metrics (``eval/...``):

- ``mean_reward`` and the pass rates count every rollout: a failure (below) at the env's
  ``failure_score`` (0 by default), so that an agent never gains by breaking its judge or a
  hook; the other metrics (turns, tool use, the reward's signals) cover the measured ones.
- ``mean_reward`` and ``mean_turns`` are averaged per item first, so that every item weighs the
  same however many of its samples it had; ``pass@1`` is the mean per-item share of
  passing samples; with k > 1 samples per item, ``pass@k`` and ``pass^k`` are the unbiased
  estimators 1 - C(n-c, k)/C(n, k) (at least one of k passes) and C(c, k)/C(n, k) (all k pass)
  for an item with n samples of which c passed, averaged over the items with n >= k
  (``pass@k_items`` says how many).
- A rollout passes when its reward is at least ``eval_pass_threshold`` (default 1.0: only a
  full score passes; a shaped reward sets what a solved task earns at least).
- Each headline metric has a 95% interval, ``<metric>_ci_low`` and ``<metric>_ci_high``: a
  Wilson score interval for the values in [0, 1] (mean reward, pass rates) with the item as the
  unit, since samples of one item are not independent (for rewards between 0 and 1 it is
  conservative: p(1 - p) bounds their variance); a Wilson interval over tool calls for the
  tool-error rate (it treats calls as independent); a normal interval over items for mean
  turns (left out with fewer than two items).

A failure is a rollout whose score was not measured: the inference server failed after its
retries, a turn hook or ``compute_reward`` raised (or returned what it must not), the sandbox
did not start, or the reward says so (``Reward.failure``: the judge failed). It goes to
failures.jsonl with its reason, counts in ``eval/failures`` and ``eval/failure_rate`` (above
``FAILURE_WARN_SHARE``, the run says so in a warning) and in the reward metrics at
``failure_score``, and stays out of every turn and tool metric.
"""

from hermes_envgen.runtime.errors import ResumeError
from hermes_envgen.runtime.rollouts.evaluation.journal import (
    EvalTask,
    SampleJournal,
    item_key,
    plan_eval,
    summary,
    tool_call_count,
    tool_error_count,
)
from hermes_envgen.runtime.rollouts.evaluation.metrics import (
    FAILURE_WARN_SHARE,
    INTERVALS,
    summarize,
)
from hermes_envgen.runtime.rollouts.evaluation.provenance import (
    env_version,
    eval_settings,
    record_run,
    run_record,
    template_version,
)
from hermes_envgen.runtime.rollouts.evaluation.stats import (
    PASS_TOLERANCE,
    Z95,
    normal_interval,
    pass_at_k,
    pass_hat_k,
    passed,
    wilson_interval,
)
from hermes_envgen.runtime.rollouts.records import (
    FAILURES_FILE,
    METRICS_FILE,
    SAMPLES_FILE,
    SETTINGS_FILE,
)

__all__ = [
    "FAILURES_FILE",
    "FAILURE_WARN_SHARE",
    "INTERVALS",
    "METRICS_FILE",
    "PASS_TOLERANCE",
    "SAMPLES_FILE",
    "SETTINGS_FILE",
    "Z95",
    "EvalTask",
    "ResumeError",
    "SampleJournal",
    "env_version",
    "eval_settings",
    "item_key",
    "normal_interval",
    "pass_at_k",
    "pass_hat_k",
    "passed",
    "plan_eval",
    "record_run",
    "run_record",
    "summarize",
    "summary",
    "template_version",
    "tool_call_count",
    "tool_error_count",
    "wilson_interval",
]
