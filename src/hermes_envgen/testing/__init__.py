"""The offline test kit: its one declared API, for this repository and generated projects.

A scripted OpenAI-compatible stub server over real HTTP, a tokenizer that needs no download, an
env's CLI modes run offline as subprocesses, checks of what they wrote, and a small stateful
MCP server (``notes_server()``: the ``mcp_servers`` entry that runs it). The pytest fixtures
(``stub_server``, ``offline_tokenizer``, ``offline_env``, ``reward_checks``) come from the
plugin that is installed with hermes-envgen. Names are loaded on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hermes_envgen._lazy import lazy_exports

_EXPORTS = {
    "OFFLINE_ENVIRONMENT": "runner",
    "EnvRunFailed": "runner",
    "offline_environment": "runner",
    "run_env_mode": "runner",
    "OfflineRun": "offline_run",
    "build_env": "envs",
    "offline_settings": "envs",
    "read_eval_results": "envs",
    "validate_groups": "envs",
    "scripted_policy": "policy",
    "Faults": "stub_server",
    "StubServer": "stub_server",
    "build_offline_tokenizer": "tokenizer",
    "RewardCheckReport": "reward_checks",
    "check_rewards": "reward_checks",
    "MinimalTrainer": "trainer",
    "RunApi": "trainer",
    "notes_server": "mcp_notes",
    "served": "serving",
}

__all__ = [
    "OFFLINE_ENVIRONMENT",
    "EnvRunFailed",
    "Faults",
    "MinimalTrainer",
    "OfflineRun",
    "RewardCheckReport",
    "RunApi",
    "StubServer",
    "build_env",
    "build_offline_tokenizer",
    "check_rewards",
    "notes_server",
    "offline_environment",
    "offline_settings",
    "read_eval_results",
    "run_env_mode",
    "scripted_policy",
    "served",
    "validate_groups",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


if TYPE_CHECKING:
    from hermes_envgen.testing.envs import (
        build_env,
        offline_settings,
        read_eval_results,
        validate_groups,
    )
    from hermes_envgen.testing.mcp_notes import notes_server
    from hermes_envgen.testing.offline_run import OfflineRun
    from hermes_envgen.testing.policy import scripted_policy
    from hermes_envgen.testing.reward_checks import RewardCheckReport, check_rewards
    from hermes_envgen.testing.runner import (
        OFFLINE_ENVIRONMENT,
        EnvRunFailed,
        offline_environment,
        run_env_mode,
    )
    from hermes_envgen.testing.serving import served
    from hermes_envgen.testing.stub_server import Faults, StubServer
    from hermes_envgen.testing.tokenizer import build_offline_tokenizer
    from hermes_envgen.testing.trainer import MinimalTrainer, RunApi
