"""``hermes-envgen rescore RUN.jsonl``: a run's rollouts scored again by the env as it is now.

No model is asked. Each rollout's sandbox is rebuilt: a fresh sandbox of the env's backend,
``prepare_sandbox`` for its task, then its recorded tool calls replayed in order through the
env's own agent loop (the same checks, errors and output cap as the run). Each replayed tool
result is compared with the recorded one: one that differs is reported and the rollout marked
unreliable (its new reward scores another sandbox than the run's). Then the current
``compute_reward`` scores the recorded conversation twice, on that sandbox; two rewards that
differ say the reward is not deterministic. The judge pattern asks the env's configured judge;
with ``no_judge`` an env whose reward needs a judge is not scored.

The env is imported in a process of its own (``python -m hermes_envgen.devtools.rescore``),
as ``check`` does (:mod:`~hermes_envgen.devtools.env_process`). Each rescored rollout is a
line of the output, written as it finishes: an interrupted rescore continues with
``resume``, skipping what it wrote (its first line names the input it belongs to). Rollouts
of another env (a tool it does not have, a task it does not know) are refused with the
mismatch named.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes_envgen.errors import Interrupted, UsageError

# How much of a diverging tool result a report quotes.
QUOTE = 160
# The policy's URL the replay env is built with: never asked (no model in a rescore).
NO_MODEL_URL = "http://127.0.0.1:9/v1"
MAX_NOTES = 200  # lines of the summary's notes kept; the output has every rollout's
STOP_WAIT = 30.0  # seconds the env's process gets to clean its sandboxes up on Ctrl-C


class RescoreError(UsageError):
    """A rescore that cannot run: rollouts of another env, an output that would be lost."""


@dataclass
class Replay:
    """One rollout of the run to score again: where it is and what it did."""

    index: int  # its number in the run, from 0
    line: int
    item: Any
    prompt: str
    messages: list[dict[str, Any]]
    old_reward: float | None
    record: dict[str, Any]


# -- the CLI's side ------------------------------------------------------------------------


def rescore(
    target: str,
    run: Path,
    output: Path | None = None,
    *,
    no_judge: bool = False,
    resume: bool = False,
    workers: int | None = None,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Rescore ``run`` with the env ``target`` in a process of its own; the summary.

    ``output`` (default ``RUN.rescored.jsonl``) gets a line per rollout; an existing one is
    continued with ``resume`` and refused without it (nothing is overwritten).
    """
    run = Path(run)
    if not run.is_file():
        raise RescoreError(f"{run}: no such file (give the run's samples.jsonl or groups JSONL)")
    read_replays(run)  # a file of no rollouts is refused before the env is imported
    output = Path(output) if output is not None else run.with_name(f"{run.name}.rescored.jsonl")
    if output.exists() and not resume:
        raise RescoreError(
            f"{output} exists: --resume continues that rescore, or remove it for a new one"
        )
    command = [
        sys.executable,
        "-m",
        "hermes_envgen.devtools.rescore",
        str(target),
        str(run.resolve()),
        str(output.resolve()),
        json.dumps({"no_judge": no_judge, "workers": workers}),
    ]
    from hermes_envgen.testing.runner import offline_environment

    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=offline_environment(None),  # offline: no hub, no telemetry
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except (KeyboardInterrupt, subprocess.TimeoutExpired) as exc:
        # The env's process cleans its sandboxes up on SIGINT; what it wrote stays.
        process.send_signal(signal.SIGINT)
        try:
            process.communicate(timeout=STOP_WAIT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
        what = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"past {timeout:g} s"
        raise Interrupted(
            f"rescore {what}: the rollouts done are in {output}; --resume continues it"
        ) from None
    lines = stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, ValueError):
        tail = (stderr.strip().splitlines() or ["no output"])[-1]
        raise RescoreError(f"the env's process failed: {tail}") from None
    if "error" in result:
        raise RescoreError(result["error"])
    return result


