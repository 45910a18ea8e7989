"""What a user sees at 10x and 100x the work: throughput, memory and per-turn cost at scale.

Three parts, each against the stub server in its own process:

1. ``process``: rollouts/s and peak RSS of process mode's group loop (collect a group of 3-turn
   terminal tasks on bwrap, tokenize it, serialise it as process writes it) at concurrency 1,
   8, 64 and 256 (the group size: a group's rollouts run at once; ``--levels`` for others, up
   to 1024). Each level runs in a fresh process, so its peak RSS is its own; beside it, the
   peak memory (PSS) of all its sandboxes' processes together, sampled twice a second, and how
   busy the machine's CPUs were (/proc/stat). As root, each level's process runs in a cpuacct
   cgroup of its own, which gives the CPU seconds per rollout: the env process's own (the
   worker: the loop, tokenizing, starting sandboxes) and the rest (the sandboxes' processes,
   bwrap's). With ``--baseline REV`` each level runs that revision's code too (a ``git
   archive`` of its ``src`` first on PYTHONPATH; ``--new REV`` likewise for the new side,
   else this checkout), old and new alternating (``--repeat`` times), and prints new / old.
   ``--pool N`` adds a third side, ``pooled``: the new code with ``sandbox_pool`` set to N (at
   most the level), not filled before the count starts: the run's first rollouts start their
   own sandboxes while the pool fills, and its refills are counted like every other start.
   Per level, the CPU a rollout costs in all (worker and sandboxes) and what it means for
   sizing: rollouts/s per fully used core. At 1024 a level needs some 8 descriptors per
   rollout in flight: the soft RLIMIT_NOFILE is raised to the hard one, and a level the hard
   limit cannot hold is reported as skipped, not run; ``--level-timeout`` bounds each level.
   Target: throughput grows until the CPUs are full, RSS under 1 GB at 256, no error.
2. ``evaluate``: 2,000 items x 4 samples through ``run_eval``; RSS is sampled as the run goes.
   Target: flat (no growth with the rollouts done).
3. long rollouts: 50 turns with 20 KB tool outputs. Per turn: the loop's time outside the HTTP
   request (which grows with the conversation, as it must: the whole conversation is sent).
   Then tokenizing the finished conversation for training, against encoding its rendered text
   once (the tokenizer's own cost). Target: the loop's own time per turn does not grow.

The same tasks on two workers with a Docker engine each, across hosts of the network-namespace
rig, against one worker and one engine: bench_multihost.py (it needs root and starts engines).

    .venv/bin/python benchmarks/bench_scale.py [--parts process,evaluate,long] [--items 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import (
    baseline_checkout,
    cpu_usage_seconds,
    cpuacct_cgroup,
    join_cgroup,
    stub_server_process,
)

HERE = Path(__file__).resolve().parent
LEVELS = (1, 8, 64, 256)
ROLLOUTS_PER_LEVEL = 512  # at least two groups per level (--rollouts)
FDS_PER_ROLLOUT = 8  # the env's descriptors per rollout in flight: its sandbox's (control
# socket, pidfd, workspace), a command's pipe and reply socket, the model request's socket
LEVEL_TIMEOUT = 1800.0  # seconds a level's process may take (--level-timeout)
PROGRESS = "groups done:"  # a level's line on stderr after each group


def terminal_turn(command: str) -> dict:
    return {"tool_calls": [{"name": "terminal", "arguments": {"command": command}}]}


# 3 turns: two terminal calls, then the answer; every prompt gets it.
PROCESS_SCRIPT = {
    "conversations": [],
    "default": {
        "turns": [
            terminal_turn("echo hello > greeting.txt"),
            terminal_turn("cat greeting.txt"),
            {"content": "done"},
        ]
    },
}


def rss_mb() -> float:
    """This process's resident memory now, in MB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_ticks() -> tuple[int, int]:
    """The machine's busy and total CPU time so far, in clock ticks (/proc/stat).

    The whole machine's, not this process tree's: a sandbox's processes are reaped by its
    own init, and the kernel's work for namespaces and mounts is nobody's. On a shared
    machine other jobs count too: compare with the load average printed beside it.
    """
    with open("/proc/stat") as stat:
        user, nice, system, idle, iowait, *rest = map(int, stat.readline().split()[1:9])
    busy = user + nice + system + sum(rest)
    return busy, busy + idle + iowait


