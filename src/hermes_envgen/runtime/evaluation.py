"""Evaluation researchers can trust and read: k samples per item, pass@k, 95% intervals,
failures kept apart, and a journal of samples that lets an interrupted run resume.

``HermesAgentBaseEnv.run_eval`` plans the rollouts (:func:`plan_eval`), skips those its
:class:`SampleJournal` already holds, appends each finished one to it, and at the end turns the
records into metrics with :func:`summarize`.

The metrics (``eval/...``) cover the scored rollouts only:

- ``mean_reward`` and ``mean_turns`` are averaged per item first, so that every item weighs the
  same however many of its samples were scored; ``pass@1`` is the mean per-item share of
  passing samples; with k > 1 samples per item, ``pass@k`` and ``pass^k`` are the unbiased
  estimators 1 - C(n-c, k)/C(n, k) (at least one of k passes) and C(c, k)/C(n, k) (all k pass)
  for an item with n scored samples of which c passed, averaged over the items with n >= k
  (``pass@k_items`` says how many).
- A rollout passes when its reward is at least ``eval_pass_threshold`` (default 1.0: only a
  full score passes).
- Each headline metric has a 95% interval, ``<metric>_ci_low`` and ``<metric>_ci_high``: a
  Wilson score interval for the values in [0, 1] (mean reward, pass rates) with the item as the
  unit, since samples of one item are not independent (for rewards between 0 and 1 it is
  conservative: p(1 - p) bounds their variance); a Wilson interval over tool calls for the
  tool-error rate (it treats calls as independent); a normal interval over items for mean
  turns (left out with fewer than two items).

A failure is a rollout whose score was not measured: the inference server failed after its
retries, ``compute_reward`` raised, or the reward says so (``Reward.failure``: the judge
failed). It goes to failures.jsonl with its reason, counts in ``eval/failures``, and stays out
of every reward, turn and tool metric.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes_envgen.runtime.errors import ResumeError

logger = logging.getLogger(__name__)

SAMPLES_FILE = "samples.jsonl"
FAILURES_FILE = "failures.jsonl"
SETTINGS_FILE = "eval_settings.json"
METRICS_FILE = "metrics.json"

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile: two-sided 95% intervals
# A weighted sum that should be 1.0 may come out as 0.9999999999999999: it still passes.
PASS_TOLERANCE = 1e-9

INTERVALS = (
    "95% intervals: Wilson score over items for mean reward and pass rates, Wilson over tool "
    "calls for the tool-error rate, normal over items for mean turns"
)


# -- statistics -----------------------------------------------------------------------------


def wilson_interval(p: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion ``p`` observed over ``n`` units."""
    p = min(1.0, max(0.0, p))
    denominator = 1.0 + z * z / n
    center = (p + z * z / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1.0 - p) / n + z * z / (4 * n * n))
    return max(0.0, center - half), min(1.0, center + half)


def normal_interval(values: list[float], z: float = Z95) -> tuple[float, float] | None:
    """Mean ± z standard errors of ``values``; None with fewer than two values."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    half = z * statistics.stdev(values) / math.sqrt(len(values))
    return mean - half, mean + half


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased chance that at least one of k samples passes, from n samples with c passing."""
    if n < k:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased chance that all of k samples pass (pass^k), from n samples with c passing."""
    if n < k:
        raise ValueError(f"pass^{k} needs at least {k} samples, got {n}")
    return math.comb(c, k) / math.comb(n, k)


def passed(reward: float, threshold: float) -> bool:
    """Whether a rollout with this reward counts as passed."""
    return reward >= threshold - PASS_TOLERANCE


# -- what to run ----------------------------------------------------------------------------


@dataclass(frozen=True)
class EvalTask:
    """One rollout an evaluation owes: the item, its stable key, and the sample's index."""

    item: Any
    item_key: str
    index: int

    @property
    def key(self) -> str:
        """The rollout's key in samples.jsonl: the same in every run of the same evaluation."""
        return f"{self.item_key}#{self.index}"

    def identity(self) -> dict[str, Any]:
        """The fields that tie a saved record to this rollout."""
        return {"key": self.key, "item_key": self.item_key, "sample_index": self.index}


