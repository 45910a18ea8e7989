"""Run the example env end to end, offline: stub model, offline tokenizer, process + evaluate.

This is what ``bash scripts/demo.sh`` runs. Everything happens on this machine: a scripted
OpenAI-compatible server on 127.0.0.1 plays the model, the example env runs Atropos's
``process`` and ``evaluate`` modes against it, and the agent's commands run in real sandboxes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from hermes_envgen.testing.runner import EnvRunFailed, run_env_mode
from hermes_envgen.testing.stub_server import StubServer
from hermes_envgen.testing.tokenizer import build_offline_tokenizer

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "output", nargs="?", help="where to write the results (default: a temp dir)"
    )
    parser.add_argument("--groups", type=int, default=3, help="groups to roll out in process mode")
    args = parser.parse_args()
    out = Path(args.output or tempfile.mkdtemp(prefix="hermes-envgen-example-")).resolve()
    out.mkdir(parents=True, exist_ok=True)

    tokenizer = build_offline_tokenizer(out / "tokenizer")
    common = ["--env.tokenizer_name", str(tokenizer)]
    groups_file = out / "data" / "groups.jsonl"
    eval_dir = out / "eval"
    with StubServer(HERE / "stub_script.yaml") as stub:
        common += ["--openai.base_url", stub.base_url]
        try:
            print(f"process: {args.groups} groups against the stub model at {stub.base_url} ...")
            run_env_mode(
                HERE / "terminal_env.py",
                "process",
                *common,
                "--env.total_steps",
                str(args.groups),
                "--env.data_path_to_save_groups",
                str(groups_file),
                cwd=out,
                timeout=300,
            )
            print("evaluate: every task once, temperature 0 ...")
            run_env_mode(
                HERE / "terminal_env.py",
                "evaluate",
                *common,
                "--env.data_dir_to_save_evals",
                str(eval_dir),
                cwd=out,
                timeout=300,
            )
        except EnvRunFailed as exc:
            print(f"error: the example env failed:\n{exc}", file=sys.stderr)
            return 1

    groups = [json.loads(line) for line in groups_file.read_text().splitlines()]
    scores = [s for g in groups for s in g["scores"]]
    trained = [sum(m != -100 for m in masks) for g in groups for masks in g["masks"]]
    metrics = json.loads((eval_dir / "metrics.json").read_text())["results"]["all"]
    print()
    print(
        f"process:  {len(groups)} groups, {len(scores)} rollouts, "
        f"mean reward {statistics.mean(scores):.2f}, "
        f"trained tokens per rollout {statistics.mean(trained):.0f}"
    )
    print(
        f"evaluate: {metrics['eval/rollouts']:.0f} rollouts, "
        f"mean reward {metrics['eval/mean_reward']:.2f}, "
        f"mean turns {metrics['eval/mean_turns']:.1f}, "
        f"tool errors per rollout {metrics['eval/tool_errors_per_rollout']:.2f}"
    )
    print()
    print(f"rollouts (JSONL): {groups_file}")
    print(f"rollouts (HTML):  {groups_file.with_suffix('.html')}")
    print(f"eval metrics:     {eval_dir / 'metrics.json'}")
    print(f"eval samples:     {eval_dir / 'samples.jsonl'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
