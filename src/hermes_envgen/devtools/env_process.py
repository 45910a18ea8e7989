"""Import an env and describe it as JSON: run by ``hermes-envgen check`` in a subprocess.

Importing the env in its own process keeps a broken env (or one that exits) from taking the
CLI down with it, and keeps atroposlib out of the CLI's own process.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import io
import json
import os
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from hermes_envgen.testing.envs import builtin_samples


def load_module(target: str):
    """The env's module, from a ``.py`` path or a dotted module name."""
    if target.endswith(".py"):
        path = Path(target).resolve()
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None:  # not a file Python can load as a module
            raise ImportError(f"cannot load {path} as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
        return module
    return importlib.import_module(target)


def env_classes(module) -> list[type]:
    """The concrete env classes (BaseEnv subclasses) a module defines."""
    from atroposlib.envs.base import BaseEnv

    return [
        obj
        for obj in vars(module).values()
        if inspect.isclass(obj)
        and issubclass(obj, BaseEnv)
        and obj.__module__ == module.__name__
        and not inspect.isabstract(obj)
    ]


def find_class(target: str) -> type[Any] | str:
    """The one env class of ``target``, or why there is not exactly one."""
    classes = env_classes(load_module(target))
    if len(classes) != 1:
        names = ", ".join(c.__name__ for c in classes) or "none"
        return f"expected one env class (a BaseEnv subclass) in {target}, found {names}"
    return classes[0]


def replayable_samples(env_cls: type[Any]) -> list | None:
    """The built-in tasks, each with the prompt the env makes of it (a game's tasks carry
    none): what the stub's scripts find each task's conversation by."""
    from hermes_envgen.testing.envs import with_prompts

    samples = builtin_samples(env_cls)
    return with_prompts(env_cls, samples) if samples else samples


def describe(env_cls: type[Any]) -> dict:
    """What ``check`` needs to know of the env: its class, config, tools and built-in tasks."""
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig

    from hermes_envgen.testing.envs import offers_tools

    # config_init with every *_API_KEY unset: a key that is still there was written in the code.
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.endswith("_API_KEY")}
    try:
        config, servers = env_cls.config_init()
    finally:
        os.environ.update(saved)
    server_list = servers if isinstance(servers, list) else [servers]
    return {
        "class": env_cls.__name__,
        "name": env_cls.name,
        "servers_is_list": isinstance(servers, list),
        "servers_are_api_configs": all(isinstance(s, APIServerConfig) for s in server_list),
        "literal_api_key": any(
            getattr(s, "api_key", "") not in ("", None, "EMPTY") for s in server_list
        ),
        "group_size": config.group_size,
        "max_agent_turns": getattr(config, "max_agent_turns", None),
        "eval_size": getattr(config, "eval_size", None),
        "tokenizer_name": config.tokenizer_name,
        "judge_base_url": getattr(config, "judge_base_url", None),
        "dataset_name": getattr(config, "dataset_name", None),
        "samples": replayable_samples(env_cls),
        "tools": offers_tools(env_cls),
        "failure_score": getattr(config, "failure_score", 0.0),
        "eval_pass_threshold": getattr(config, "eval_pass_threshold", 1.0),
    }


def reward_report(env_cls: type[Any], tokenizer: str, workdir: str, gold: str, noop: str) -> dict:
    """Gold and no-op replays of every built-in sample (see testing.reward_checks)."""
    from hermes_envgen.testing.envs import offers_tools
    from hermes_envgen.testing.policy import has_gold
    from hermes_envgen.testing.reward_checks import check_rewards

    samples = builtin_samples(env_cls)
    if not samples or not all(has_gold(s) for s in replayable_samples(env_cls) or []):
        return {"skipped": "the env has no built-in tasks with gold solutions or players"}
    report = check_rewards(
        env_cls,
        samples,
        tokenizer,
        workdir,
        gold_threshold=float(gold),
        noop_threshold=float(noop),
    )
    return report.as_dict() | {
        "gold_failures": report.gold_failures,
        "noop_failures": report.noop_failures,
        "tamper_failures": report.tamper_failures,
        "shotgun_failures": report.shotgun_failures,
        "tool_touch_failures": report.tool_touch_failures,
        "broken_failures": report.broken_failures,
        "tools": offers_tools(env_cls),
        "failure_score": getattr(env_cls.config_init()[0], "failure_score", 0.0),
        "eval_pass_threshold": getattr(env_cls.config_init()[0], "eval_pass_threshold", 1.0),
        "two_shots_failures": report.two_shots_failures,
    }