def format_summary(result: dict[str, Any]) -> str:
    """The rescore in a few lines: what changed, what diverged, what is not deterministic."""
    lines = [
        f"rescored {result['rescored']} of {result['rollouts']} rollouts "
        f"({result['resumed']} from an earlier rescore): {result['changed']} changed, "
        f"{result['unreliable']} unreliable (replay diverged), "
        f"{result['nondeterministic']} not deterministic, {result['skipped']} not scored",
        f"written to {result['output']}",
    ]
    for line in result.get("notes", [])[:20]:
        lines.append(f"  {line}")
    return "\n".join(lines)


# -- the env's side ------------------------------------------------------------------------


def _flat(text: str) -> str:
    return " ".join(text.split())


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def read_replays(run: Path) -> list[Replay]:
    """Every rollout of the run with its conversation (evaluation records or process groups)."""
    replays: list[Replay] = []
    for number, line in enumerate(run.read_text(encoding="utf-8").split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            raise RescoreError(f"{run}, line {number}: not JSON (cut short?)") from None
        messages = record.get("messages") if isinstance(record, dict) else None
        if not isinstance(messages, list):
            raise RescoreError(
                f"{run}, line {number}: neither a rollout nor a group (no 'messages' list)"
            )
        if messages and isinstance(messages[0], list):  # a process group
            scores = record.get("scores") or []
            for index, conversation in enumerate(messages):
                score = scores[index] if index < len(scores) else None
                replays.append(_replay(len(replays), number, None, conversation, score, {}))
        else:
            replays.append(
                _replay(len(replays), number, record.get("item"), messages, None, record)
            )
    if not replays:
        raise RescoreError(f"{run}: no rollouts in it")
    return replays


def _replay(index: int, line: int, item: Any, messages: list, score: Any, record: dict) -> Replay:
    messages = [m for m in messages if isinstance(m, dict)]
    prompt = next((_text(m.get("content")) for m in messages if m.get("role") == "user"), "")
    reward = record.get("reward") if record else score
    old = float(reward) if isinstance(reward, (int, float)) and not record.get("failure") else None
    return Replay(index, line, item, _flat(prompt), messages, old, record)


def recorded_calls(messages: list[dict]) -> list[tuple[int, dict, str | None]]:
    """Each tool call in order: its turn, the call, and the result recorded for it."""
    results = {
        m.get("tool_call_id"): _text(m.get("content")) for m in messages if m.get("role") == "tool"
    }
    calls = []
    turn = 0
    for message in messages:
        if message.get("role") != "assistant":
            continue
        turn += 1
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict) and isinstance(call.get("function"), dict):
                calls.append((turn, call, results.get(call.get("id"))))
    return calls


def match_env(env: Any, replays: list[Replay]) -> None:
    """Refuse rollouts of another env: a tool it does not have, a task it does not know."""
    _, names = env._resolve_tools()
    unknown_tools = sorted(
        {
            call["function"].get("name", "?")
            for replay in replays
            for _, call, _ in recorded_calls(replay.messages)
        }
        - set(names)
        - {"?"}
    )
    tasks = [*env.train_items, *env.eval_items]
    by_prompt: dict[str, Any] = {}
    for task in tasks:
        opening = env.build_messages(task)
        prompt = next((_text(m.get("content")) for m in opening if m.get("role") == "user"), "")
        by_prompt.setdefault(_flat(prompt), task)
    unknown_tasks = []
    for replay in replays:
        if replay.item is not None:
            opening = env.build_messages(replay.item)
            prompt = next((_text(m.get("content")) for m in opening if m.get("role") == "user"), "")
            if _flat(prompt) != replay.prompt or _flat(prompt) not in by_prompt:
                unknown_tasks.append(replay)
        elif replay.prompt in by_prompt:
            replay.item = by_prompt[replay.prompt]
        else:
            unknown_tasks.append(replay)
    problems = []
    if unknown_tools:
        _, offered = env._resolve_tools()
        problems.append(
            f"the run calls tools this env does not have: {', '.join(unknown_tools)} "
            f"(it has {', '.join(sorted(offered)) or 'none'})"
        )
    if unknown_tasks:
        first = unknown_tasks[0]
        problems.append(
            f"{len(unknown_tasks)} rollouts are of tasks this env does not have (the first, "
            f"line {first.line}: “{first.prompt[:80]}”)"
        )
    if problems:
        raise RescoreError(f"these rollouts are not of {type(env).__name__}: {'; '.join(problems)}")


