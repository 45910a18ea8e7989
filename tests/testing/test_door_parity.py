"""The gold solutions of a generated env earn through a session (what TRL's environment_factory
and the OpenEnv server run) exactly what they earn through the env's own loop, as process runs
it; a no-op and tampering through a session earn nothing."""

from __future__ import annotations

import importlib
import sys

import pytest
from conftest import render_template

from hermes_envgen.testing.door_parity import door_parity
from hermes_envgen.testing.envs import builtin_samples

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("pattern", ["binary", "judge"])
def test_a_session_pays_the_gold_solutions_what_process_pays_and_nothing_for_nothing(
    pattern, offline_tokenizer, tmp_path, monkeypatch
):
    name = f"parity-{pattern}"
    data = {"project_name": name, "provider": "atropos", "reward_pattern": pattern}
    if pattern == "judge":  # the stub server plays the judge too: the policy's own server
        data["judge_base_url"] = "policy"
    project = render_template(tmp_path / name, data)
    monkeypatch.syspath_prepend(str(project / "src"))
    package = name.replace("-", "_")
    env_cls = next(
        value
        for value in vars(importlib.import_module(f"{package}.env")).values()
        if isinstance(value, type) and value.__module__ == f"{package}.env"
        and hasattr(value, "compute_reward")
    )  # fmt: skip
    try:
        samples = builtin_samples(env_cls)[:6]  # check replays them all
        report = door_parity(env_cls, samples, offline_tokenizer, tmp_path / "work")
    finally:
        for module in [m for m in sys.modules if m.startswith(package)]:
            del sys.modules[module]
    assert report.atropos_gold and report.gold_mismatches == []
    assert all(r >= 0.9 for r in report.session_gold), report.as_dict()
    assert report.paid_for_nothing == [], report.as_dict()
    assert len(report.session_noop) == len(report.session_tamper) == len(report.atropos_gold)
