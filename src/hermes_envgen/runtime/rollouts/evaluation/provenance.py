"""What an evaluation run was: the settings a resume must keep, and the versions, model and
provider that make two runs comparable (``config_general`` of metrics.json).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from hermes_envgen.runtime.rollouts.evaluation.metrics import INTERVALS


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
        "split_seed": getattr(config, "split_seed", None),
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
    """The template release the env's project was made from: its package's
    ``__template_version__`` (generated projects set it), else None.
    """
    package = sys.modules.get(env_cls.__module__.split(".")[0])
    value = getattr(package, "__template_version__", None)
    return str(value) if value else None


def _hermes_envgen_version() -> str:
    from hermes_envgen import __version__

    return __version__


def _first_server_field(env: Any, name: str) -> Any:
    servers = getattr(getattr(env, "server", None), "servers", None) or []
    config = getattr(servers[0], "config", None) if servers else None
    value = getattr(config, name, None)
    return getattr(value, "value", value)  # an enum's value (server_type)