def item_key(item: Any) -> str:
    """A key of the item's content: unchanged across runs, seeds and orderings."""
    try:
        canonical = json.dumps(item, sort_keys=True, ensure_ascii=False, default=repr)
    except TypeError:  # keys that cannot be sorted together (str and int)
        canonical = repr(item)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def plan_eval(items: Iterable[Any], samples_per_item: int) -> list[EvalTask]:
    """Every rollout of an evaluation, k per item; a repeated item gets keys of its own."""
    seen: dict[str, int] = {}
    tasks: list[EvalTask] = []
    for item in items:
        base = item_key(item)
        seen[base] = seen.get(base, 0) + 1
        key = base if seen[base] == 1 else f"{base}-{seen[base]}"
        tasks += [EvalTask(item, key, index) for index in range(samples_per_item)]
    return tasks


# -- the journal ----------------------------------------------------------------------------


class SampleJournal:
    """samples.jsonl and failures.jsonl of one evaluation, appended to as rollouts finish.

    Each line is flushed as soon as its rollout is scored, so a killed run loses only the
    rollouts in flight. With ``resume`` the saved lines are read back and their rollouts are
    not run again; without it, the files of an earlier run are moved to ``*.bak`` first, so
    that a new run never mixes with an old one. ``settings`` (model, temperature, ...) are
    saved beside them, and a resume with other settings is refused. With no ``directory``
    the records are kept in memory only.
    """

    def __init__(
        self, directory: str | Path | None, settings: dict[str, Any], *, resume: bool
    ) -> None:
        self.directory = Path(directory) if directory is not None else None
        self.records: dict[str, dict] = {}  # key -> record: earlier runs' and this run's
        self._files: dict[str, Any] = {}
        if self.directory is None:
            if resume:
                raise ResumeError(
                    "resume needs the saved samples: set --env.data_dir_to_save_evals to the "
                    "directory of the run to continue"
                )
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        if resume:
            self._check_settings(settings)
            for name in (SAMPLES_FILE, FAILURES_FILE):
                self._load(self.directory / name)
        else:
            self._move_aside()
        (self.directory / SETTINGS_FILE).write_text(json.dumps(settings, indent=2) + "\n")

    def append(self, record: dict) -> None:
        """Save one finished rollout: to failures.jsonl if it has a failure, else samples.jsonl."""
        self.records[record["key"]] = record
        if self.directory is None:
            return
        name = FAILURES_FILE if record.get("failure") else SAMPLES_FILE
        if name not in self._files:
            self._files[name] = (self.directory / name).open("a", encoding="utf-8")
        stream = self._files[name]
        stream.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        stream.flush()  # the line survives a kill of this process from now on

    def close(self) -> None:
        """Close the files (appending opens them again)."""
        for stream in self._files.values():
            stream.close()
        self._files.clear()

    def _check_settings(self, settings: dict[str, Any]) -> None:
        path = self.directory / SETTINGS_FILE
        try:
            saved = json.loads(path.read_text())
        except FileNotFoundError:
            if (self.directory / SAMPLES_FILE).exists():
                logger.warning("no %s: cannot check that the settings match", path)
            return
        except ValueError:
            raise ResumeError(f"cannot resume: {path} is not valid JSON") from None
        keys = settings.keys() | saved.keys()
        changed = sorted(key for key in keys if settings.get(key) != saved.get(key))
        if changed:
            raise ResumeError(
                f"cannot resume the evaluation in {self.directory}: it ran with other settings "
                f"({', '.join(changed)}); run again without --env.resume true to start afresh"
            )

    def _load(self, path: Path) -> None:
        """Read the records a file holds; drop a line cut short by a kill."""
        if not path.exists():
            return
        # JSON lines end at "\n" only: splitlines() would also cut at U+2028 inside a string.
        lines = [line for line in path.read_text(encoding="utf-8").split("\n") if line]
        kept: list[str] = []
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("key"), str):
                self.records[record["key"]] = record
                kept.append(line)
        if len(kept) < len(lines):
            logger.warning("%s: %d unreadable line(s) dropped", path, len(lines) - len(kept))
            # Rewritten whole, so that the next append starts on a line of its own.
            path.write_text("".join(f"{line}\n" for line in kept), encoding="utf-8")
        logger.info("resuming: %d rollout(s) read from %s", len(kept), path)

    def _move_aside(self) -> None:
        moved = []
        for name in (SAMPLES_FILE, FAILURES_FILE, METRICS_FILE):
            path = self.directory / name
            if path.exists():
                path.replace(path.with_name(f"{name}.bak"))
                moved.append(name)
        if moved:
            logger.warning(
                "starting a fresh evaluation in %s: the earlier run's %s moved to *.bak (pass "
                "--env.resume true to continue a run instead)",
                self.directory,
                ", ".join(moved),
            )


