"""Every combination of answers renders a project that is ruff-clean and passes its own tests."""

from __future__ import annotations

import importlib
import itertools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import imported_modules, imported_names, render_template

# What generated code may import from hermes-envgen: anything deeper may move between releases.
DECLARED_API = {"hermes_envgen.runtime", "hermes_envgen.testing"}

PROVIDERS = {
    "atropos": {},
    "openrouter": {"model_name": "meta-llama/llama-3.1-8b-instruct"},
    "vllm": {"model_name": "NousResearch/Hermes-3-Llama-3.1-8B", "base_url": "http://gpu:8000/v1"},
    "openai_compatible": {
        "model_name": "my-model",
        "base_url": "https://api.example.com/v1",
        "api_key_env": "EXAMPLE_API_KEY",
    },
}
PATTERNS = ["binary", "judge", "multi_signal"]
BOOLEANS = list(itertools.product([True, False], repeat=2))  # (ci, use_dataset)


def answers(provider: str, pattern: str, ci: bool, use_dataset: bool) -> dict:
    data = {
        "project_name": f"{provider.replace('_', '-')}-{pattern.replace('_', '-')}",
        "provider": provider,
        "reward_pattern": pattern,
        "ci": ci,
        "use_dataset": use_dataset,
        **PROVIDERS[provider],
    }
    if use_dataset:
        data["dataset_name"] = "example-org/terminal-tasks"
    return data


def render(tmp_path: Path, data: dict) -> Path:
    return render_template(tmp_path / data["project_name"], data)


@pytest.fixture(scope="session")
def combination(tmp_path_factory: pytest.TempPathFactory):
    """The project of one combination of answers, rendered once per session: for tests that
    only read it (a test that runs it works on a copy)."""
    rendered: dict[tuple, Path] = {}

    def project(provider: str, pattern: str, ci: bool, use_dataset: bool) -> Path:
        key = (provider, pattern, ci, use_dataset)
        if key not in rendered:
            target = tmp_path_factory.mktemp("combination")
            rendered[key] = render(target, answers(*key))
        return rendered[key]

    return project


def ruff(project: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--no-cache", "."],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
    )


ALL = [
    (provider, pattern, ci, use_dataset)
    for provider in PROVIDERS
    for pattern in PATTERNS
    for ci, use_dataset in BOOLEANS
]


@pytest.mark.parametrize(("provider", "pattern", "ci", "use_dataset"), ALL)
def test_every_combination_is_ruff_clean(combination, provider, pattern, ci, use_dataset):
    project = combination(provider, pattern, ci, use_dataset)
    for args in (["check"], ["format", "--check"]):
        result = ruff(project, *args)
        assert result.returncode == 0, result.stdout + result.stderr
    leftovers = [
        str(p.relative_to(project))
        for p in project.rglob("*")
        if p.is_file() and ("{{" in p.read_text() or "{%" in p.read_text() or p.suffix == ".jinja")
    ]
    assert leftovers == [], f"Jinja left in {leftovers}"
    assert (project / ".github/workflows/tests.yml").exists() == ci
    deep = sorted(
        f"{path.relative_to(project)}: {module}"
        for path in project.rglob("*.py")
        for module in imported_modules(path)
        if module.startswith("hermes_envgen") and module not in DECLARED_API
    )
    assert deep == [], f"generated code imports beyond the declared API: {deep}"
    undeclared = sorted(
        f"{path.relative_to(project)}: {module}.{name}"
        for path in project.rglob("*.py")
        for module, name in imported_names(path)
        if module in DECLARED_API and name not in importlib.import_module(module).__all__
    )
    assert undeclared == [], f"generated code imports names outside __all__: {undeclared}"


# Each provider x pattern runs its own tests once; the booleans rotate so that every pattern
# meets every combination of them.
TESTED = [
    (provider, pattern, *BOOLEANS[(i + j) % len(BOOLEANS)])
    for i, provider in enumerate(PROVIDERS)
    for j, pattern in enumerate(PATTERNS)
]


@pytest.mark.slow
@pytest.mark.parametrize(("provider", "pattern", "ci", "use_dataset"), TESTED)
def test_generated_project_passes_its_own_tests(
    combination, tmp_path, provider, pattern, ci, use_dataset
):
    project = tmp_path / "project"  # its tests may write into it: a copy of the shared render
    shutil.copytree(combination(provider, pattern, ci, use_dataset), project, symlinks=True)
    assert_own_tests_pass(project)


