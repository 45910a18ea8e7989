"""An env built in-process against the stub server (make_env), and the greeting it is asked."""

from __future__ import annotations

from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from terminal_env import TASKS, TerminalTaskEnv

GREETING = TASKS[0]


def make_env(stub_url, tokenizer_dir, tmp_path, env_cls=TerminalTaskEnv, **overrides):
    config, _ = env_cls.config_init()
    values = config.model_dump()
    values.update(
        tokenizer_name=str(tokenizer_dir),
        sandbox_root=str(tmp_path / "sandboxes"),
        data_dir_to_save_evals=str(tmp_path / "evals"),
        group_size=4,
        **overrides,
    )
    config = type(config)(**values)
    return env_cls(
        config, [APIServerConfig(base_url=stub_url, model_name="stub-model", health_check=False)]
    )
