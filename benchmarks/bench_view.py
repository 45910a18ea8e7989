"""How long the rollout page takes to build and to open at 10,000 rollouts: today's page (a run
at a glance, token views) against the page before them (the baseline, its renderer taken from
git), side by side in one run.

Two runs of 10,000 rollouts each are written: ``process`` groups of 8 (tokens, masks, token
mode's logprobs; a quarter of the groups with zero variance) and an evaluation's samples
(k = 4, named signals). Build = reading the JSONL, rendering and writing the page (in this
process; the new page with the offline tokenizer's text in its token views). Open = headless
Chromium's load time of the page (navigation to load event, one browser for all, over the
DevTools pipe: tests/helpers/browser.py). Rounds alternate; medians and ratios are printed.

    .venv/bin/python benchmarks/bench_view.py [--rollouts 10000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # helpers/browser.py

from helpers.browser import Browser  # noqa: E402

from hermes_envgen.runtime.chat.trajectory import tokenize_conversation  # noqa: E402
from hermes_envgen.runtime.rollouts import rollout_view  # noqa: E402
from hermes_envgen.testing.tokenizer import build_offline_tokenizer  # noqa: E402

# The last commit before the glance and token views: its renderer is the baseline.
BASELINE_COMMIT = "86706d4474c5326500a73da99dcc861a3ceeebaa"
BASELINE_PATH = "src/hermes_envgen/runtime/rollouts/rollout_view.py"
GROUP_SIZE = 8
SAMPLES_PER_ITEM = 4


def baseline_renderer(workdir: Path) -> ModuleType:
    """The page's renderer as it was at BASELINE_COMMIT, imported under a name of its own."""
    commit = subprocess.run(
        ["git", "rev-parse", BASELINE_COMMIT],
        cwd=HERE,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    source = subprocess.run(
        ["git", "show", f"{commit}:{BASELINE_PATH}"],
        cwd=HERE,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = workdir / "baseline_rollout_view.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("baseline_rollout_view", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def conversation(number: int) -> list[dict]:
    """A rollout of three turns: a terminal call, a write, an answer."""
    call = {
        "id": f"c{number}",
        "type": "function",
        "function": {"name": "terminal", "arguments": json.dumps({"command": f"wc -l f{number}"})},
    }
    write = {
        "id": f"w{number}",
        "type": "function",
        "function": {
            "name": "write_file",
            "arguments": json.dumps({"path": "count.txt", "content": f"{number}\n"}),
        },
    }
    return [
        {"role": "system", "content": "You are a careful agent working in a sandbox."},
        {"role": "user", "content": f"Count the lines of f{number} and write it to count.txt."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{number}", "content": f'{{"output": "{number}\\n"}}'},
        {"role": "assistant", "content": None, "tool_calls": [write]},
        {"role": "tool", "tool_call_id": f"w{number}", "content": "Wrote 3 bytes to count.txt"},
        {"role": "assistant", "content": f"f{number} has {number} lines; written to count.txt."},
    ]


def write_runs(workdir: Path, rollouts: int, tokenizer: object) -> tuple[Path, Path]:
    rng = random.Random(7)
    shapes = [conversation(n) for n in range(16)]
    sequences = [tokenize_conversation(tokenizer, c) for c in shapes]
    groups = workdir / "groups.jsonl"
    with groups.open("w") as out:
        for number in range(rollouts // GROUP_SIZE):
            picks = [rng.randrange(len(shapes)) for _ in range(GROUP_SIZE)]
            flat = number % 4 == 0
            scores = [1.0] * GROUP_SIZE if flat else [rng.choice((0.0, 0.5, 1.0)) for _ in picks]
            tokens = [sequences[p].tokens for p in picks]
            masks = [sequences[p].masks for p in picks]
            logprobs = [[1.0 if m == -100 else -rng.random() for m in mask] for mask in masks]
            record = {
                "tokens": tokens,
                "masks": masks,
                "scores": scores,
                "messages": [shapes[p] for p in picks],
                "inference_logprobs": logprobs,
            }
            out.write(json.dumps(record) + "\n")
    samples = workdir / "samples.jsonl"
    with samples.open("w") as out:
        for number in range(rollouts):
            item, index = divmod(number, SAMPLES_PER_ITEM)
            reward = rng.choice((0.0, 0.5, 1.0))
            record = {
                "key": f"{item:016x}#{index}",
                "item_key": f"{item:016x}",
                "sample_index": index,
                "task_id": f"eval-{item}",
                "reward": reward,
                "failure": None,
                "turns_used": 3,
                "finished_naturally": True,
                "tool_calls": 2,
                "tool_errors": [],
                "reward_signals": {"file_ok": reward, "format": 1.0},
                "messages": shapes[item % len(shapes)],
            }
            out.write(json.dumps(record) + "\n")
    return groups, samples


def build(
    renderer: ModuleType, source: Path, target: Path, tokenizer: object | None
) -> tuple[float, float]:
    """Wall and CPU seconds of one page's build (CPU: what a loaded machine does not blur)."""
    start, cpu = time.perf_counter(), time.process_time()
    if tokenizer is None:
        renderer.write_view(source, target)
    else:
        renderer.write_view(source, target, tokenizer=tokenizer)
    return time.perf_counter() - start, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory(prefix="bench-view-") as tmp:
        workdir = Path(tmp)
        tokenizer = AutoTokenizer.from_pretrained(str(build_offline_tokenizer(workdir / "tok")))
        baseline = baseline_renderer(workdir)
        runs = write_runs(workdir, args.rollouts, tokenizer)
        times: dict[tuple[str, str, str], list[float]] = {}
        sizes: dict[tuple[str, str], int] = {}
        with Browser(timeout=600) as browser:
            for _ in range(args.rounds):
                for source in runs:
                    for name, renderer, tok in (
                        ("baseline", baseline, None),
                        ("today", rollout_view, tokenizer),
                    ):
                        page = workdir / f"{source.stem}-{name}.html"
                        built, cpu = build(renderer, source, page, tok)
                        opened = browser.open(page.as_uri())
                        times.setdefault((source.name, name, "build"), []).append(built)
                        times.setdefault((source.name, name, "cpu"), []).append(cpu)
                        times.setdefault((source.name, name, "open"), []).append(opened)
                        sizes[(source.name, name)] = page.stat().st_size
        print(f"{args.rollouts} rollouts, medians of {args.rounds} rounds")
        print(f"{'run':<14}{'page':<10}{'MB':>7}{'build s':>10}{'build CPU s':>13}{'open s':>10}")

        def median(source: Path, name: str, what: str) -> float:
            return statistics.median(times[(source.name, name, what)])

        for source in runs:
            for name in ("baseline", "today"):
                size = sizes[(source.name, name)] / 1e6
                print(
                    f"{source.name:<14}{name:<10}{size:>7.1f}"
                    f"{median(source, name, 'build'):>10.2f}{median(source, name, 'cpu'):>13.2f}"
                    f"{median(source, name, 'open'):>10.2f}"
                )
            ratios = {
                what: median(source, "today", what) / median(source, "baseline", what)
                for what in ("build", "cpu", "open")
            }
            print(
                f"{source.name:<14}today/baseline: build {ratios['build']:.2f}x "
                f"(CPU {ratios['cpu']:.2f}x), open {ratios['open']:.2f}x"
            )


if __name__ == "__main__":
    main()