# -- metrics --------------------------------------------------------------------------------


def summarize(
    records: Iterable[dict], samples_per_item: int, pass_threshold: float, prefix: str = "eval"
) -> dict[str, float]:
    """The evaluation's metrics from its saved records (scored rollouts and failures)."""
    records = list(records)
    scored = [r for r in records if not r.get("failure")]
    k = samples_per_item
    metrics: dict[str, float] = {}
    for record in records:  # counts (judge_failures, reward_errors, ...) cover every rollout
        for name, value in (record.get("reward_counts") or {}).items():
            metrics[f"{prefix}/{name}"] = metrics.get(f"{prefix}/{name}", 0.0) + float(value)
    signals: dict[str, list[float]] = {}
    for record in scored:
        for name, value in (record.get("reward_signals") or {}).items():
            signals.setdefault(name, []).append(float(value))
    metrics.update({f"{prefix}/{name}": statistics.fmean(v) for name, v in signals.items()})
    metrics |= {
        f"{prefix}/items": float(len({r["item_key"] for r in records})),
        f"{prefix}/samples_per_item": float(k),
        f"{prefix}/rollouts": float(len(scored)),
        f"{prefix}/failures": float(len(records) - len(scored)),
        f"{prefix}/reward_errors": metrics.get(f"{prefix}/reward_errors", 0.0),
        f"{prefix}/rollout_errors": float(sum(1 for r in records if r.get("rollout_error"))),
    }
    if not scored:
        return metrics

    by_item: dict[str, list[dict]] = {}
    for record in scored:
        by_item.setdefault(record["item_key"], []).append(record)
    rewards = [[float(r["reward"]) for r in group] for group in by_item.values()]
    passes = [sum(passed(x, pass_threshold) for x in group) for group in rewards]
    n_items = len(rewards)

    def rate(name: str, value: float, units: float) -> None:
        low, high = wilson_interval(value, units)
        metrics.update({name: value, f"{name}_ci_low": low, f"{name}_ci_high": high})

    rate(f"{prefix}/mean_reward", statistics.fmean(statistics.fmean(g) for g in rewards), n_items)
    rate(
        f"{prefix}/pass@1",
        statistics.fmean(c / len(g) for g, c in zip(rewards, passes)),
        n_items,
    )
    if k > 1:
        complete = [(len(g), c) for g, c in zip(rewards, passes) if len(g) >= k]
        metrics[f"{prefix}/pass@{k}_items"] = float(len(complete))
        if complete:
            rate(
                f"{prefix}/pass@{k}",
                statistics.fmean(pass_at_k(n, c, k) for n, c in complete),
                len(complete),
            )
            rate(
                f"{prefix}/pass^{k}",
                statistics.fmean(pass_hat_k(n, c, k) for n, c in complete),
                len(complete),
            )

    item_turns = [statistics.fmean(r["turns_used"] for r in g) for g in by_item.values()]
    metrics[f"{prefix}/mean_turns"] = statistics.fmean(item_turns)
    interval = normal_interval(item_turns)
    if interval is not None:
        metrics[f"{prefix}/mean_turns_ci_low"], metrics[f"{prefix}/mean_turns_ci_high"] = interval

    calls = sum(_tool_calls(r) for r in scored)
    errors = sum(len(r.get("tool_errors") or []) for r in scored)
    if calls:
        rate(f"{prefix}/tool_error_rate", errors / calls, calls)
    else:
        metrics[f"{prefix}/tool_error_rate"] = 0.0
    n = len(scored)
    metrics |= {
        f"{prefix}/tool_calls_per_rollout": calls / n,
        f"{prefix}/tool_errors_per_rollout": errors / n,
        f"{prefix}/finished_naturally_rate": sum(bool(r.get("finished_naturally")) for r in scored)
        / n,
    }
    return metrics


