"""Every shell block of a generated project's README, for each provider, runs as written here,
or, where it needs what this machine has not (a GPU, the internet), has what can be checked
checked.

- ``## Set up``: the same for every provider but the ``export`` of the key, which comes after
  ``pytest``; the block itself runs verbatim in a fresh venv in tests/generate/test_wheel.py.
- ``## Run``: ``process``, ``evaluate`` and ``serve`` as written against the test kit's stub on
  the port the README names, with a real run-api and a trainer where ``serve`` needs them. The
  model's tokenizer, a Hugging Face repo id, comes from a local hub cache that holds the
  offline tokenizer under that id (``HF_HUB_OFFLINE=1`` reads it as the download would be).
  OpenRouter cannot be reached offline: its commands run as written but for the base URL.
- The ``vllm``/``sglang`` launch lines need a GPU (and the model): their module and flags are
  checked with the installed package's own argument parser (``scripts/vllm-server.sh
  prepare`` installs vLLM; SGLang's flags are read from its source, installed without
  dependencies from uv's cache).
- ``### Offline, against a stub model``: tests/template/test_template.py runs it as written.
- ``### TRL``, ``### OpenEnv`` (other trainers): each extra the install line names is one of
  hermes-envgen's; the OpenEnv server runs as written, driven by OpenEnv's client (its
  library from .venv-trl, scripts/install-trainers.sh). The door's own tests are the
  project's tests/test_doors.py, which tests/template/test_template.py runs.
- ``## Updating``: tests/generate/test_readme_update.py runs it after a real update.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import importlib.util
import json
import os
import re
import runpy
import shlex
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from helpers.template import README_PROJECTS, answers, readme_ports, render
from hermes_envgen.testing import OFFLINE_ENVIRONMENT as OFFLINE

from hermes_envgen.testing.trainer import MinimalTrainer, TrainerError

# The projects whose READMEs differ in their blocks: every provider, each way to sample vLLM
# and SGLang, a model on run-api's port.
PROJECTS = {
    **README_PROJECTS,
    "vllm-completions": answers("vllm", "binary", False, False)
    | {"project_name": "vllm-completions", "base_url": "http://localhost:9001/v1"},
    "vllm-chat": answers("vllm", "multi_signal", False, False)
    | {"project_name": "vllm-chat", "vllm_server": "chat", "base_url": "http://localhost:9001/v1"},
    "vllm-auto-port-8000": answers("vllm", "binary", False, False)
    | {
        "project_name": "vllm-on-8000",
        "vllm_server": "auto",
        "base_url": "http://localhost:8000/v1",
    },
    "sglang-chat": README_PROJECTS["sglang"]
    | {"project_name": "sglang-chat", "sglang_api": "chat"},
}
SECTIONS = (
    "## Set up",
    "## Run",
    "### Offline, against a stub model",
    "### TRL",
    "### OpenEnv",
    "### verifiers",
    "## Updating",
)


def bash_blocks(readme: str) -> list[tuple[str, str]]:
    """``(section heading, block)`` of each ```bash block, in order."""
    found = []
    for match in re.finditer(r"```bash\n(.*?)```", readme, re.DOTALL):
        headings = re.findall(r"^(#{2,3} .+)$", readme[: match.start()], re.MULTILINE)
        found.append((headings[-1], match.group(1)))
    return found


def commands(block: str) -> list[str]:
    """The block's commands: comments dropped, continued lines joined."""
    text = re.sub(r"\\\n\s*", " ", block)
    lines = [re.sub(r"\s+#.*$", "", line).strip() for line in text.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def kind_of(command: str, package: str) -> str | None:
    """What a command of a generated README is, as this file and its peers run it."""
    kinds = {
        "setup": r"(uv venv && \. \.venv/bin/activate|uv pip install .*|pytest|export \w+=\.\.\.)",
        "env": rf"python -m {package} (process|evaluate|serve)( .*)?",
        "vllm": r"python -m vllm\.entrypoints\.openai\.api_server .*",
        "sglang": r"python -m sglang\.launch_server .*",
        "run-api": r"run-api --host 127\.0\.0\.1 --port \d+ &",
        "openenv": rf"TOKENIZER_NAME=\S+ +python -m {package}\.openenv_server",
        "verifiers": rf"python -m hermes_envgen\.runtime\.doors\.verifiers +{package}\.env:\w+ +"
        r"--tokenizer \S+",
        # the offline recipe (tests/template/test_template.py runs it)
        "offline": r"(hermes-envgen (stub-server|offline-tokenizer|trainer) .*|OFFLINE=.*|"
        r"--.*|wait \$TRAINER|kill \$SERVE \$STUB)",
    }
    return next((k for k, pattern in kinds.items() if re.fullmatch(pattern, command)), None)


@pytest.fixture(scope="module")
def readmes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("readmes")
    return {kind: render(root, data) for kind, data in PROJECTS.items()}


@pytest.mark.slow
def test_every_block_of_every_generated_readme_is_one_these_tests_run(readmes):
    setups = {}
    for kind, project in readmes.items():
        package = project.name.replace("-", "_")
        blocks = bash_blocks((project / "README.md").read_text())
        assert {section for section, _ in blocks} == set(SECTIONS), kind
        for section, block in blocks:
            unknown = [c for c in commands(block) if kind_of(c, package) is None]
            assert unknown == [], f"{kind}, {section}: a command no test runs or checks"
        (setup,) = [block for section, block in blocks if section == "## Set up"]
        setups[kind] = [c for c in commands(setup) if not c.startswith("export ")]
    # The set-up is one block for every provider but its key's export (test_wheel runs it).
    assert len({tuple(lines) for lines in setups.values()}) == 1, setups


# -- The launch lines of the model servers: flags checked by the package's own parser --------

# One process imports vLLM (tens of seconds) and runs the module once per argv given as JSON
# lists, each run reported as a JSON line: its exit code and what it wrote to stderr.
VLLM_DRIVER = """\
import contextlib, io, json, runpy, sys
import uvloop

def started(coroutine):  # the server would start now: its flags parsed and validated
    coroutine.close()
    argv = sys.argv[1:]
    if "--tool-call-parser" in argv:
        from vllm.tool_parsers.abstract_tool_parser import ToolParserManager
        name = argv[argv.index("--tool-call-parser") + 1]
        assert name in ToolParserManager.list_registered(), f"no tool-call parser {name}"
    print("vllm would serve", argv, file=sys.stderr)
    raise SystemExit(0)

uvloop.run = started
module, runs = sys.argv[1], json.loads(sys.argv[2])
for argv in runs:
    sys.argv = [module, *argv]
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0 if "vllm would serve" in errors.getvalue() else "returned without serving"
    except SystemExit as exit:
        code = exit.code
    except BaseException as exc:
        code = repr(exc)
    print(json.dumps({"argv": argv, "code": code, "stderr": errors.getvalue()[-3000:]}))
"""


def vllm_python() -> Path | None:
    """The Python of the vLLM venv scripts/vllm-server.sh prepared, if it did."""
    cache = Path(os.environ.get("HERMES_ENVGEN_CACHE", Path.home() / ".cache" / "hermes-envgen"))
    found = sorted((cache / "vllm").glob("venv-*/bin/python"))
    return found[0] if found else None


def launch_lines(project: Path, module: str) -> list[list[str]]:
    readme = (project / "README.md").read_text()
    lines = [c for _, block in bash_blocks(readme) for c in commands(block)]
    return [shlex.split(c)[3:] for c in lines if c.startswith(f"python -m {module} ")]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_vllm_launch_lines_parse_with_vllms_own_parser(readmes, tmp_path):
    python = vllm_python()
    if python is None:
        pytest.skip("no vLLM venv: scripts/vllm-server.sh prepare installs it")
    driver = tmp_path / "driver.py"
    driver.write_text(VLLM_DRIVER)
    module = "vllm.entrypoints.openai.api_server"
    runs = [
        (kind, argv) for kind, project in readmes.items() for argv in launch_lines(project, module)
    ]
    assert len(runs) == 3  # completions, chat, auto (Atropos's own server is not launched so)
    # The driver can fail: a flag vLLM does not have is refused (its run comes last).
    refused = ["--model", "m", "--no-such-flag"]
    result = subprocess.run(
        [str(python), str(driver), module, json.dumps([argv for _, argv in runs] + [refused])],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "ERROR"},
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    reports = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [r["argv"] for r in reports] == [argv for _, argv in runs] + [refused], result.stderr
    for (kind, argv), report in zip(runs, reports[:-1]):
        assert report["code"] == 0, f"{kind}: {argv}\n{report['stderr']}"
        assert "vllm would serve" in report["stderr"]
    assert reports[-1]["code"] != 0 and "--no-such-flag" in reports[-1]["stderr"], reports[-1]


def sglang_source(tmp_path: Path) -> Path | None:
    """SGLang's package, installed without dependencies from uv's cache (offline)."""
    uv = shutil.which("uv") or shutil.which("uv", path=str(Path(sys.executable).parent))
    if uv is None:
        return None
    target = tmp_path / "sglang"
    result = subprocess.run(
        [
            uv,
            "pip",
            "install",
            "--quiet",
            "--offline",
            "--no-deps",
            "--target",
            str(target),
            "sglang",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    return target / "sglang" if result.returncode == 0 else None


def sglang_options(package: Path) -> tuple[set[str], set[str]]:
    """The options SGLang's server takes and its tool-call parsers, read from its source.

    Importing SGLang needs torch and a GPU build. Its ``ServerArgs.add_cli_args`` adds an option
    per field of the dataclasses in ``srt/arg_groups/fields`` (``model_path``:
    ``--model-path``) and a few by ``add_argument``; the parsers are the keys of
    ``ToolCallParserEnum``.
    """
    files = [package / "srt" / "server_args.py", *(package / "srt").glob("arg_groups/fields/*.py")]
    options = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                options |= {
                    "--" + item.target.id.replace("_", "-")
                    for item in node.body
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                }
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                options |= {
                    arg.value
                    for arg in node.args
                    if isinstance(arg, ast.Constant) and str(arg.value).startswith("--")
                }
    parsers_file = next(package.rglob("function_call_parser.py")).read_text()
    mapping = re.search(r"ToolCallParserEnum[^=]*=\s*\{(.*?)\n\s*\}", parsers_file, re.S)
    parsers = set(re.findall(r'"([\w.-]+)":', mapping.group(1))) if mapping else set()
    return options, parsers


@pytest.mark.timeout(600)
def test_the_sglang_launch_lines_name_flags_sglang_has(readmes, tmp_path):
    package = sglang_source(tmp_path)
    if package is None:
        pytest.skip("SGLang is not in uv's cache (uv pip install --no-deps sglang fills it)")
    assert (package / "launch_server.py").is_file()  # `python -m sglang.launch_server`
    options, parsers = sglang_options(package)
    assert {"--model-path", "--port", "--tool-call-parser"} <= options and "qwen25" in parsers
    checked = 0
    for kind, project in readmes.items():
        for argv in launch_lines(project, "sglang.launch_server"):
            flags = [a for a in argv if a.startswith("--")]
            assert set(flags) <= options, f"{kind}: {set(flags) - options}"
            if "--tool-call-parser" in argv:
                assert argv[argv.index("--tool-call-parser") + 1] in parsers, kind
            checked += 1
    assert checked == 2  # generate, chat


# -- The Run block's commands, as written, against the stub on the README's port ------------


def port_is_free(port: int) -> bool:
    """Whether a server can listen on ``port`` (connections in TIME_WAIT do not stop one)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def hub_cache_with(root: Path, repo_id: str, tokenizer: Path) -> Path:
    """A Hugging Face hub cache that holds ``tokenizer`` as ``repo_id`` (read offline)."""
    model = root / ("models--" + repo_id.replace("/", "--"))
    snapshot = model / "snapshots" / ("0" * 40)
    shutil.copytree(tokenizer, snapshot)
    (model / "refs").mkdir()
    (model / "refs" / "main").write_text("0" * 40)
    # A repo without config.json, recorded as the hub client records a file a repo lacks.
    (model / ".no_exist" / ("0" * 40)).mkdir(parents=True)
    (model / ".no_exist" / ("0" * 40) / "config.json").write_text("")
    return root


def user_env(project: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """As run_as_a_user's: a user whose venv has hermes-envgen and the project, offline."""
    bin_dir = str(Path(sys.executable).parent)
    pythonpath = os.pathsep.join([str(project / "src"), os.environ.get("PYTHONPATH", "")])
    return {
        **os.environ,
        **OFFLINE,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHONPATH": pythonpath,
        **(extra or {}),
    }


# The projects whose Run blocks run here: the README's run-api line (atropos), OpenRouter, a
# chat-mode and a token-mode self-hosted server with a hub model id, a model on run-api's port.
RUNS = ["atropos", "openrouter", "sglang", "vllm-chat", "vllm-auto-port-8000"]


def local_port(url: str) -> int | None:
    match = re.match(r"https?://(localhost|127\.0\.0\.1):(\d+)", url or "")
    return int(match.group(2)) if match else None


@pytest.mark.slow
@pytest.mark.timeout(1500)
@pytest.mark.parametrize("kind", RUNS)
def test_the_run_block_runs_as_written_against_the_stub_and_serve_feeds_a_trainer(tmp_path, kind):
    import yaml

    from hermes_envgen.errors import StubServerError
    from hermes_envgen.testing import StubServer, build_offline_tokenizer, scripted_policy

    project = render(tmp_path, PROJECTS[kind])
    package = project.name.replace("-", "_")
    given = yaml.safe_load((project / ".copier-answers.yml").read_text())
    config = yaml.safe_load((project / "configs" / "default.yaml").read_text())
    readme = (project / "README.md").read_text()
    blocks = bash_blocks(readme)
    (setup,) = [b for section, b in blocks if section == "## Set up"]
    exports = [c.replace("=...", "=test-key") for c in commands(setup) if c.startswith("export ")]
    run_lines = [c for section, b in blocks if section == "## Run" for c in commands(b)]
    env_lines = [c for c in run_lines if kind_of(c, package) == "env"]
    assert [c.split()[3] for c in env_lines] == (
        ["serve", "process", "evaluate"] if kind == "atropos" else ["process", "evaluate", "serve"]
    )

    tokenizer = build_offline_tokenizer(tmp_path / "tokenizer")
    model = given.get("model_name") or "stub-model"
    hub = tmp_path / "hub"
    hub.mkdir()
    if given.get("tokenizer_name") or "/" in model:  # a repo id the env loads by name
        hub_cache_with(hub, given.get("tokenizer_name") or model, tokenizer)
    fill = {"TOKENIZER": str(tokenizer), "MODEL": "stub-model"}
    model_port = local_port(config["openai"]["base_url"])
    judge_port = local_port(given.get("judge_base_url") or "")
    serve = next(c for c in env_lines if " serve " in c)
    rollout_url = re.search(r"--env\.rollout_server_url (\S+)", serve)
    api_port = local_port(rollout_url.group(1)) if rollout_url else 8000
    fixed = [p for p in (model_port, judge_port, api_port) if p]
    samples = runpy.run_path(str(project / "src" / package / "samples.py"))["SAMPLES"]
    policy = scripted_policy(samples, judge=True)  # it plays the judge of a judge env too

    with readme_ports():
        if not all(port_is_free(p) for p in fixed):
            pytest.skip(f"a port the README names ({fixed}) is taken on this machine")
        stubs = []
        try:
            for port in {model_port or 0, judge_port or model_port or 0}:
                stubs.append(StubServer(policy, port=port, tokenizer=tokenizer).start())
        except StubServerError as exc:
            for stub in stubs:
                stub.stop()
            pytest.skip(f"a port the README names is taken: {exc}")
        try:
            script = []
            for command in env_lines:
                for placeholder, value in fill.items():
                    command = command.replace(placeholder, value)
                if model_port is None:  # OpenRouter: the one host this machine cannot reach
                    command += f" --openai.base_url {stubs[0].base_url}"
                if given.get("judge_base_url") not in (None, "", "policy") and not judge_port:
                    command += f" --env.judge_base_url {stubs[0].base_url}"  # its judge there
                script.append(command)
            env = user_env(project, {"HF_HUB_CACHE": str(hub)})
            offline_runs = "\n".join([*exports, *[c for c in script if " serve " not in c]])
            result = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", offline_runs],
                cwd=project,
                env=env,
                capture_output=True,
                text=True,
                timeout=900,
                stdin=subprocess.DEVNULL,
            )
            assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
            assert (project / "data" / "rollouts.jsonl").read_text().count("\n") == 10
            assert (project / "eval_results" / package / "metrics.json").is_file()

            # serve: the README's own run-api line where it has one, else run-api here
            own_api = [c for c in run_lines if kind_of(c, package) == "run-api"]
            serve_script = "\n".join(
                [*exports, *own_api, next(c for c in script if " serve " in c)]
            )
            groups = serve_feeds_a_trainer(
                project, serve_script, env, api_port, config["env"]["group_size"], own_api
            )
        finally:
            for stub in stubs:
                stub.stop()
    assert len(groups) == 1 and len(set(groups[0]["scores"])) > 1


def serve_feeds_a_trainer(
    project: Path, script: str, env: dict, port: int, group_size: int, own_api: list[str]
) -> list[dict]:
    """Run ``script`` (ending in serve) until a trainer at ``port`` got one batch of a group."""
    from hermes_envgen.testing.trainer import RunApi

    api = None if own_api else RunApi(port=port, log=project / "run-api.log").__enter__()
    log = open(project / "serve.log", "w")  # noqa: SIM115 (closed in the finally below)
    process = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=project,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # its run-api and serve end together
    )
    try:
        trainer = MinimalTrainer(f"http://127.0.0.1:{port}", batch_size=group_size)
        for _ in range(240):  # run-api may still be starting (the README's own line)
            try:
                trainer.register()
                break
            except TrainerError:
                assert process.poll() is None, (project / "serve.log").read_text()[-4000:]
                threading.Event().wait(0.5)
        try:
            trainer.next_batch(timeout=400)
        except TrainerError as exc:
            raise AssertionError(f"{exc}\n{(project / 'serve.log').read_text()[-4000:]}") from None
        return trainer.groups()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, 15)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait()
        log.close()
        if api is not None:
            api.__exit__()


# -- Other trainers: the doors' extras and the OpenEnv server's line --------------------------


def test_each_doors_install_line_names_an_extra_of_the_project_made_of_hermes_envgens(readmes):
    import tomllib

    ours = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    project = readmes["atropos"]
    extras = tomllib.loads((project / "pyproject.toml").read_text())["project"]
    blocks = bash_blocks((project / "README.md").read_text())
    named = {
        re.fullmatch(r"uv pip install -c constraints.txt -e '\.\[(\w+)\]'", command).group(1)
        for section, block in blocks
        if section in ("### TRL", "### OpenEnv", "### verifiers")
        for command in commands(block)
        if command.startswith("uv pip install")
    }
    assert named == {"trl", "openenv", "verifiers"}
    for extra in named:  # each the extra of hermes-envgen of that name
        assert f"hermes-envgen[{extra}]~=0.1" in extras["optional-dependencies"][extra]
        assert extra in ours


@contextlib.contextmanager
def readme_server(command: str, project: Path, env: dict, log_path: Path, port: int):
    """A server line of a generated README, run as written by bash in the project, until
    ``port`` is taken (its log is shown if it exits first); stopped when the block ends."""
    log = open(log_path, "w")  # noqa: SIM115 (closed in the finally below)
    server = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", command],
        cwd=project,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        for _ in range(240):
            assert server.poll() is None, log_path.read_text()[-4000:]
            if not port_is_free(port):
                break
            threading.Event().wait(0.25)
        yield
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_openenv_server_line_runs_as_written_and_serves_the_env(readmes, tmp_path):
    from helpers.doors import REQUIRE_VARIABLE

    from hermes_envgen.testing import build_offline_tokenizer

    if importlib.util.find_spec("openenv") is None:
        reason = "openenv-core is not installed (scripts/install-trainers.sh)"
        if os.environ.get(REQUIRE_VARIABLE) == "1":
            pytest.fail(f"{REQUIRE_VARIABLE}=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    from conftest import TRAINERS_DIRECTORY
    from openenv.core.env_server.mcp_types import CallToolAction
    from openenv.core.mcp_client import MCPToolClient

    project = readmes["atropos"]
    package = project.name.replace("-", "_")
    blocks = bash_blocks((project / "README.md").read_text())
    (line,) = [
        c
        for s, b in blocks
        if s == "### OpenEnv"
        for c in commands(b)
        if kind_of(c, package) == "openenv"
    ]
    tokenizer = build_offline_tokenizer(tmp_path / "tokenizer")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # the user's venv has the openenv extra: here, openenv-core from .venv-trl
    env = user_env(project)
    env["PYTHONPATH"] += os.pathsep + str(TRAINERS_DIRECTORY)
    env |= {"PORT": str(port), "TMPDIR": str(tmp_path)}
    command = line.replace("=TOKENIZER", f"={tokenizer}")

    async def give_up() -> tuple[dict, object]:
        async with MCPToolClient(base_url=f"http://127.0.0.1:{port}") as client:
            opened = (await client.reset()).observation.result
            action = CallToolAction(tool_name="finish", arguments={"answer": "I give up."})
            return opened, await client.step(action)

    with readme_server(command, project, env, tmp_path / "server.log", port):
        opened, finished = asyncio.run(give_up())
    assert opened["messages"][-1]["role"] == "user"
    assert finished.done and finished.reward == 0.0


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_verifiers_door_line_runs_as_written_and_serves_the_envs_tasks(readmes, tmp_path):
    import httpx

    from hermes_envgen.testing import build_offline_tokenizer

    project = readmes["atropos"]
    package = project.name.replace("-", "_")
    (line,) = [
        c
        for s, b in bash_blocks((project / "README.md").read_text())
        if s == "### verifiers"
        for c in commands(b)
        if kind_of(c, package) == "verifiers"
    ]
    tokenizer = build_offline_tokenizer(tmp_path / "tokenizer")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = f"{line.replace(' TOKENIZER', f' {tokenizer}')} --port {port}"
    env = user_env(project) | {"TMPDIR": str(tmp_path)}
    with readme_server(command, project, env, tmp_path / "door.log", port):
        tasks = httpx.get(f"http://127.0.0.1:{port}/tasks", timeout=60).json()["tasks"]
    assert tasks and all(task["prompt"][-1]["role"] == "user" for task in tasks)