async def replay_one(env: Any, replay: Replay) -> dict[str, Any]:
    """Rebuild the rollout's sandbox from its tool calls, score it twice; the output line."""
    from hermes_envgen.runtime.loop.tool_context import ToolContext
    from hermes_envgen.runtime.rollout import AgentResult, ToolErrorRecord

    tools = env._resolve_tools()
    task_id = f"rescore-{replay.index}-{os.urandom(4).hex()}"
    ctx = ToolContext(task_id, env.sandboxes, env.tool_registry, env.tool_services)
    loop = env.make_loop(replay.item, ctx, split="eval", temperature=0.0, tools=tools)
    diverged: list[str] = []
    try:
        try:
            if any("sandbox" in env.tool_registry.get(name).injected for name in tools[1]):
                await ctx.sandbox.start()
            await env.prepare_sandbox(replay.item, ctx)
        except Exception as exc:  # the sandbox could not start, or prepare_sandbox failed
            return _unscored(replay, f"the sandbox could not be rebuilt: {exc}")
        scratch = AgentResult(messages=[])
        for turn, call, recorded in recorded_calls(replay.messages):
            output = await loop._execute(call, turn, scratch)  # as the run's loop ran it
            if recorded is not None and output != recorded:
                name = call["function"].get("name", "?")
                diverged.append(
                    f"turn {turn}, {name}: recorded {recorded[:QUOTE]!r}, "
                    f"replayed {output[:QUOTE]!r}"
                )
        await env.sandboxes.stop_agent_processes(task_id)
        record = replay.record
        errors = [
            ToolErrorRecord(**e)
            for e in record.get("tool_errors") or []
            if isinstance(e, dict)
            and set(e) == {"turn", "tool_name", "arguments", "error", "tool_result"}
        ]
        result = AgentResult(
            messages=replay.messages,
            turns_used=int(
                record.get("turns_used")
                or sum(1 for m in replay.messages if m.get("role") == "assistant")
            ),
            finished_naturally=bool(record.get("finished_naturally", True)),
            # process groups keep no tool errors: the replay's own, made as the run's were
            tool_errors=errors if "tool_errors" in record else scratch.tool_errors,
        )
        first, first_error = await env._score(replay.item, result, ctx)
        second, second_error = await env._score(replay.item, result, ctx)
    finally:
        await ctx.cleanup()
    new = None if first.failure else first.score
    old = replay.old_reward
    changed = (new is None) != (old is None) or (
        new is not None and old is not None and abs(new - old) > 1e-9
    )
    deterministic = first.score == second.score and first.failure == second.failure
    return {
        "index": replay.index,
        "line": replay.line,
        "task": replay.prompt[:200],
        "old_reward": old,
        "new_reward": new,
        "changed": changed,
        "reliable": not diverged,
        "diverged": diverged,
        "deterministic": deterministic,
        "second_reward": None if second.failure else second.score,
        "reward_error": first_error or first.failure or second_error,
        "signals": first.signals,
    }


def _unscored(replay: Replay, why: str) -> dict[str, Any]:
    return {
        "index": replay.index,
        "line": replay.line,
        "task": replay.prompt[:200],
        "old_reward": replay.old_reward,
        "skipped": why,
    }


def _journal(output: Path, fingerprint: dict[str, Any]) -> set[int]:
    """The rollouts an earlier rescore of the same run wrote; refuses another run's output."""
    if not output.exists():
        output.write_text(json.dumps({"rescore_of": fingerprint}) + "\n")
        return set()
    lines = output.read_text(encoding="utf-8").split("\n")
    try:
        header = json.loads(lines[0])["rescore_of"]
    except (ValueError, KeyError, TypeError, IndexError):
        raise RescoreError(f"{output} is not a rescore's output; give another --output") from None
    if header != fingerprint:
        raise RescoreError(
            f"{output} is the rescore of another run or env ({header.get('run')}, "
            f"{header.get('env')}); give another --output"
        )
    done = set()
    kept = [lines[0]]
    for line in lines[1:]:
        try:
            done.add(int(json.loads(line)["index"]))
            kept.append(line)
        except (ValueError, KeyError, TypeError):
            continue  # the line an interruption cut short: that rollout is scored again
    output.write_text("\n".join(kept) + "\n")
    return done


