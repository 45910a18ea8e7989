"""The runtime generated environments import.

Names are loaded on first use, so ``import hermes_envgen.runtime.parsers`` (or the CLI) does
not pay for atroposlib and transformers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "AgentResult": "agent_loop",
    "HermesAgentLoop": "agent_loop",
    "ToolError": "agent_loop",
    "HermesAgentBaseEnv": "base_env",
    "EnvConfigError": "errors",
    "Reward": "rewards",
    "Rollout": "base_env",
    "HermesAgentEnvConfig": "config",
    "ToolContext": "tool_context",
    "tool": "tools",
    "Tool": "tools",
    "ToolExecutionError": "tools",
    "ToolRegistry": "tools",
    "REGISTRY": "tools",
    "tokenize_conversation": "trajectory",
    "SandboxManager": "sandbox",
    "SandboxSettings": "sandbox",
}

__all__ = [
    "REGISTRY",
    "AgentResult",
    "EnvConfigError",
    "HermesAgentBaseEnv",
    "HermesAgentEnvConfig",
    "HermesAgentLoop",
    "Reward",
    "Rollout",
    "SandboxManager",
    "SandboxSettings",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolExecutionError",
    "ToolRegistry",
    "tokenize_conversation",
    "tool",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from hermes_envgen.runtime.agent_loop import AgentResult, HermesAgentLoop, ToolError
    from hermes_envgen.runtime.base_env import EnvConfigError, HermesAgentBaseEnv, Rollout
    from hermes_envgen.runtime.config import HermesAgentEnvConfig
    from hermes_envgen.runtime.rewards import Reward
    from hermes_envgen.runtime.sandbox import SandboxManager, SandboxSettings
    from hermes_envgen.runtime.tool_context import ToolContext
    from hermes_envgen.runtime.tools import (
        REGISTRY,
        Tool,
        ToolExecutionError,
        ToolRegistry,
        tool,
    )
    from hermes_envgen.runtime.trajectory import tokenize_conversation