def descendants_pss_mb() -> float:
    """The proportional memory (PSS) of every process below this one, in MB: the sandboxes.

    PSS, not RSS: each bwrap sandbox's anchor is a Python interpreter whose code pages all of
    them share, and RSS would count those once per sandbox.
    """
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as file:
                parent = int(file.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(name))
    total_kb, pending = 0, list(children.get(os.getpid(), []))
    while pending:
        pid = pending.pop()
        pending.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/smaps_rollup") as file:
                total_kb += sum(int(line.split()[1]) for line in file if line.startswith("Pss:"))
        except (OSError, ValueError):
            continue
    return total_kb / 1024


# -- 1. process -------------------------------------------------------------------------------


async def process_level(
    base_url: str, tokenizer: str, workdir: str, concurrency: int, cgroup: str | None = None
) -> dict:
    """Run process mode's loop (collect, tokenize, serialise) for one concurrency level."""
    if cgroup:
        join_cgroup(cgroup)
    # the example of the side's own revision: it imports that revision's runtime
    side = os.environ.get("PYTHONPATH")
    examples = Path(side).parent / "examples" if side else HERE.parent / "examples"
    sys.path.insert(0, str(examples))
    from terminal_env import TerminalTaskEnv

    from hermes_envgen.testing.envs import build_env

    pool = min(int(os.environ.get("BENCH_SCALE_POOL", "0")), concurrency)
    env = build_env(
        TerminalTaskEnv,
        base_url,
        tokenizer,
        workdir,
        group_size=concurrency,
        sandbox_backend="bwrap",
        max_agent_turns=4,
        **({"sandbox_pool": pool} if pool else {}),  # the old code has no such setting
    )
    await env.setup()
    groups = max(1, int(os.environ.get("BENCH_SCALE_ROLLOUTS", ROLLOUTS_PER_LEVEL)) // concurrency)
    errors = 0
    sandbox_mb = 0.0

    async def sample_sandboxes() -> None:
        nonlocal sandbox_mb
        while True:
            sandbox_mb = max(sandbox_mb, await asyncio.to_thread(descendants_pss_mb))
            await asyncio.sleep(0.5)

    sampler = asyncio.create_task(sample_sandboxes())
    busy_before, total_before = cpu_ticks()
    cpu_before, own_before = cpu_usage_seconds(cgroup), own_cpu_seconds()
    with open(os.path.join(workdir, "groups.jsonl"), "w") as out:
        start = time.perf_counter()
        for number in range(groups):
            group, _ = await env.collect_trajectories(await env.get_next_item())
            if group is None:
                errors += 1
            else:
                out.write(json.dumps(group) + "\n")
            # read by run_level if the level runs out of time: the groups done by then
            elapsed = time.perf_counter() - start
            print(f"{PROGRESS} {number + 1} {groups} {elapsed:.1f}", file=sys.stderr, flush=True)
        seconds = time.perf_counter() - start
    busy_after, total_after = cpu_ticks()
    busy = (busy_after - busy_before) / max(1, total_after - total_before)
    rollouts = groups * concurrency
    worker = (own_cpu_seconds() - own_before) / rollouts
    total = (cpu_usage_seconds(cgroup) - cpu_before) / rollouts
    sampler.cancel()
    await env.sandboxes.close_all()
    return {
        "concurrency": concurrency,
        "rollouts_per_s": rollouts / seconds,
        "worker_cpu_ms": worker * 1000,
        "sandbox_cpu_ms": (total - worker) * 1000 if cgroup else None,
        "peak_rss_mb": peak_rss_mb(),
        "sandbox_mb": sandbox_mb,
        "cpu_busy": busy,
        "errors": errors,
    }


def own_cpu_seconds() -> float:
    """This process's CPU time so far (its threads included, not its children)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_level(
    level: int, base_url: str, tokenizer: str, pythonpath: str | None, pool: int, timeout: float
) -> dict | str:
    """One level in a fresh process (in a cpuacct cgroup of its own where one can be made);
    its row, or why it failed."""
    needed = level * FDS_PER_ROLLOUT + 256
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if limit != resource.RLIM_INFINITY and limit < needed:
        return f"skipped: {needed} descriptors needed, RLIMIT_NOFILE is {limit} (raise it)"
    env = dict(os.environ, BENCH_SCALE_POOL=str(pool))
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    with (
        tempfile.TemporaryDirectory(prefix="bench-scale.") as workdir,
        cpuacct_cgroup(f"hermes-bench-scale-{os.getpid()}-{time.monotonic_ns()}") as cgroup,
    ):
        argv = [sys.executable, __file__, "--one-level", str(level), base_url, tokenizer, workdir]
        try:
            completed = subprocess.run(
                [*argv, str(cgroup or "")],
                capture_output=True, text=True, timeout=timeout, check=False, env=env,
            )  # fmt: skip
        except subprocess.TimeoutExpired as exc:  # killed: its sandboxes die with it (bwrap's)
            return f"timed out after {timeout:g} s; " + progress(exc.stderr, level)
    if completed.returncode != 0:
        return str(completed.stderr.strip().splitlines()[-1:])
    return json.loads(completed.stdout.strip().splitlines()[-1])


def progress(stderr: bytes | str | None, level: int) -> str:
    """What a level that ran out of time had done: its groups, and their rate."""
    text = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr or ""
    lines = [line.split() for line in text.splitlines() if line.startswith(PROGRESS)]
    if not lines:
        return "no group done"
    done, groups, seconds = int(lines[-1][-3]), int(lines[-1][-2]), float(lines[-1][-1])
    return f"{done} of {groups} groups in {seconds:.0f} s: {done * level / seconds:.1f} rollouts/s"


def format_row(label: str, row: dict | str) -> str:
    if isinstance(row, str):
        return f"{label:>12}  failed: {row}"
    sandbox = row["sandbox_cpu_ms"]
    # sizing: a fully used core's rollouts/s, from the CPU a rollout costs in all
    per_core = "-" if sandbox is None else f"{1000 / (row['worker_cpu_ms'] + sandbox):.1f}"
    return (
        f"{label:>12} {row['rollouts_per_s']:>11.1f} {row['cpu_busy']:>10.0%} "
        f"{row['worker_cpu_ms']:>10.1f} {'-' if sandbox is None else f'{sandbox:.1f}':>11} "
        f"{per_core:>9} {row['peak_rss_mb']:>12.0f} {row['sandbox_mb']:>13.0f} "
        f"{row['errors']:>7}"
    )


def run_process_part(
    base_url: str,
    tokenizer: str,
    levels: list[int],
    sides: dict[str, tuple[str | None, int]],
    repeat: int,
    timeout: float,
) -> None:
    """Each level on each side (its PYTHONPATH, its pool size), alternating."""
    load = Path("/proc/loadavg").read_text().split()[0]
    print(f"process: 3-turn terminal tasks on bwrap against the stub (load average {load})")
    print(f"{'concurrency':>12} {'rollouts/s':>11} {'CPUs busy':>10} {'worker ms':>10} "
          f"{'sandbox ms':>11} {'per core':>9} {'peak RSS MB':>12} {'sandboxes MB':>13} "
          f"{'errors':>7}")  # fmt: skip
    for level in levels:
        rows: dict[str, list[dict | str]] = {side: [] for side in sides}
        for _ in range(repeat):
            for side, (pythonpath, pool) in sides.items():
                row = run_level(level, base_url, tokenizer, pythonpath, pool, timeout)
                rows[side].append(row)
                label = f"{level} {side}" if len(sides) > 1 else str(level)
                print(format_row(label, row), flush=True)
        if "old" not in sides:
            continue
        for side in (s for s in sides if s != "old"):
            pairs = [
                (new, old)
                for new, old in zip(rows[side], rows["old"])
                if isinstance(new, dict) and isinstance(old, dict)
            ]
            if pairs:
                speed = statistics.median(
                    n["rollouts_per_s"] / o["rollouts_per_s"] for n, o in pairs
                )
                worker = statistics.median(
                    n["worker_cpu_ms"] / o["worker_cpu_ms"] for n, o in pairs
                )
                line = f"{level:>12} {side}/old: rollouts/s {speed:.2f}, worker CPU {worker:.2f}"
                if all(n["sandbox_cpu_ms"] and o["sandbox_cpu_ms"] for n, o in pairs):
                    box = statistics.median(
                        n["sandbox_cpu_ms"] / o["sandbox_cpu_ms"] for n, o in pairs
                    )
                    line += f", sandbox CPU {box:.2f}"
                print(line, flush=True)


# -- 2. evaluate ------------------------------------------------------------------------------


async def run_evaluate_part(base_url: str, tokenizer: str, items: int, samples: int) -> None:
    from hermes_envgen.runtime import AgentResult, HermesAgentBaseEnv, Reward, ToolContext
    from hermes_envgen.testing.envs import build_env

    class AnswerEnv(HermesAgentBaseEnv):
        """One-turn answers with no tools: the run's bookkeeping is what is measured."""

        name = "bench_scale_eval"

        @classmethod
        def config_init(cls):
            from atroposlib.envs.server_handling.server_baseline import APIServerConfig

            from hermes_envgen.runtime import HermesAgentEnvConfig

            config = HermesAgentEnvConfig(enabled_toolsets=[], use_wandb=False)
            return config, [APIServerConfig(base_url="http://x/v1", model_name="stub-model")]

        async def setup(self) -> None: ...

        async def get_next_item(self):
            return {}

        def format_prompt(self, item) -> str:
            return item["prompt"]

        async def compute_reward(self, item, result: AgentResult, ctx: ToolContext) -> Reward:
            return Reward(float(item["n"] % 3 == 0))

        async def evaluate(self, *args, **kwargs) -> None: ...

    dataset = [{"prompt": f"Question {n}: " + "words " * 50, "n": n} for n in range(items)]
    with tempfile.TemporaryDirectory(prefix="bench-scale-eval.") as workdir:
        env = build_env(
            AnswerEnv,
            base_url,
            tokenizer,
            workdir,
            eval_samples_per_item=samples,
            max_eval_workers=64,
            max_agent_turns=1,
        )
        total = items * samples
        samples_path = Path(workdir) / "eval" / "samples.jsonl"
        readings: list[tuple[int, float]] = []

        async def sample_rss() -> None:
            while True:
                done = _count_lines(samples_path)
                readings.append((done, rss_mb()))
                await asyncio.sleep(1.0)

        sampler = asyncio.create_task(sample_rss())
        start = time.perf_counter()
        metrics = await env.run_eval(dataset)
        seconds = time.perf_counter() - start
        sampler.cancel()
    print(f"evaluate: {items} items x {samples} samples = {total} rollouts in {seconds:.0f} s")
    for fraction in (0.1, 0.25, 0.5, 0.75, 1.0):
        done, mb = min(readings, key=lambda r: abs(r[0] - fraction * total))
        print(f"  {done:>6} rollouts saved: RSS {mb:6.0f} MB")
    print(f"  peak RSS {peak_rss_mb():.0f} MB; eval/rollouts = {metrics['eval/rollouts']:.0f}")


def _count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as file:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: file.read(1 << 20), b""))
    except FileNotFoundError:
        return 0


