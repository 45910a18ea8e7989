"""What a bwrap sandbox costs to start, against bwrap's own floor, old code beside new.

Each variant runs in a child process of its own, in a fresh cpuacct cgroup, so that the CPU
counted is that of the child and everything it starts (bwrap, the sandbox's processes); the
rounds alternate the variants, and each round yields new / old (and variant / floor):

- ``floor``: ``bwrap --unshare-all`` (``/usr`` bound) running ``true``: the kernel's namespace
  set-up and bwrap itself, the least a sandbox start can cost;
- ``floor+mounts``: bwrap with the project's namespaces and mounts (as a sandbox's argv has
  them) running ``true``;
- ``start``: a sandbox of the backend opened, ``true`` run in it, closed (the code of this
  checkout, and of ``--baseline``, loaded from a ``git archive`` of that revision);
- ``rollout``: the sandbox work of a rollout that is verified: open, ``true`` as the agent,
  ``stop_agent_processes``, ``install_checks`` and the check, close;
- ``pooled start`` / ``pooled rollout``: the same with the sandbox taken from a pool
  (``sandbox_pool``) filled before the count starts and not refilled during it: a pool made
  ahead of demand is not counted (its starts cost what ``new start`` measures, but off the
  rollouts' path).

    .venv/bin/python benchmarks/bench_sandbox_start.py [--rounds 5] [--starts 20] [--baseline REV]

Run as root for the CPU figures (cgroups); elsewhere only wall times are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import baseline_checkout, cpu_usage_seconds, cpuacct_cgroup, join_cgroup

HERE = Path(__file__).resolve().parent
DEFAULT_BASELINE = "86706d4"  # the code before the anchor's reuse for verification


def floor_argv() -> list[str]:
    return ["bwrap", "--unshare-all", "--ro-bind", "/usr", "/usr",
            "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
            "--symlink", "usr/bin", "/bin", "--", "/usr/bin/true"]  # fmt: skip


def mounts_argv(root: str) -> list[str]:
    """A sandbox's own bwrap argv (namespaces, mounts), running ``true`` instead of its chain."""
    from hermes_envgen.runtime.sandbox import SandboxManager, SandboxSettings

    sandbox = SandboxManager(SandboxSettings(backend="bwrap", root=root)).get("argv")
    argv = sandbox.bwrap_argv()
    start = next(n for n, arg in enumerate(argv) if arg.endswith("/bwrap"))
    end = argv.index("--", start)
    return [*argv[start:end], "--", "/usr/bin/true"]


async def child(variant: str, starts: int, root: str, cgroup: str | None) -> dict:
    if cgroup:
        join_cgroup(cgroup)
    from hermes_envgen.runtime.sandbox import SandboxManager, SandboxSettings

    pool = {"pool": starts + 1} if variant.startswith("pooled") else {}  # old code has none
    manager = SandboxManager(SandboxSettings(backend="bwrap", root=root, **pool))
    if pool:
        await manager.pool.fill()  # ahead of demand: before the count starts
        manager.pool.size = 0  # and not refilled during it

    async def start_once(n: int) -> None:
        sandbox = manager.get(f"s{n}")
        assert (await sandbox.run("true")).exit_code == 0
        await manager.release(f"s{n}")

    async def rollout_once(n: int) -> None:
        sandbox = manager.get(f"r{n}")
        assert (await sandbox.run("true")).exit_code == 0
        await sandbox.stop_agent_processes()
        checks = await sandbox.install_checks({"check.sh": b"exit 0\n"})
        assert (await sandbox.run(f"/bin/bash {checks}/check.sh")).exit_code == 0
        await manager.release(f"r{n}")

    if variant in ("floor", "floor+mounts"):
        argv = floor_argv() if variant == "floor" else mounts_argv(root)

        async def once(n: int) -> None:
            subprocess.run(argv, check=True)
    else:
        once = start_once if variant.endswith("start") else rollout_once
    await once(-1)  # warm: the page cache, the anchor's bytecode, /etc's copy
    cpu_before, wall_before = cpu_usage_seconds(cgroup), time.perf_counter()
    for n in range(starts):
        await once(n)
    wall = (time.perf_counter() - wall_before) / starts
    cpu = (cpu_usage_seconds(cgroup) - cpu_before) / starts
    await manager.close_all()
    return {"wall_ms": wall * 1000, "cpu_ms": cpu * 1000}


def run_child(variant: str, starts: int, pythonpath: str | None, cgroups: int) -> dict:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    with (
        tempfile.TemporaryDirectory(prefix="bench-start.") as root,
        cpuacct_cgroup(f"hermes-bench-start-{os.getpid()}-{cgroups}") as cgroup,
    ):
        argv = [sys.executable, __file__, "--child", variant, str(starts), root, str(cgroup or "")]
        completed = subprocess.run(
            argv, capture_output=True, text=True, env=env, timeout=1800, check=False
        )
    if completed.returncode != 0:
        raise SystemExit(f"{variant}: {completed.stderr.strip()[-2000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--starts", type=int, default=20)
    parser.add_argument("--baseline", default=DEFAULT_BASELINE, help="the old code's revision")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        variant, starts, root, cgroup = args.child
        print(json.dumps(asyncio.run(child(variant, int(starts), root, cgroup or None))))
        return

    load = Path("/proc/loadavg").read_text().split()[0]
    print(f"bwrap sandbox starts, {args.rounds} rounds x {args.starts}, old = {args.baseline}"
          f" (load average {load})")  # fmt: skip
    variants = ["floor", "floor+mounts", "old start", "new start", "pooled start",
                "old rollout", "new rollout", "pooled rollout"]  # fmt: skip
    rows: dict[str, list[dict]] = {v: [] for v in variants}
    with baseline_checkout(args.baseline) as old_src:
        count = 0
        for _ in range(args.rounds):
            for variant in variants:
                count += 1
                path = str(old_src) if variant.startswith("old") else None
                rows[variant].append(run_child(variant, args.starts, path, count))

    def median(variant: str, key: str) -> float:
        return statistics.median(row[key] for row in rows[variant])

    def ratio(a: str, b: str, key: str) -> float:
        return statistics.median(x[key] / y[key] for x, y in zip(rows[a], rows[b]) if y[key])

    has_cpu = median("floor", "cpu_ms") > 0
    print(f"{'':14} {'wall ms':>8} {'CPU ms':>8} {'wall/floor':>11} {'CPU/floor':>10}")
    for variant in variants:
        cpu = f"{median(variant, 'cpu_ms'):8.1f}" if has_cpu else f"{'-':>8}"
        cpu_ratio = f"{ratio(variant, 'floor', 'cpu_ms'):10.1f}" if has_cpu else f"{'-':>10}"
        print(f"{variant:14} {median(variant, 'wall_ms'):8.1f} {cpu} "
              f"{ratio(variant, 'floor', 'wall_ms'):11.1f} {cpu_ratio}")  # fmt: skip
    for side, what in [(s, w) for s in ("new", "pooled") for w in ("start", "rollout")]:
        line = f"{side}/old {what}: wall {ratio(f'{side} {what}', f'old {what}', 'wall_ms'):.2f}"
        if has_cpu:
            line += f", CPU {ratio(f'{side} {what}', f'old {what}', 'cpu_ms'):.2f}"
        print(line)


if __name__ == "__main__":
    main()
