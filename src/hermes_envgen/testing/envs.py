"""Build an env in-process against a stub server, and validate what its modes wrote."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

from hermes_envgen.runtime.rollout import RolloutRecord
from hermes_envgen.runtime.rollouts.records import METRICS_FILE, SAMPLES_FILE

# The config field of a judge with an endpoint of its own (generated judge envs have it).
JUDGE_URL_FIELD = "judge_base_url"


def builtin_samples(env_cls: type[Any]) -> list | None:
    """The env's ``SAMPLES``: in its module, or in a ``samples`` module beside it (a generated
    env's ``setup`` loads them: ``load_tasks(SAMPLES)``), else its ``samples`` class attribute."""
    samples = getattr(sys.modules.get(env_cls.__module__), "SAMPLES", None)
    package = env_cls.__module__.rpartition(".")[0]
    if samples is None and package:
        try:
            samples = importlib.import_module(f"{package}.samples").SAMPLES
        except (ImportError, AttributeError):
            samples = None
    if samples is None and getattr(env_cls, "samples", None):
        samples = list(env_cls.samples)
    return samples if isinstance(samples, list) else None


def build_env(
    env_cls: type[Any],
    base_url: str,
    tokenizer: str | Path,
    workdir: str | Path,
    server_overrides: dict[str, Any] | None = None,
    stub_judge: bool = True,
    **overrides: Any,
) -> Any:
    """An instance of ``env_cls`` with its own defaults, pointed at ``base_url``, offline.

    Its settings are :func:`offline_settings` (sandboxes and evaluation results below
    ``workdir``, the offline corpus, the kit's notes server, the built-in samples, the stub as
    the judge unless ``stub_judge`` is False, e.g. to ask the judge it really uses).
    ``overrides`` replace config fields, ``server_overrides`` server fields (e.g.
    ``{"server_type": "vllm"}``).
    """
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig

    config, servers = env_cls.config_init()
    settings = offline_settings(env_cls, base_url, tokenizer, workdir, stub_judge=stub_judge)
    del settings["base_url"]
    values = config.model_dump() | settings | overrides
    server = APIServerConfig(
        **(
            servers[0].model_dump()
            | {"base_url": base_url, "api_key": "EMPTY", "health_check": False}
            | (server_overrides or {})
        )
    )
    return env_cls(type(config)(**values), [server])


def offline_settings(
    env_cls: type[Any],
    base_url: str,
    tokenizer: str | Path,
    workdir: str | Path,
    *,
    stub_judge: bool = True,
) -> dict[str, Any]:
    """What ``env_cls``'s own settings change to run offline against the stub at ``base_url``:
    the keywords of ``open_env``, and so of the doors to other trainers
    (``trl_environment_factory(env_cls, **settings)``, ``openenv_app``).

    Sandboxes and evaluation results go below ``workdir``; web tools search the env's offline
    corpus (``web_backend`` "corpus") and the kit's notes server stands in for each MCP server
    (under its name); an env with built-in ``samples`` works on them (the stub replays their
    gold solutions), not on its configured dataset; an env with a judge of its own
    (``judge_base_url`` set) has it pointed at ``base_url`` too: offline, the stub plays the
    judge (``stub_judge`` False keeps the env's own judge).
    """
    config, _ = env_cls.config_init()
    values = config.model_dump()
    workdir = Path(workdir)
    settings: dict[str, Any] = {
        "base_url": base_url,
        "tokenizer_name": str(tokenizer),
        "sandbox_root": str(workdir / "sandboxes"),
        "data_dir_to_save_evals": str(workdir / "eval"),
        "use_wandb": False,
        "web_backend": "corpus",  # offline: the env's own pages, never a search API
    }
    if values.get("dataset_name") and (
        getattr(env_cls, "samples", None) or builtin_samples(env_cls)
    ):
        settings["dataset_name"] = None  # offline: the built-in tasks, no hub
    if stub_judge and values.get(JUDGE_URL_FIELD):
        settings[JUDGE_URL_FIELD] = base_url
    if values.get("mcp_servers"):
        # offline: the kit's notes server stands in for each of the env's, under its name
        from hermes_envgen.testing.mcp_notes import notes_server

        settings["mcp_servers"] = [notes_server(server["name"]) for server in values["mcp_servers"]]
    return settings


