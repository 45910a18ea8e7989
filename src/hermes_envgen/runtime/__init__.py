"""The runtime generated environments import: their one declared API.

Everything an env author (and the template) needs is importable from here; deeper module paths
are internal and may move. Names are loaded on first use, so ``import hermes_envgen.runtime``
(or the CLI) does not pay for atroposlib and transformers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hermes_envgen._lazy import lazy_exports

_EXPORTS = {
    # the agent loop and its result
    "AgentResult": "agent_loop",
    "HermesAgentLoop": "agent_loop",
    "RolloutState": "agent_loop",
    "TurnHooks": "agent_loop",
    "ToolError": "agent_loop",  # ToolErrorRecord's earlier name
    "ToolErrorRecord": "records",
    # the base env and its settings
    "HermesAgentBaseEnv": "base_env",
    "Rollout": "base_env",
    "HermesAgentEnvConfig": "config",
    # errors
    "EnvConfigError": "errors",
    "DatasetError": "errors",
    "SandboxError": "errors",
    "ToolExecutionError": "errors",
    "InferenceError": "errors",
    "ModelServerError": "errors",
    # the model server
    "ModelClient": "inference",
    "judge_client": "inference",
    # tasks
    "Task": "tasks",
    "load_items": "datasets",
    "split_train_eval": "datasets",
    "training_order": "datasets",
    # rewards
    "Reward": "rewards",
    "JudgeVerdict": "rewards",
    "answer_is": "rewards",
    "answer_matches": "rewards",
    "ask_judge": "rewards",
    "correctness_gated": "rewards",
    "efficiency_score": "rewards",
    "keyword_overlap": "rewards",
    "normalize_answer": "rewards",
    "read_answer_file": "rewards",
    "tool_usage_score": "rewards",
    "verify_in_sandbox": "rewards",
    "verify_with_pytest": "rewards",
    "weighted_score": "rewards",
    # records and metric names
    "Metric": "records",
    "RolloutRecord": "records",
    "metric": "records",
    "EVAL": "records",
    "TRAIN": "records",
    # tools and sandboxes
    "ToolContext": "tool_context",
    "tool": "tools",
    "Tool": "tools",
    "ToolRegistry": "tools",
    "REGISTRY": "tools",
    "SandboxManager": "sandbox",
    "SandboxSettings": "sandbox",
    # training data
    "tokenize_conversation": "trajectory",
}

__all__ = [
    "EVAL",
    "REGISTRY",
    "TRAIN",
    "AgentResult",
    "DatasetError",
    "EnvConfigError",
    "HermesAgentBaseEnv",
    "HermesAgentEnvConfig",
    "HermesAgentLoop",
    "InferenceError",
    "JudgeVerdict",
    "Metric",
    "ModelClient",
    "ModelServerError",
    "Reward",
    "Rollout",
    "RolloutRecord",
    "RolloutState",
    "SandboxError",
    "SandboxManager",
    "SandboxSettings",
    "Task",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolErrorRecord",
    "ToolExecutionError",
    "ToolRegistry",
    "TurnHooks",
    "answer_is",
    "answer_matches",
    "ask_judge",
    "correctness_gated",
    "efficiency_score",
    "judge_client",
    "keyword_overlap",
    "load_items",
    "metric",
    "normalize_answer",
    "read_answer_file",
    "split_train_eval",
    "tokenize_conversation",
    "tool",
    "tool_usage_score",
    "training_order",
    "verify_in_sandbox",
    "verify_with_pytest",
    "weighted_score",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


if TYPE_CHECKING:
    from hermes_envgen.runtime.agent_loop import (
        AgentResult,
        HermesAgentLoop,
        RolloutState,
        ToolError,
        TurnHooks,
    )
    from hermes_envgen.runtime.base_env import HermesAgentBaseEnv, Rollout
    from hermes_envgen.runtime.config import HermesAgentEnvConfig
    from hermes_envgen.runtime.datasets import load_items, split_train_eval, training_order
    from hermes_envgen.runtime.errors import (
        DatasetError,
        EnvConfigError,
        InferenceError,
        ModelServerError,
        SandboxError,
        ToolExecutionError,
    )
    from hermes_envgen.runtime.inference import ModelClient, judge_client
    from hermes_envgen.runtime.records import (
        EVAL,
        TRAIN,
        Metric,
        RolloutRecord,
        ToolErrorRecord,
        metric,
    )
    from hermes_envgen.runtime.rewards import (
        JudgeVerdict,
        Reward,
        answer_is,
        answer_matches,
        ask_judge,
        correctness_gated,
        efficiency_score,
        keyword_overlap,
        normalize_answer,
        read_answer_file,
        tool_usage_score,
        verify_in_sandbox,
        verify_with_pytest,
        weighted_score,
    )
    from hermes_envgen.runtime.sandbox import SandboxManager, SandboxSettings
    from hermes_envgen.runtime.tasks import Task
    from hermes_envgen.runtime.tool_context import ToolContext
    from hermes_envgen.runtime.tools import REGISTRY, Tool, ToolRegistry, tool
    from hermes_envgen.runtime.trajectory import tokenize_conversation