def assert_own_tests_pass(project: Path) -> None:
    """Run the generated project's own test suite; fail with its output unless all pass."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout


def test_building_the_env_writes_nothing(tmp_path, monkeypatch, offline_tokenizer):
    # serve, evaluate and the project's own tests build the env; only process writes groups
    # (to data/<package>.jsonl, atroposlib's default), so no run leaves an empty JSONL behind.
    from hermes_envgen.testing.envs import build_env

    project = render(tmp_path, {"project_name": "quiet-env"})
    monkeypatch.syspath_prepend(str(project / "src"))
    from quiet_env import QuietEnv

    workdir = tmp_path / "cwd"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    build_env(QuietEnv, "http://127.0.0.1:9/v1", offline_tokenizer, tmp_path / "run")
    assert list(workdir.iterdir()) == []
    config = yaml.safe_load((project / "configs" / "default.yaml").read_text())
    assert "data_path_to_save_groups" not in config["env"]


@pytest.mark.slow
def test_the_readme_runs_process_and_evaluate_offline_as_written(tmp_path):
    project = render(tmp_path, {"project_name": "offline-env"})
    readme = (project / "README.md").read_text()
    block = readme.split("### Offline, against a stub model", 1)[1]
    block = block.split("```bash\n", 1)[1].split("```", 1)[0]
    # As a user whose venv has hermes-envgen and the project installed: on PATH and importable.
    bin_dir = str(Path(sys.executable).parent)
    pythonpath = os.pathsep.join([str(project / "src"), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": pythonpath}
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (project / "data" / "offline.jsonl").read_text().count("\n") == 1  # one group
    assert '<article class="card"' in (project / "data" / "offline.html").read_text()
    assert (project / "eval_results" / "offline" / "metrics.json").is_file()


def test_generated_config_holds_no_key(tmp_path, monkeypatch):
    monkeypatch.setenv("EXAMPLE_API_KEY", "sk-do-not-write-me")
    project = render(tmp_path, answers("openai_compatible", "judge", True, False))
    text = "\n".join(
        p.read_text() for p in project.rglob("*") if p.is_file() and ".git" not in p.parts
    )
    assert "sk-do-not-write-me" not in text
    assert (
        'os.environ.get("EXAMPLE_API_KEY", "")'
        in (project / "src/openai_compatible_judge/env.py").read_text()
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"project_name": "My Env"}, "lowercase letters"),
        ({"project_name": "class"}, "cannot be used"),
        ({"project_name": "ok-env", "provider": "openrouter"}, '"model_name" is required'),
        (
            {"project_name": "ok-env", "provider": "openrouter", "model_name": " "},
            "no model is assumed",
        ),
        (
            {
                "project_name": "ok-env",
                "provider": "openai_compatible",
                "model_name": "m",
                "base_url": "ftp://x",
            },
            "http:// or https://",
        ),
        ({"project_name": "ok-env", "toolsets": ["file"]}, "need the terminal toolset"),
        (
            {
                "project_name": "ok-env",
                **PROVIDERS["vllm"],
                "provider": "vllm",
                "vllm_server": "generate",
                "reward_pattern": "judge",
                "judge_base_url": "",
            },
            "no chat API to judge with",
        ),
    ],
)
def test_invalid_answers_are_refused_with_a_reason(tmp_path, data, message):
    with pytest.raises(ValueError, match=message):
        render(tmp_path, data)
    assert not (tmp_path / data["project_name"]).exists()


@pytest.mark.slow  # runs the project's own tests, as test_generated_project_passes_its_own_tests
@pytest.mark.parametrize("sglang_api", ["generate", "chat"])
def test_an_sglang_project_says_how_to_start_sglang_and_passes_its_own_tests(tmp_path, sglang_api):
    data = {
        "project_name": f"sglang-{sglang_api}",
        "provider": "sglang",
        "sglang_api": sglang_api,
        "model_name": "Qwen/Qwen2.5-7B-Instruct",
        "reward_pattern": "multi_signal",
        "ci": False,
    }
    project = render(tmp_path, data)
    for args in (["check"], ["format", "--check"]):
        result = ruff(project, *args)
        assert result.returncode == 0, result.stdout + result.stderr
    env = (project / "src" / f"sglang_{sglang_api}" / "env.py").read_text()
    assert 'server_type="sglang"' in env and f'inference_api="{sglang_api}"' in env
    assert 'base_url="http://localhost:30000/v1"' in env  # SGLang's own default port
    config = yaml.safe_load((project / "configs/default.yaml").read_text())
    assert config["openai"]["server_type"] == "sglang"
    assert config["env"]["inference_api"] == sglang_api
    readme = (project / "README.md").read_text()
    start = "python -m sglang.launch_server --model-path Qwen/Qwen2.5-7B-Instruct --port 30000"
    assert start in readme and "vllm" not in readme.lower()
    assert ("--tool-call-parser qwen25" in readme) == (sglang_api == "chat")
    assert ("native `/generate`" in readme) == (sglang_api == "generate")
    if sglang_api == "generate":  # Phase 2 against the stub's SGLang-style /generate
        assert_own_tests_pass(project)


def test_the_atropos_project_asks_atropos_inference_port_not_run_api(tmp_path):
    """Atropos's convention: inference on 9001, run-api on 8000; a local model's timeout."""
    project = render(tmp_path, answers("atropos", "binary", False, False))
    probe = (
        "from atropos_binary.env import AtroposBinaryEnv as E; c, [s] = E.config_init(); "
        "print(s.base_url, s.timeout, c.rollout_server_url)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=project / "src",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["http://localhost:9001/v1", "300", "http://localhost:8000"]
    openai = yaml.safe_load((project / "configs/default.yaml").read_text())["openai"]
    assert openai["base_url"] == "http://localhost:9001/v1" and openai["timeout"] == 300


@pytest.mark.parametrize("vllm_server", ["completions", "chat", "generate", "auto"])
def test_vllm_server_kinds_and_a_judge_of_its_own_render_clean(tmp_path, vllm_server):
    data = answers("vllm", "judge", False, False) | {
        "project_name": f"vllm-{vllm_server}",
        "vllm_server": vllm_server,
        "judge_base_url": "https://openrouter.ai/api/v1",
        "judge_model": "openai/gpt-4o-mini",
    }
    project = render(tmp_path, data)
    for args in (["check"], ["format", "--check"]):
        result = ruff(project, *args)
        assert result.returncode == 0, result.stdout + result.stderr
    env = (project / "src" / f"vllm_{vllm_server}" / "env.py").read_text()
    assert f'inference_api="{vllm_server}"' in env
    assert 'default="OPENROUTER_API_KEY"' in env  # the judge's key, read from the environment
    readme = (project / "README.md").read_text()
    assert ("vllm serve" in readme) == (vllm_server != "generate")
    assert ("--enable-auto-tool-choice" in readme) == (vllm_server == "chat")
    # The per-request return_tokens_as_token_ids came with vLLM 0.8 (vllm-project/vllm#14066).
    completions = vllm_server in ("completions", "auto")
    assert ("vLLM 0.8 or later" in readme) == completions and "0.5.4" not in readme
    assert "Port 8000 is also run-api's default" in readme  # the answers put vLLM on 8000


@pytest.mark.parametrize(
    ("install_source", "ci_installs"),
    [
        ("/home/me/hermes_envgen-0.2.0-py3-none-any.whl", None),  # CI cannot reach it: fails
        ("git+https://git.example.com/hermes-envgen.git@v0.2.0", "git+https://git.example.com"),
        ("", ""),  # the user's package index has it: nothing to add
    ],
)
def test_updating_says_where_hermes_envgen_comes_from_and_ci_installs_it(
    tmp_path, install_source: str, ci_installs: str | None
):
    data = answers("atropos", "binary", True, False) | {"hermes_envgen_source": install_source}
    project = render(tmp_path, data)
    updating = (project / "README.md").read_text().split("## Updating", 1)[1]
    assert "pip install -U hermes-envgen" not in updating
    assert "exits 0 even when it leaves conflicts" in updating and "redirection" in updating
    if install_source:
        assert f"pip install --force-reinstall --no-deps {install_source}" in updating
    workflow = yaml.safe_load((project / ".github" / "workflows" / "tests.yml").read_text())
    steps = {step.get("name"): step.get("run", "") for step in workflow["jobs"]["test"]["steps"]}
    step = steps.get("Install hermes-envgen (on no package index)")
    if ci_installs is None:  # a local path, and no release to fetch (rendered from a commit)
        assert "::error::" in step and "exit 1" in step and "tests.yml" in step
    elif ci_installs:
        assert f"uv pip install --system -c constraints.txt {install_source}" in step
    else:
        assert step is None
    assert "uv pip install --system -c constraints.txt -e '.[dev]'" in steps["Install"]
    assert steps["Install uv"] == "pip install uv==0.13.8"
