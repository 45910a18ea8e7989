"""``hermes-envgen demo``: the whole pipeline in one command, offline.

It generates an env from the template, starts a scripted stub model that really solves the
built-in tasks through tool calls (and gives up on some, so rewards differ), runs ``process``
and ``evaluate``, and summarises what they wrote. Every process it starts is stopped again,
also on Ctrl-C.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes_envgen.errors import EnvRunFailed, Interrupted, UsageError
from hermes_envgen.runtime.rollout import EVAL, Metric, metric
from hermes_envgen.runtime.rollouts.records import METRICS_FILE

DEMO_NAME = "demo-env"
BACKEND_NOTES = {
    "bwrap": " (bubblewrap: read-only system, private workspace, no network, limits)",
    "local": " (no isolation: bwrap is not usable here; see the warning above)",
}


@dataclass
class DemoResult:
    """Where the demo's outputs are, and what they say."""

    project: Path
    groups_file: Path
    html_file: Path
    eval_dir: Path
    groups: int
    rollouts: int
    mean_reward: float
    eval_rollouts: int
    eval_mean_reward: float
    eval_mean_turns: float
    eval_tool_errors: float
    backend: str = "bwrap"  # where the agent's commands ran

    @classmethod
    def of(
        cls,
        project: Path,
        groups_file: Path,
        eval_dir: Path,
        groups: list[dict],
        metrics: dict[str, float],
        backend: str,
    ) -> DemoResult:
        """The result from process's groups and evaluate's metrics."""
        scores = [s for g in groups for s in g["scores"]]
        return cls(
            project=project,
            groups_file=groups_file,
            html_file=groups_file.with_suffix(".html"),
            eval_dir=eval_dir,
            groups=len(groups),
            rollouts=len(scores),
            mean_reward=statistics.mean(scores),
            eval_rollouts=int(metrics[metric(EVAL, Metric.ROLLOUTS)]),
            eval_mean_reward=metrics[metric(EVAL, Metric.MEAN_REWARD)],
            eval_mean_turns=metrics[metric(EVAL, Metric.MEAN_TURNS)],
            eval_tool_errors=metrics[metric(EVAL, Metric.TOOL_ERRORS_PER_ROLLOUT)],
            backend=backend,
        )

    def summary(self) -> str:
        return "\n".join(
            [
                f"project:   {self.project}",
                f"sandboxes: {self.backend}{BACKEND_NOTES.get(self.backend, '')}",
                f"process:   {self.groups} groups, {self.rollouts} rollouts, "
                f"mean reward {self.mean_reward:.2f}",
                f"evaluate:  {self.eval_rollouts} rollouts, mean reward "
                f"{self.eval_mean_reward:.2f}, mean turns {self.eval_mean_turns:.1f}, "
                f"tool errors per rollout {self.eval_tool_errors:.2f}",
                "",
                f"rollouts (JSONL):  {self.groups_file}",
                f"rollouts (HTML):   {self.html_file}",
                f"eval metrics:      {self.eval_dir / METRICS_FILE}",
                f"eval samples:      {self.eval_dir / 'samples.jsonl'}",
            ]
        )


def run_demo(
    directory: Path | None = None,
    *,
    data: Mapping[str, Any] | None = None,
    groups: int = 3,
    group_size: int = 4,
    timeout: float = 300,
    progress: Callable[[str], None] = lambda message: None,
) -> DemoResult:
    """Generate an env into ``directory`` (a temp dir by default) and run it end to end."""
    from hermes_envgen.devtools.check import find_env, in_env_process, stub_flags
    from hermes_envgen.generate import new_project
    from hermes_envgen.runtime.sandbox.choice import bwrap_unusable
    from hermes_envgen.runtime.sandbox.runs import reap_stale_runs, runs_directory
    from hermes_envgen.testing import (
        OfflineRun,
        StubServer,
        scripted_policy,
    )

    base = demo_directory(directory)
    progress(f"generating {DEMO_NAME} in {base}")
    project = new_project(DEMO_NAME, base, data=dict(data or {}), defaults=True).path
    target = find_env(project)
    info = in_env_process(target)
    samples = info["samples"]
    outputs = base / "demo-output"  # beside the project, so its git tree stays clean
    groups_file = outputs / "data" / "rollouts.jsonl"
    eval_dir = outputs / "eval"
    # What the generated env's default (auto) picks here, said in the summary.
    backend = "bwrap" if bwrap_unusable() is None else "local"
    try:
        with StubServer(scripted_policy(samples, judge=True)) as stub:
            run = OfflineRun.against_stub(
                target.entry,
                stub.base_url,
                outputs,
                cwd=project,
                timeout=timeout,
                env_flags=stub_flags(info, stub.base_url),
                extra_env=target.environment(),
            )
            run.env_flags["sandbox_backend"] = backend
            progress(f"process: {groups} groups of {group_size} against the stub model")
            written = run.process(groups=groups, group_size=group_size, output=groups_file)
            progress("evaluate: every held-out task once, at temperature 0")
            metrics, _ = run.evaluate(directory=eval_dir)
    except EnvRunFailed as exc:
        raise EnvRunFailed(f"the demo env failed: {exc}") from None
    except KeyboardInterrupt:
        raise Interrupted("demo interrupted; every process it started was stopped") from None
    finally:
        # An env killed past its grace period may have left sandboxes (size-limited
        # workspaces are mounts): removed as a next run would, then their directory.
        sandboxes = outputs / "sandboxes"  # the OfflineRun's sandbox_root
        reap_stale_runs(runs_directory(sandboxes))
        shutil.rmtree(sandboxes, ignore_errors=True)

    return DemoResult.of(project, groups_file, eval_dir, written, metrics, backend)


def demo_directory(directory: Path | None) -> Path:
    """Where the demo goes (a temp dir by default), made; UsageError when it holds one."""
    base = Path(directory or tempfile.mkdtemp(prefix="hermes-envgen-demo-")).absolute()
    if (base / DEMO_NAME).exists():  # a second run into the same directory
        raise UsageError(
            f"{base} already holds a demo ({DEMO_NAME}/): pass another directory, or remove "
            f"{base / DEMO_NAME} and {base / 'demo-output'} first"
        )
    base.mkdir(parents=True, exist_ok=True)
    return base