def _tool_calls(record: dict) -> int:
    """Tool calls of a saved rollout (records of older versions lack the count: from messages)."""
    if "tool_calls" in record:
        return int(record["tool_calls"])
    return sum(
        len(m.get("tool_calls") or []) for m in record.get("messages", []) if isinstance(m, dict)
    )


# -- what the run was -----------------------------------------------------------------------


def eval_settings(env: Any) -> dict[str, Any]:
    """The settings that shape an evaluation's rollouts: a resume must not change them."""
    config = env.config
    return {
        "env": env.name or type(env).__name__,
        "model_name": _first_server_field(env, "model_name"),
        "eval_temperature": config.eval_temperature,
        "max_agent_turns": config.max_agent_turns,
        "max_tokens_per_turn": config.max_tokens_per_turn,
        "system_prompt": config.system_prompt,
        "enabled_toolsets": config.enabled_toolsets,
        "disabled_toolsets": config.disabled_toolsets,
        "tool_call_parser": config.tool_call_parser,
    }


def run_record(env: Any) -> dict[str, Any]:
    """What two evaluation runs need to be compared: versions, model, provider and settings."""
    config = env.config
    return {
        "env": env.name or type(env).__name__,
        "env_version": env_version(type(env)),
        "hermes_envgen_version": _hermes_envgen_version(),
        "template_version": template_version(type(env)),
        "model_name": _first_server_field(env, "model_name"),
        "provider": {
            "base_url": _first_server_field(env, "base_url"),
            "server_type": _first_server_field(env, "server_type"),
        },
        "tool_call_parser": config.tool_call_parser,
        "seed": getattr(config, "seed", None),
        "evaluation": {
            "samples_per_item": config.eval_samples_per_item,
            "pass_threshold": config.eval_pass_threshold,
            "resumed": config.resume,
            "confidence_intervals": INTERVALS,
        },
        "env_config": config.model_dump(mode="json"),
    }


def record_run(metrics_path: str | Path, run: dict[str, Any]) -> None:
    """Add ``run`` to the ``config_general`` of the metrics.json atroposlib wrote."""
    path = Path(metrics_path)
    data = json.loads(path.read_text())
    data.setdefault("config_general", {}).update(run)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")


def env_version(env_cls: type) -> str | None:
    """The version of the installed distribution that holds the env's package, if any."""
    from importlib.metadata import PackageNotFoundError, packages_distributions, version

    package = env_cls.__module__.split(".")[0]
    if package == "__main__":  # run as a file: no package to look up
        return None
    candidates = [package, package.replace("_", "-")]
    candidates += packages_distributions().get(package, [])
    for name in candidates:
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return None


def template_version(env_cls: type) -> str | None:
    """The template version (``_commit``) in the ``.copier-answers.yml`` above the env's file."""
    import yaml

    try:
        start = Path(inspect.getfile(env_cls)).resolve().parent
    except (TypeError, OSError):
        return None
    for directory in (start, *start.parents):
        answers = directory / ".copier-answers.yml"
        if answers.is_file():
            try:
                data = yaml.safe_load(answers.read_text())
            except (OSError, yaml.YAMLError):
                return None
            commit = data.get("_commit") if isinstance(data, dict) else None
            return str(commit) if commit is not None else None
    return None


def _hermes_envgen_version() -> str:
    from hermes_envgen import __version__

    return __version__


def _first_server_field(env: Any, name: str) -> Any:
    servers = getattr(getattr(env, "server", None), "servers", None) or []
    config = getattr(servers[0], "config", None) if servers else None
    value = getattr(config, name, None)
    return value.value if hasattr(value, "value") else value  # an enum (server_type)