async def rescore_all(
    env: Any, replays: list[Replay], output: Path, fingerprint: dict, workers: int, no_judge: bool
) -> dict[str, Any]:
    done = _journal(output, fingerprint)
    pending = iter([r for r in replays if r.index not in done])
    counts = {"rescored": 0, "changed": 0, "unreliable": 0, "nondeterministic": 0, "skipped": 0}
    notes: list[str] = []
    judged = env.judge is not None

    def note(text: str) -> None:
        if len(notes) < MAX_NOTES:
            notes.append(text)

    with output.open("a", encoding="utf-8") as journal:

        async def worker() -> None:
            for replay in pending:
                line: dict[str, Any]
                if judged and no_judge:
                    line = _unscored(replay, "the reward asks an LLM judge (--no-judge)")
                else:
                    line = await replay_one(env, replay)
                if "skipped" in line:
                    counts["skipped"] += 1
                    note(f"rollout {replay.index} not scored: {line['skipped']}")
                else:
                    counts["rescored"] += 1
                    counts["changed"] += line["changed"]
                    counts["unreliable"] += not line["reliable"]
                    counts["nondeterministic"] += not line["deterministic"]
                    if line["changed"]:
                        note(
                            f"rollout {replay.index} (line {replay.line}): reward "
                            f"{line['old_reward']} -> {line['new_reward']}"
                        )
                    for diverged in line["diverged"][:1]:
                        note(f"rollout {replay.index} replay diverged: {diverged}")
                    if not line["deterministic"]:
                        note(
                            f"rollout {replay.index}: scored twice, {line['new_reward']} and "
                            f"{line['second_reward']}: the reward is not deterministic"
                        )
                journal.write(json.dumps(line, default=repr) + "\n")
                journal.flush()

        await asyncio.gather(*(worker() for _ in range(max(1, workers))))
    return counts | {
        "rollouts": len(replays),
        "resumed": len(done),
        "output": str(output),
        "notes": notes,
    }


def worker_main(target: str, run: str, output: str, options: dict[str, Any]) -> dict[str, Any]:
    """In the env's process: build the env offline, match, replay, score."""
    from hermes_envgen.devtools.env_process import find_class
    from hermes_envgen.testing.envs import build_env
    from hermes_envgen.testing.tokenizer import build_offline_tokenizer

    env_cls = find_class(target)
    if isinstance(env_cls, str):
        return {"error": env_cls}
    run_path, output_path = Path(run), Path(output)
    replays = read_replays(run_path)
    with tempfile.TemporaryDirectory(prefix="rescore-") as scratch:
        workdir = Path(scratch)  # the sandboxes' root: removed however the rescore ends
        tokenizer = build_offline_tokenizer(workdir / "tokenizer")  # no model: nothing encoded
        said = io.StringIO()
        with contextlib.redirect_stdout(said):
            env = build_env(env_cls, NO_MODEL_URL, tokenizer, workdir, stub_judge=False)
            asyncio.run(env.setup())
        match_env(env, replays)
        fingerprint = {
            "run": str(run_path),
            "sha256": hashlib.sha256(run_path.read_bytes()).hexdigest(),
            "env": env_cls.__name__,
        }
        workers = options.get("workers") or env.config.max_eval_workers
        with contextlib.redirect_stdout(said):
            return asyncio.run(
                rescore_all(env, replays, output_path, fingerprint, workers, options["no_judge"])
            )


def main() -> None:
    target, run, output, options = sys.argv[1:5]
    try:
        result = worker_main(target, run, output, json.loads(options))
    except RescoreError as exc:
        result = {"error": str(exc)}
    except BaseException as exc:  # report every failure as data, as env_process does
        from hermes_envgen.devtools.env_process import failure

        result = {"error": failure(exc)}
    print("\n" + json.dumps(result, default=str))


if __name__ == "__main__":
    main()
