"""Wall time of the reward replays (``check_rewards``: what ``hermes-envgen check`` and every
generated project's reward test run) with replays in flight together against one after another.

A project with the default answers is rendered, and its 24 built-in tasks are replayed five ways
(gold, no-op, tool touch, shotgun, tampering: 120 rollouts in bwrap sandboxes) through its real
agent loop against scripted stubs, with ``CONCURRENT_REPLAYS`` as shipped and with 1, the
baseline. Runs alternate; the medians and their ratio are printed.

    .venv/bin/python benchmarks/bench_reward_checks.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hermes_envgen.testing import OFFLINE_ENVIRONMENT, reward_checks
from hermes_envgen.testing.tokenizer import build_offline_tokenizer

NAME = "bench-replays"


def replay_seconds(env_cls: type, samples: list[dict], tokenizer: Path, workdir: Path) -> float:
    """Seconds one ``check_rewards`` of every sample takes; fails loudly on a wrong reward."""
    start = time.perf_counter()
    report = reward_checks.check_rewards(env_cls, samples, tokenizer, workdir)
    seconds = time.perf_counter() - start
    failures = report.gold_failures + report.noop_failures + report.tamper_failures
    if failures:
        raise SystemExit(f"the replays found a reward problem: {failures[:3]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.update(OFFLINE_ENVIRONMENT)
    shipped = reward_checks.CONCURRENT_REPLAYS
    with tempfile.TemporaryDirectory(prefix="bench-replays.") as tmp:
        out = Path(tmp)
        subprocess.run(
            [sys.executable, "-m", "hermes_envgen", "new", NAME, "--defaults", "-o", str(out)],
            check=True, capture_output=True, text=True, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        sys.path.insert(0, str(out / NAME / "src"))
        from bench_replays import BenchReplaysEnv
        from bench_replays.samples import SAMPLES

        tokenizer = build_offline_tokenizer(out / "tokenizer")
        timings: dict[int, list[float]] = {shipped: [], 1: []}
        replay_seconds(BenchReplaysEnv, SAMPLES, tokenizer, out / "warm")  # imports, caches
        for round_ in range(args.rounds):  # alternate, so both see the same machine load
            for concurrency in timings:
                reward_checks.CONCURRENT_REPLAYS = concurrency
                workdir = out / f"run-{round_}-{concurrency}"
                timings[concurrency].append(
                    replay_seconds(BenchReplaysEnv, SAMPLES, tokenizer, workdir)
                )
    together, alone = (statistics.median(timings[c]) for c in (shipped, 1))
    rollouts = 5 * len(SAMPLES)
    print(f"{rollouts} replays of {len(SAMPLES)} tasks, median of {args.rounds} rounds:")
    print(f"  {shipped} at once (shipped): {together:6.2f} s")
    print(f"  one after another:   {alone:6.2f} s")
    print(f"  ratio: {alone / together:.2f}x  (load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