# -- 3. long rollouts -------------------------------------------------------------------------

LONG_TURNS = 50
OUTPUT_CHARS = 20_000


async def run_long_part(base_url: str, tokenizer_dir: str) -> None:
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig
    from atroposlib.envs.server_handling.server_manager import ServerManager
    from transformers import AutoTokenizer

    from hermes_envgen.runtime.agent_loop import HermesAgentLoop
    from hermes_envgen.runtime.template_render import render, renders_raw_arguments, with_arguments
    from hermes_envgen.runtime.tool_context import ToolContext
    from hermes_envgen.runtime.tools import ToolRegistry, tool
    from hermes_envgen.runtime.trajectory import tokenize_conversation

    registry = ToolRegistry()

    @tool(registry=registry)
    async def dump(part: int) -> str:
        """Return 20 KB of text."""
        return (f"line {part} " + "x" * 70 + "\n") * (OUTPUT_CHARS // 80)

    server = ServerManager(
        [
            APIServerConfig(
                base_url=base_url, model_name="stub-model", api_key="EMPTY", health_check=False
            )
        ]
    )

    class TimedServer:
        """Passes requests on and keeps how long each took."""

        def __init__(self) -> None:
            self.seconds: list[float] = []

        async def chat_completion(self, **kwargs):
            start = time.perf_counter()
            try:
                return await server.chat_completion(**kwargs)
            finally:
                self.seconds.append(time.perf_counter() - start)

    timed = TimedServer()
    turn_ends: list[float] = []

    class TimedContext(ToolContext):
        async def call_tool(self, name, arguments=None):
            output = await super().call_tool(name, arguments)
            turn_ends.append(time.perf_counter())
            return output

    schemas = [t.schema for t in registry.resolve()]
    ctx = TimedContext("long", registry=registry)
    loop = HermesAgentLoop(
        timed, schemas, {"dump"}, max_turns=LONG_TURNS + 1, tool_context=ctx, request_retries=0
    )
    start = time.perf_counter()
    result = await loop.run([{"role": "user", "content": "long task"}])
    await ctx.cleanup()
    assert result.turns_used == LONG_TURNS + 1, result.error
    starts = [start, *turn_ends[:-1]]
    turn = [end - begin for begin, end in zip(starts, turn_ends)]
    own = [t - r for t, r in zip(turn, timed.seconds)]

    def window(values: list[float], first: int) -> float:
        return statistics.median(values[first - 1 : first + 4]) * 1000

    print(f"long rollout: {LONG_TURNS} turns, {OUTPUT_CHARS // 1000} KB tool output each")
    print(f"{'turns':>8} {'request ms':>11} {'loop own ms':>12}")
    for first in (1, 11, 21, 31, 46):
        request, loop_own = window(timed.seconds, first), window(own, first)
        print(f"{first:>3}-{first + 4:<4} {request:>11.1f} {loop_own:>12.2f}")

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    start = time.perf_counter()
    tokenize_conversation(tokenizer, result.messages, schemas)
    tokenize_seconds = time.perf_counter() - start
    shaped = with_arguments(result.messages, renders_raw_arguments(tokenizer))
    text = render(tokenizer, shaped, schemas, gen=False)
    start = time.perf_counter()
    tokenizer.encode(text, add_special_tokens=False)
    encode_seconds = time.perf_counter() - start
    print(
        f"tokenize_conversation {tokenize_seconds * 1000:.0f} ms; encoding the rendered "
        f"{len(text) / 1e6:.1f} MB once {encode_seconds * 1000:.0f} ms "
        f"(ratio {tokenize_seconds / encode_seconds:.1f})"
    )


def long_script() -> dict:
    turns = [
        {"tool_calls": [{"name": "dump", "arguments": {"part": n}}]} for n in range(LONG_TURNS)
    ]
    return {"conversations": [{"match": "long task", "turns": [*turns, {"content": "done"}]}]}


def raise_descriptor_limit() -> None:
    """The soft RLIMIT_NOFILE up to the hard one, for the levels' processes (inherited)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        print(f"RLIMIT_NOFILE raised from {soft} to {hard}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="process,evaluate,long")
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--levels", default=",".join(map(str, LEVELS)))
    parser.add_argument("--baseline", help="a revision whose code runs beside this one")
    parser.add_argument("--new", help="a revision for the new side (default: this checkout)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each level and side")
    parser.add_argument("--rollouts", type=int, default=ROLLOUTS_PER_LEVEL, help="per level")
    parser.add_argument("--pool", type=int, default=0, help="add a side with sandbox_pool N")
    parser.add_argument("--level-timeout", type=float, default=LEVEL_TIMEOUT)
    parser.add_argument("--one-level", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ["BENCH_SCALE_ROLLOUTS"] = str(args.rollouts)  # for the levels' processes
    if args.one_level:
        level, url, tokenizer, workdir, cgroup = args.one_level
        row = asyncio.run(process_level(url, tokenizer, workdir, int(level), cgroup or None))
        print(json.dumps(row))
        return

    from hermes_envgen.testing.tokenizer import build_offline_tokenizer

    parts = args.parts.split(",")
    with tempfile.TemporaryDirectory(prefix="bench-scale-tok.") as tok:
        tokenizer = str(build_offline_tokenizer(Path(tok)))
        if "process" in parts:
            levels = [int(level) for level in args.levels.split(",")]
            raise_descriptor_limit()
            with contextlib.ExitStack() as stack:
                new = str(stack.enter_context(baseline_checkout(args.new))) if args.new else None
                sides: dict[str, tuple[str | None, int]] = {}
                if args.baseline:
                    sides["old"] = (str(stack.enter_context(baseline_checkout(args.baseline))), 0)
                sides["new"] = (new, 0)
                if args.pool:
                    sides["pooled"] = (new, args.pool)
                url = stack.enter_context(stub_server_process(PROCESS_SCRIPT))
                run_process_part(url, tokenizer, levels, sides, args.repeat, args.level_timeout)
        if "evaluate" in parts:
            script = {"conversations": [], "default": {"turns": [{"content": "an answer"}]}}
            with stub_server_process(script) as url:
                asyncio.run(run_evaluate_part(url, tokenizer, args.items, args.samples))
        if "long" in parts:
            with stub_server_process(long_script()) as url:
                asyncio.run(run_long_part(url, tokenizer))


if __name__ == "__main__":
    main()