def with_prompts(env_cls: type[Any], tasks: list[Any]) -> list[Any]:
    """``tasks`` made replayable: each with a ``prompt`` where it has none (the first user
    message the env's ``format_prompt`` makes of it: a game's tasks carry their data, not a
    prompt), by which the stub's scripts find its conversation, and a ``player`` where it has
    no gold solution and the env's ``gold_player`` gives one. A task the env's code cannot
    format stays as it is.
    """
    config, _ = env_cls.config_init()
    env = object.__new__(env_cls)  # format_prompt and gold_player need the config alone
    env.config = config
    prompted = []
    for task in tasks:
        if not isinstance(task, dict):
            prompted.append(task)
            continue
        if "prompt" not in task:
            try:
                messages = env.build_messages(task)
                opening = next(m["content"] for m in messages if m.get("role") == "user")
            except Exception:  # the env's own code: the task is left unreplayable
                opening = None
            if isinstance(opening, str) and opening:
                task = {**task, "prompt": opening}
        if "solution" not in task and "player" not in task and hasattr(env, "gold_player"):
            try:
                player = env.gold_player(task)
            except Exception:  # the same
                player = None
            if player:
                task = {**task, "player": list(player)}
        prompted.append(task)
    return prompted


def offers_tools(env_cls: type[Any]) -> bool:
    """Whether the env gives its agent any tool (a game or a simulated user may give none)."""
    config, _ = env_cls.config_init()
    if getattr(config, "mcp_servers", None):
        return True
    registry = getattr(env_cls, "tool_registry", None)
    if registry is None:
        return False
    try:
        return bool(registry.resolve(config.enabled_toolsets, config.disabled_toolsets))
    except Exception:  # an unknown toolset: the env's start-up says which
        return True


def validate_groups(path: str | Path, group_size: int | None = None) -> list[dict]:
    """Read a ``process`` JSONL file and check every group; AssertionError says what is wrong."""
    lines = [line for line in Path(path).read_text(encoding="utf-8").split("\n") if line]
    assert lines, f"{path} has no groups"
    groups = []
    for number, line in enumerate(lines, start=1):
        group = json.loads(line)
        where = f"{path}, group {number}"
        tokens, masks, scores = group.get("tokens"), group.get("masks"), group.get("scores")
        assert tokens and masks and scores is not None, f"{where}: tokens, masks or scores missing"
        assert len(tokens) == len(masks) == len(scores), f"{where}: sequence counts differ"
        if group_size is not None:
            assert len(tokens) == group_size, f"{where}: {len(tokens)} sequences, not {group_size}"
        for index, (seq, mask) in enumerate(zip(tokens, masks)):
            assert all(isinstance(t, int) for t in seq), f"{where}, sequence {index}: non-int token"
            assert len(seq) == len(mask), f"{where}, sequence {index}: tokens and masks differ"
            assert any(m != -100 for m in mask), f"{where}, sequence {index}: nothing is trained"
        assert all(0.0 <= s <= 1.0 for s in scores), f"{where}: a score is outside [0, 1]"
        groups.append(group)
    return groups


def read_eval_results(directory: str | Path) -> tuple[dict, list[RolloutRecord]]:
    """The metrics and samples an ``evaluate`` run saved into ``directory``."""
    directory = Path(directory)
    metrics = json.loads((directory / METRICS_FILE).read_text())["results"]["all"]
    text = (directory / SAMPLES_FILE).read_text(encoding="utf-8")
    samples: list[RolloutRecord] = [json.loads(line) for line in text.split("\n") if line]
    return metrics, samples
