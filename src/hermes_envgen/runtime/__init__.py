"""The runtime generated environments import: their one declared API.

``__all__`` is what an env author uses: the base env, its settings, its model servers' settings
(``APIServerConfig``, atroposlib's) and the errors it raises, the task type and its
loaders, the agent loop with its turn hooks and its result, the reward building blocks, the
rollout's sandbox as a reward sees it, the tool decorator and the metric names. Everything else
is internal and imported by its module path (``hermes_envgen.runtime.tools.REGISTRY``). Names
are loaded on first use, so ``import hermes_envgen.runtime`` (or the CLI) does not pay for
atroposlib and transformers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hermes_envgen._lazy import lazy_exports

_EXPORTS = {
    # the base env, its settings and its model servers'
    "HermesAgentBaseEnv": "env.base_env",
    "HermesAgentEnvConfig": "env.config",
    "APIServerConfig": "env.config",
    # the errors an env raises for a mistake in its settings or its data (exit 2, one line)
    "EnvConfigError": "errors",
    "DatasetError": "errors",
    # tasks
    "Task": "rollout",
    "split_train_eval": "env.datasets",
    "training_order": "env.datasets",
    # the agent loop, its hooks and its result
    "HermesAgentLoop": "loop.agent_loop",
    "LoopSettings": "loop.agent_loop",
    "TurnHooks": "loop.agent_loop",
    "RolloutState": "rollout",
    "AgentResult": "rollout",
    "ToolErrorRecord": "rollout",
    "ToolContext": "loop.tool_context",
    # rewards
    "Reward": "rewards",
    "JudgeVerdict": "rewards",
    "answer_is": "rewards",
    "ask_judge": "rewards",
    "correctness_gated": "rewards",
    "efficiency_score": "rewards",
    "read_answer_file": "rewards",
    "tool_usage_score": "rewards",
    "verify_in_sandbox": "rewards",
    "verify_with_pytest": "rewards",
    "weighted_score": "rewards",
    # the judge's model server
    "ModelClient": "inference",
    "judge_client": "inference",
    # metric names
    "Metric": "rollout",
    "metric": "rollout",
    "EVAL": "rollout",
    "TRAIN": "rollout",
    # tools
    "tool": "tools",
    # one session of the env, driven by any trainer (the doors to TRL, OpenEnv, verifiers)
    "EnvReply": "doors.session",
    "EnvSession": "doors.session",
    "EnvSessions": "doors.session",
    "SessionThread": "doors.session",
    "TurnEnd": "doors.session",
    "open_env": "doors.session",
    "openenv_app": "doors.openenv",
    "trl_dataset": "doors.trl",
    "trl_env_reward": "doors.trl",
    "trl_environment_factory": "doors.trl",
    "verifiers_app": "doors.verifiers",
}

__all__ = [
    "EVAL",
    "TRAIN",
    "APIServerConfig",
    "AgentResult",
    "DatasetError",
    "EnvConfigError",
    "EnvReply",
    "EnvSession",
    "EnvSessions",
    "HermesAgentBaseEnv",
    "HermesAgentEnvConfig",
    "HermesAgentLoop",
    "JudgeVerdict",
    "LoopSettings",
    "Metric",
    "ModelClient",
    "Reward",
    "RolloutState",
    "SessionThread",
    "Task",
    "ToolContext",
    "ToolErrorRecord",
    "TurnEnd",
    "TurnHooks",
    "answer_is",
    "ask_judge",
    "correctness_gated",
    "efficiency_score",
    "judge_client",
    "metric",
    "open_env",
    "openenv_app",
    "read_answer_file",
    "split_train_eval",
    "tool",
    "tool_usage_score",
    "training_order",
    "trl_dataset",
    "trl_env_reward",
    "trl_environment_factory",
    "verifiers_app",
    "verify_in_sandbox",
    "verify_with_pytest",
    "weighted_score",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


if TYPE_CHECKING:
    from hermes_envgen.runtime.doors.openenv import openenv_app
    from hermes_envgen.runtime.doors.session import (
        EnvReply,
        EnvSession,
        EnvSessions,
        SessionThread,
        TurnEnd,
        open_env,
    )
    from hermes_envgen.runtime.doors.trl import (
        trl_dataset,
        trl_env_reward,
        trl_environment_factory,
    )
    from hermes_envgen.runtime.doors.verifiers import verifiers_app
    from hermes_envgen.runtime.env.base_env import HermesAgentBaseEnv
    from hermes_envgen.runtime.env.config import APIServerConfig, HermesAgentEnvConfig
    from hermes_envgen.runtime.env.datasets import split_train_eval, training_order
    from hermes_envgen.runtime.errors import DatasetError, EnvConfigError
    from hermes_envgen.runtime.inference import ModelClient, judge_client
    from hermes_envgen.runtime.loop.agent_loop import HermesAgentLoop, LoopSettings, TurnHooks
    from hermes_envgen.runtime.loop.tool_context import ToolContext
    from hermes_envgen.runtime.rewards import (
        JudgeVerdict,
        Reward,
        answer_is,
        ask_judge,
        correctness_gated,
        efficiency_score,
        read_answer_file,
        tool_usage_score,
        verify_in_sandbox,
        verify_with_pytest,
        weighted_score,
    )
    from hermes_envgen.runtime.rollout import (
        EVAL,
        TRAIN,
        AgentResult,
        Metric,
        RolloutState,
        Task,
        ToolErrorRecord,
        metric,
    )
    from hermes_envgen.runtime.tools import tool