def injection_report(
    env_cls: type[Any], tokenizer: str, workdir: str, base_url: str, model: str
) -> dict:
    """The env's judge asked to grade an injection answer (see testing.reward_checks)."""
    from dataclasses import asdict

    from hermes_envgen.runtime.errors import EnvConfigError
    from hermes_envgen.testing.envs import build_env
    from hermes_envgen.testing.reward_checks import judge_injection

    samples = replayable_samples(env_cls) or [{"prompt": "What is 2 + 2?", "answer": "4"}]
    server = {"model_name": model} if model else None
    # The env's own judge (its judge_base_url), not the stub: the check asks the judge it uses.
    # One it cannot set up (a remote judge without its key, offline) could not be asked.
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            env = build_env(
                env_cls, base_url, tokenizer, workdir, server_overrides=server, stub_judge=False
            )
    except (SystemExit, EnvConfigError) as exc:
        lines = said.getvalue().strip().splitlines() or [str(exc) or "the env exited"]
        judge = getattr(env_cls.config_init()[0], "judge_base_url", None) or base_url
        return {"score": None, "judge_error": lines[-1], "judge": judge, "self_judged": False}
    outcome = judge_injection(env, samples[0])
    if outcome is None:
        return {"skipped": "the reward asks no LLM judge (make_judge returns None)"}
    report = asdict(outcome)
    report["judge_error"] = report.pop("error")  # "error" says the report itself failed
    return report


def replays_report(
    env_cls: type[Any],
    tokenizer: str,
    workdir: str,
    gold: str,
    noop: str,
    base_url: str,
    model: str,
) -> dict:
    """The reward replays, the judge injection and the door replays, in one import of the
    env: each part's report, or its own error (one failing leaves the others' reports). The
    doors are replayed beside the other two (a thread of their own: they mostly wait on their
    servers and sandboxes)."""
    parts = {
        "rewards": lambda: reward_report(env_cls, tokenizer, f"{workdir}/replays", gold, noop),
        "injection": lambda: injection_report(
            env_cls, tokenizer, f"{workdir}/injection", base_url, model
        ),
    }
    report = {}
    with ThreadPoolExecutor(max_workers=1) as pool:
        doors = pool.submit(door_replays, env_cls, tokenizer, workdir, noop)
        for name, part in parts.items():
            try:
                report[name] = part()
            except BaseException as exc:  # as data, SystemExit included; see main
                report[name] = {"error": failure(exc)}
        try:
            report["doors"] = doors_report(doors.result(), report["rewards"])
        except BaseException as exc:
            report["doors"] = {"error": failure(exc)}
    return report


def door_replays(env_cls: type[Any], tokenizer: str, workdir: str, noop: str) -> Any:
    """The gold solutions, a no-op and tampering through each door to another trainer (TRL's
    environment_factory, the OpenEnv server, the verifiers door's server: each driven through
    its own adapter, the servers on 127.0.0.1 and stopped when done; see
    testing.door_parity); None for an env without gold solutions to replay."""
    from hermes_envgen.testing.door_parity import door_parity
    from hermes_envgen.testing.policy import has_gold

    samples = builtin_samples(env_cls)
    if not samples or not all(has_gold(s) for s in replayable_samples(env_cls) or []):
        return None
    return door_parity(
        env_cls,
        samples,
        tokenizer,
        f"{workdir}/replays/doors",
        noop_threshold=float(noop),
        atropos_gold=[],  # the reward replays' (doors_report), once they are done
    )


def doors_report(parity: Any, rewards: dict) -> dict:
    """The door replays against the gold rewards through the env's loop (the reward
    replays')."""
    if "outcomes" not in rewards or parity is None:
        return {"skipped": rewards.get("skipped") or "no gold replays to compare with"}
    parity.atropos_gold = [outcome["gold"] for outcome in rewards["outcomes"]]
    return parity.as_dict()


def failure(exc: BaseException) -> str:
    """An exception as one line: its type, message and where it was raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}".splitlines()[0]


def main() -> None:
    """``env_process TARGET`` describes the env; ``... TARGET replays ...`` replays its
    rewards and asks its judge to grade an injection answer."""
    target, *rest = sys.argv[1:]
    try:
        env_cls = find_class(target)
        if isinstance(env_cls, str):
            result = {"error": env_cls}
        elif rest and rest[0] == "replays":
            result = replays_report(env_cls, *rest[1:7])
        else:
            result = describe(env_cls)
    except BaseException as exc:  # report every failure, SystemExit included, as data
        result = {"error": failure(exc)}
    print("\n" + json.dumps(result, default=str))


if __name__ == "__main__":
    main()
