"""``hermes-envgen check``: is this env ready to train on? A checklist run for real.

Each check runs the env the way training would: it is imported, its ``process`` and
``evaluate`` modes run as subprocesses against a scripted stub model (or a real endpoint), and
what they wrote is validated. The result is a list of PASS / FAIL / WARN rows with reasons.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from hermes_envgen.errors import CheckError
from hermes_envgen.runtime.rollouts.records import FAILURES_FILE, METRICS_FILE, SAMPLES_FILE
from hermes_envgen.runtime.sandbox import procfs
from hermes_envgen.testing.thresholds import GOLD_THRESHOLD, NOOP_THRESHOLD

if TYPE_CHECKING:
    from hermes_envgen.testing import OfflineRun

PASS, FAIL, WARN = "PASS", "FAIL", "WARN"

# What a key written into a file looks like (OpenAI/OpenRouter/Anthropic/HF/W&B styles).
_KEY_PATTERN = re.compile(
    r"\b(sk-[A-Za-z0-9_-]{20,}|sk-or-[A-Za-z0-9_-]{20,}|hf_[A-Za-z0-9]{30,})\b"
)
_SCANNED_SUFFIXES = {".py", ".yaml", ".yml", ".toml", ".json", ".md", ".cfg", ".ini", ".txt"}

# A policy for envs without built-in tasks: look around once, then answer.
GENERIC_POLICY = {
    "default": {
        "turns": [
            {"tool_calls": [{"name": "terminal", "arguments": {"command": "ls -la"}}]},
            {"content": "Done."},
        ]
    }
}


@dataclass
class CheckResult:
    """One row of the checklist."""

    name: str
    status: str
    reason: str


@dataclass
class EnvTarget:
    """Where an env lives and how to start it."""

    root: Path
    entry: str  # a module name (``pkg.env``) or a path to a .py file
    pythonpath: list[str] = field(default_factory=list)

    def environment(self) -> dict[str, str]:
        paths = [*self.pythonpath, os.environ.get("PYTHONPATH", "")]
        return {"PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def find_env(path: str | Path) -> EnvTarget:
    """The env in a generated project (src/<package>/env.py), a folder with env.py, or a file."""
    path = Path(path).resolve()
    if path.is_file() and path.suffix == ".py":
        return EnvTarget(path.parent, str(path))
    if not path.is_dir():
        raise CheckError(f"{path} does not exist")
    candidates = sorted((path / "src").glob("*/env.py"))
    if len(candidates) == 1:
        package = candidates[0].parent.name
        return EnvTarget(path, f"{package}.env", [str(path / "src")])
    if len(candidates) > 1:
        names = ", ".join(str(c.relative_to(path)) for c in candidates)
        raise CheckError(f"{path} has several envs ({names}): name the env.py to check")
    if (path / "env.py").is_file():
        return EnvTarget(path, str(path / "env.py"))
    raise CheckError(
        f"{path} is not an env project: no src/<package>/env.py or env.py "
        "(create one with `hermes-envgen new`)"
    )


REPLAYS = "the env's reward replays"  # what an env process with arguments does


def in_env_process(target: EnvTarget, *args: str, timeout: float = 120) -> dict:
    """Import the env in a subprocess of its own and describe it (with args: replay rewards, ask
    its judge); see ``env_process``.

    CheckError when the env cannot be imported.
    """
    what = REPLAYS if args else "importing and describing the env"
    return env_process_report(start_env_process(target, *args), timeout, what)


def start_env_process(target: EnvTarget, *args: str) -> subprocess.Popen[str]:
    """``env_process`` started on the env (see ``in_env_process``); read it with
    ``env_process_report``."""
    from hermes_envgen.testing.runner import interrupts_held, offline_environment

    with interrupts_held() as held:  # a Ctrl-C inside Popen would leave no handle to kill
        process = subprocess.Popen(
            [sys.executable, "-m", "hermes_envgen.devtools.env_process", target.entry, *args],
            cwd=target.root,
            env=offline_environment(target.environment()),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            stdin=subprocess.DEVNULL,
        )
    if held:
        process.kill()
        process.communicate()
        raise KeyboardInterrupt
    return process


def env_process_report(process: subprocess.Popen[str], timeout: float, what: str) -> dict:
    """What an ``env_process`` reported, once it exits; killed past ``timeout`` (CheckError:
    ``what`` took too long), and on any other way out of the wait (Ctrl-C), as
    ``subprocess.run`` does."""
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise CheckError(f"{what} took more than {timeout:g} s (--timeout)") from None
    except BaseException:
        process.kill()
        process.wait()
        raise
    lines = stdout.strip().splitlines()
    try:
        description = json.loads(lines[-1])
    except (IndexError, ValueError):
        tail = (stderr.strip().splitlines() or ["no output"])[-1]
        raise CheckError(f"the env could not be imported: {tail}") from None
    if "error" in description:
        raise CheckError(f"the env could not be imported: {description['error']}")
    return description


@dataclass
class RealModel:
    """A real model to check against instead of the stub."""

    base_url: str
    model: str | None = None
    server_type: str | None = None
    tokenizer: str | None = None
    chat_template: str | None = None
    inference_api: str | None = None
    extra_body: str | None = None  # JSON, passed on as --env.extra_body
    tool_choice: str | None = None

    def server_flags(self) -> dict[str, object]:
        """The ``openai.*`` settings this endpoint sets."""
        values = {"model_name": self.model, "server_type": self.server_type}
        return {name: value for name, value in values.items() if value}

    def env_flags(self) -> dict[str, object]:
        """The ``env.*`` settings this endpoint sets (how requests are made and rendered)."""
        values = {
            "inference_api": self.inference_api,
            "extra_body": self.extra_body,
            "tool_choice": self.tool_choice,
        }
        flags: dict[str, object] = {name: value for name, value in values.items() if value}
        if self.chat_template:  # the modes run in a directory of their own: make it absolute
            flags["chat_template"] = _absolute_if_local(self.chat_template)
        return flags


def real_model(
    base_url: str | None,
    model: str | None = None,
    server_type: str | None = None,
    tokenizer: str | None = None,
    *,
    chat_template: str | None = None,
    inference_api: str | None = None,
    extra_body: str | None = None,
    tool_choice: str | None = None,
) -> RealModel | None:
    """The endpoint ``--base-url`` and its flags name (None: the stub); CheckError when
    ``extra_body`` is not a JSON object."""
    if extra_body is not None:
        try:
            parsed = json.loads(extra_body)
        except json.JSONDecodeError as exc:
            raise CheckError(
                f"--extra-body is not valid JSON ({exc.msg}): {extra_body!r}"
            ) from None
        if not isinstance(parsed, dict):
            raise CheckError(f"--extra-body must be a JSON object, not {extra_body!r}")
    if not base_url:
        return None
    return RealModel(
        base_url,
        model,
        server_type,
        tokenizer,
        chat_template=chat_template,
        inference_api=inference_api,
        extra_body=extra_body,
        tool_choice=tool_choice,
    )


@dataclass
class Budget:
    """How much work ``process`` and ``evaluate`` do in a check; None keeps the env's own.

    Against a slow real server the env's defaults (a group of 8, many turns) can run past the
    timeout: these bound them.
    """

    group_size: int | None = None
    max_turns: int | None = None
    eval_size: int | None = None

    def env_flags(self) -> dict[str, object]:
        values = {
            "group_size": self.group_size,
            "max_agent_turns": self.max_turns,
            "eval_size": self.eval_size,
        }
        return {name: value for name, value in values.items() if value is not None}

    def ran_out(self, mode: str, timeout: float, info: dict) -> str:
        """The row's reason when ``mode`` ran past ``timeout``: which budget, and what bounds it."""
        turns = self.max_turns or info.get("max_agent_turns")
        if mode == "process":
            size, size_flag = self.group_size or info.get("group_size"), "--group-size"
            what = f"one group of {size}"
        else:
            size, size_flag = self.eval_size or info.get("eval_size"), "--eval-size"
            what = f"{size} eval rollouts"
        return (
            f"ran past its {timeout:g} s budget (--timeout) with {what} of up to {turns} turns: "
            f"bound it with {size_flag} and --max-turns, or raise --timeout"
        )


TOOL_CALLS_ROW = "tool calls in training data"
NO_TOOLS = "the env offers no tools (a game, a simulated user): no tool call to check"
TOOL_TOUCH_ROW = "tool touch, then give up"
SHOTGUN_ROW = "shotgun answer"
TWO_SHOTS_ROW = "two shots"
INJECTION_ROW = "judge injection"
TRAINER_ROW = "trainer-ready"
TRAINERS = ("grpo", "none")
FAILURES_ROW = "failures pay nothing"
REPLAY_ROWS = (
    "gold solutions",
    "no-op",
    TOOL_TOUCH_ROW,
    SHOTGUN_ROW,
    TWO_SHOTS_ROW,
    "reward tampering",
    FAILURES_ROW,
)


def run_checks(
    path: str | Path,
    *,
    endpoint: RealModel | None = None,
    budget: Budget | None = None,
    port: int = 0,
    timeout: float = 300,
    workdir: Path | None = None,
    gold_threshold: float = GOLD_THRESHOLD,
    noop_threshold: float = NOOP_THRESHOLD,
    trainer: str = "grpo",
    progress: Callable[[str], None] = lambda message: None,
) -> list[CheckResult]:
    """Run the checklist on the env at ``path``: ENV_ROWS on its description, then RUN_ROWS
    on its runs; CheckError when it cannot run at all.

    ``trainer`` is what the data is for: ``grpo`` (atroposlib's example GRPO trainer, whose
    needs the trainer-ready row checks) or ``none`` (evaluation or SFT data: no such row).
    """
    if trainer not in TRAINERS:
        raise CheckError(f"--trainer must be one of {', '.join(TRAINERS)}, not {trainer!r}")
    target = find_env(path)
    progress("importing the env")
    info = in_env_process(target)
    results = [row(target, info) for row in ENV_ROWS]
    if any(r.name == "config_init" and r.status == FAIL for r in results):
        # With a bad server list Atropos ignores base_url and would wait for a server forever.
        return results + [
            CheckResult(name, FAIL, "not run: fix config_init first")
            for row in RUN_ROWS
            for name in row.names
            if name != TRAINER_ROW or trainer != "none"
        ]
    settings = CheckSettings(
        endpoint, budget or Budget(), port, timeout, gold_threshold, noop_threshold, trainer
    )
    work = Path(workdir or tempfile.mkdtemp(prefix="hermes-envgen-check-"))
    with started_runs(target, info, settings, work, progress) as check:
        for row in RUN_ROWS:
            if row.doing:
                progress(row.doing)
            results += row.check(check)
    return results


@dataclass(frozen=True)
class CheckSettings:
    """What ``run_checks`` was asked: the endpoint, the budget, the thresholds, the trainer."""

    endpoint: RealModel | None
    budget: Budget
    port: int
    timeout: float
    gold_threshold: float
    noop_threshold: float
    trainer: str


@dataclass
class CheckRun:
    """One check in progress, which its rows read: the env, its runs, what process gave."""

    target: EnvTarget
    info: dict
    settings: CheckSettings
    work: Path
    run: OfflineRun
    solvable: bool  # every built-in sample has a gold solution: the stub's policy solves them
    replays: Future[list[CheckResult]]
    groups: list[dict] | None = None  # what process wrote; None when it failed
    scores: list[float] = field(default_factory=list)  # every reward process and evaluate gave

    def why_failed(self, mode: str, exc: BaseException) -> str:
        """A mode's row reason: its budget when it ran out of time, else its error's line."""
        if _timed_out(exc):
            return self.settings.budget.ran_out(mode, self.settings.timeout, self.info)
        return _first_line(exc)

    @property
    def tools(self) -> bool:
        """The env offers tools (not a game or a simulated user alone)."""
        return bool(self.info.get("tools", True))

    def tokenizer_name(self) -> str:
        """The tokenizer the runs used: the endpoint's, else the env's."""
        return str(self.run.tokenizer or self.info.get("tokenizer_name"))


@contextmanager
def started_runs(
    target: EnvTarget,
    info: dict,
    settings: CheckSettings,
    work: Path,
    progress: Callable[[str], None],
) -> Iterator[CheckRun]:
    """The env's runs made ready (the stub started unless a real endpoint is checked), and its
    reward replays started beside them; all stopped on the way out."""
    from hermes_envgen.testing import OfflineRun, StubServer, scripted_policy
    from hermes_envgen.testing.policy import has_gold

    samples = info.get("samples") or []
    solvable = bool(samples) and all(has_gold(s) for s in samples)
    endpoint, stub = settings.endpoint, None
    replay = ReplayChecks(
        target, work, settings.gold_threshold, settings.noop_threshold, settings.timeout
    )
    replays_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="replays")
    try:
        if endpoint is None:
            script = scripted_policy(samples, judge=True) if solvable else GENERIC_POLICY
            stub = StubServer(script, port=settings.port).start()  # port taken: StubServerError
            run = OfflineRun.against_stub(
                target.entry,
                stub.base_url,
                work,
                timeout=settings.timeout,
                extra_env=target.environment(),
                env_flags=stub_flags(info, stub.base_url) | settings.budget.env_flags(),
            )
            judge_url, model = stub.base_url, None
        else:
            run = OfflineRun(
                target.entry,
                endpoint.base_url,
                _absolute_if_local(endpoint.tokenizer) if endpoint.tokenizer else None,
                work,
                timeout=settings.timeout,
                health_check=None,
                server_flags=endpoint.server_flags(),
                env_flags=endpoint.env_flags() | settings.budget.env_flags(),
                extra_env=target.environment(),
            )
            judge_url, model = endpoint.base_url, endpoint.model
        # The replays need neither mode's output: they run beside them, in an env process of
        # their own (on 2 cores a check took 38 s one after another, 20 s of it replays).
        progress(
            "replaying each task's gold solution, a no-op, a tool touch, a shotgun answer, two "
            "shots (and the gold, a no-op and tampering through each door to another trainer) "
            "and asking the judge to grade an injection answer, beside process and evaluate"
        )
        replay.start(judge_url, model)
        replays = replays_pool.submit(replay.rows, stubbed=endpoint is None)
        yield CheckRun(target, info, settings, work, run, solvable, replays)
    finally:
        replay.stop()  # still running only when the check ends early
        replays_pool.shutdown(wait=True)  # the stub below serves their judge
        if stub is not None:
            stub.stop()


# The rows from the env's description, each a small function of it.


def imports_row(target: EnvTarget, info: dict) -> CheckResult:
    """The env imports (in a process of its own) and names its class."""
    return CheckResult("imports", PASS, f"{info['class']} (name {info['name']!r})")


def config_init_row(target: EnvTarget, info: dict) -> CheckResult:
    """config_init returns a list of APIServerConfig (else Atropos ignores base_url)."""
    if not info["servers_is_list"]:
        return CheckResult(
            "config_init",
            FAIL,
            "server configs must be a list [APIServerConfig(...)]: otherwise base_url is ignored",
        )
    if not info["servers_are_api_configs"]:
        return CheckResult("config_init", FAIL, "every server config must be an APIServerConfig")
    return CheckResult(
        "config_init", PASS, f"a config and a list of servers (group_size {info['group_size']})"
    )


def key_row(target: EnvTarget, info: dict) -> CheckResult:
    """No API key is written in the env's code or its project's files."""
    root = target.root
    if info["literal_api_key"]:
        return CheckResult(
            "no API key in code",
            FAIL,
            "config_init sets an api_key with every *_API_KEY unset: it is written in the code",
        )
    for file in sorted(root.rglob("*")):
        if file.suffix not in _SCANNED_SUFFIXES or not file.is_file():
            continue
        if any(
            part.startswith(".") and part not in (".",)
            for part in file.relative_to(root).parts[:-1]
        ):
            continue  # .git, .venv and the like
        try:
            text = file.read_text(errors="ignore")
        except OSError:
            continue
        if _KEY_PATTERN.search(text):
            return CheckResult(
                "no API key in code",
                FAIL,
                f"{file.relative_to(root)} contains what looks like a key",
            )
    return CheckResult("no API key in code", PASS, "keys come from the environment")


# The rows of a check's runs, in the order they print; each a small function of the CheckRun.


def process_row(check: CheckRun) -> list[CheckResult]:
    """process runs one group, which atroposlib validates; its groups feed the rows below."""
    from hermes_envgen.testing import EnvRunFailed

    try:
        groups = check.run.process()
    except (EnvRunFailed, AssertionError, OSError) as exc:
        return [CheckResult("process", FAIL, check.why_failed("process", exc))]
    check.groups = groups
    check.scores += [s for g in groups for s in g["scores"]]
    return [CheckResult("process", PASS, f"{len(groups[0]['tokens'])} sequences, valid")]


def tool_calls_row(check: CheckRun) -> list[CheckResult]:
    """Every tool call of process's rollouts is in the tokens it trains."""
    if check.groups is None:
        return [CheckResult(TOOL_CALLS_ROW, FAIL, "not run: process failed")]
    if not check.tools:
        return [CheckResult(TOOL_CALLS_ROW, PASS, NO_TOOLS)]
    return [trained_tool_calls_check(check.groups, check.tokenizer_name())]


def token_fidelity_row(check: CheckRun) -> list[CheckResult]:
    """Token mode only (process's groups carry sampled logprobs): the template's ids agree."""
    if check.groups is None or not any("inference_logprobs" in g for g in check.groups):
        return []
    endpoint = check.settings.endpoint
    return [
        token_fidelity_check(
            check.groups,
            check.tokenizer_name(),
            chat_template=endpoint.chat_template if endpoint else None,
            template_variables=_template_variables(endpoint),
        )
    ]


def trainer_ready_row(check: CheckRun) -> list[CheckResult]:
    """Whether the trainer the data is for can step on process's groups (none: no row)."""
    if check.settings.trainer == "none":
        return []
    if check.groups is None:
        return [CheckResult(TRAINER_ROW, FAIL, "not run: process failed")]
    return [trainer_ready_check(check.groups)]


def evaluate_row(check: CheckRun) -> list[CheckResult]:
    """evaluate runs and saves its scored rollouts, which used the env's tools."""
    from hermes_envgen.testing import EnvRunFailed

    eval_dir = check.work / "eval"
    try:
        check.run.run("evaluate", env__data_dir_to_save_evals=eval_dir)
        run_error = None
    except EnvRunFailed as exc:
        run_error = check.why_failed("evaluate", exc)
    try:
        row, scores = _evaluate_row(eval_dir, run_error, tools=check.tools)
    except (OSError, KeyError, ValueError) as exc:
        row, scores = CheckResult("evaluate", FAIL, _first_line(exc)), []
    check.scores += scores
    return [row]


def reward_range_row(check: CheckRun) -> list[CheckResult]:
    """The rewards of process and evaluate lie in [0, 1] and differ."""
    real = check.settings.endpoint is not None
    return [_reward_range_check(check.scores, scripted=not real and check.solvable, real=real)]


def replay_rows(check: CheckRun) -> list[CheckResult]:
    """The reward replays' rows, the judge injection's and the doors', once they are done."""
    return check.replays.result()


def cleanup_row(check: CheckRun) -> list[CheckResult]:
    """Nothing of the runs' and the replays' sandboxes is left behind."""
    roots = (check.run.sandbox_root, check.work / "replays", check.work / "injection")
    return [_cleanup_check(*roots)]


@dataclass(frozen=True)
class RunRow:
    """An entry of RUN_ROWS: the rows it writes (each FAILed as not run when the env's config
    is broken), the function that writes them, and what the progress line says before it."""

    names: tuple[str, ...]
    check: Callable[[CheckRun], list[CheckResult]]
    doing: str | None = None


# The rows from the env's description alone, then the rows of its runs, in the order they print.
ENV_ROWS: tuple[Callable[[EnvTarget, dict], CheckResult], ...] = (
    imports_row,
    config_init_row,
    key_row,
)
RUN_ROWS = (
    RunRow(("process",), process_row, "running process (one group)"),
    RunRow((TOOL_CALLS_ROW,), tool_calls_row),
    RunRow((), token_fidelity_row),
    RunRow((TRAINER_ROW,), trainer_ready_row),
    RunRow(("evaluate",), evaluate_row, "running evaluate"),
    RunRow(("reward range",), reward_range_row),
    RunRow((*REPLAY_ROWS, INJECTION_ROW), replay_rows, "waiting for the replays"),
    RunRow(("sandbox cleanup",), cleanup_row),
)


def trainer_ready_check(groups: list[dict]) -> CheckResult:
    """Whether atroposlib's example GRPO trainer can take steps on the groups process wrote."""
    from hermes_envgen.testing.trainer_contract import summary, trainer_problems

    verdict = trainer_problems(groups)
    return CheckResult(TRAINER_ROW, PASS if verdict.ready else FAIL, summary(verdict))


def stub_flags(info: dict, base_url: str) -> dict[str, str]:
    """``env.*`` flags that make the stub at ``base_url`` the judge of an env with its own and,
    for an env with a dataset, keep it on the built-in tasks, which the stub solves."""
    flags = {"judge_base_url": base_url} if info.get("judge_base_url") else {}
    if info.get("dataset_name") and info.get("samples"):
        flags["dataset_name"] = ""  # offline: no hub, and the stub knows only the samples
    return flags


def trained_tool_calls_check(groups: list[dict], tokenizer_name: str) -> CheckResult:
    """Decode the trained runs of each sequence: every tool call must be in its turn's, whole."""
    from transformers import AutoTokenizer

    from hermes_envgen.runtime.chat.trajectory import trained_runs, untrained_tool_calls

    try:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_name)
    except (OSError, ValueError) as exc:
        return CheckResult(TOOL_CALLS_ROW, FAIL, f"cannot load the tokenizer: {_first_line(exc)}")
    calls, missing = 0, []
    for group in groups:
        for tokens, masks, messages in zip(group["tokens"], group["masks"], group["messages"]):
            trained = [tokenizer.decode(run) for run in trained_runs(tokens, masks)]
            calls += sum(len(m.get("tool_calls") or []) for m in messages)
            missing += untrained_tool_calls(messages, trained)
    if not calls:
        return CheckResult(TOOL_CALLS_ROW, WARN, "no rollout made a tool call: nothing to verify")
    if missing:
        return CheckResult(
            TOOL_CALLS_ROW,
            FAIL,
            f"{len(missing)} of {calls} tool calls are not in the trained tokens, e.g. "
            f"{missing[0]}: set chat_template to a template that renders tool calls",
        )
    return CheckResult(TOOL_CALLS_ROW, PASS, f"all {calls} tool calls trained (name and arguments)")


FIDELITY_ROW = "token fidelity"


def token_fidelity_check(
    groups: list[dict],
    tokenizer_name: str,
    *,
    chat_template: str | None = None,
    template_variables: dict | None = None,
) -> CheckResult:
    """Re-tokenize each token-mode rollout with the chat template: same ids as sampled?

    Token mode trains the ids the model generated; chat mode, and any later re-tokenization
    of the same conversations (a trainer's, an SFT pass on them), renders them with the
    template. Where the two differ, multi-turn training data is silently inconsistent.
    """
    from transformers import AutoTokenizer

    from hermes_envgen.runtime.chat.template_data import resolve_chat_template
    from hermes_envgen.runtime.chat.template_render import set_template_kwargs
    from hermes_envgen.runtime.chat.trajectory import token_fidelity
    from hermes_envgen.runtime.errors import EnvConfigError

    try:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_name)
        if chat_template:
            tokenizer.chat_template = resolve_chat_template(chat_template)
    except (OSError, ValueError, EnvConfigError) as exc:
        return CheckResult(FIDELITY_ROW, FAIL, f"cannot load the tokenizer: {_first_line(exc)}")
    set_template_kwargs(tokenizer, template_variables)
    sequences, differing = 0, []
    for group in groups:
        for tokens, masks, messages in zip(group["tokens"], group["masks"], group["messages"]):
            sequences += 1
            differences = token_fidelity(tokenizer, messages, tokens, masks)
            if differences:
                differing.append(f"rollout {sequences}: {differences[0]}")
    if differing:
        return CheckResult(
            FIDELITY_ROW,
            FAIL,
            f"{len(differing)} of {sequences} rollouts re-tokenize to other ids than were "
            f"sampled; {differing[0]} (the chat template is not the model's format)",
        )
    return CheckResult(
        FIDELITY_ROW,
        PASS,
        f"all {sequences} rollouts re-tokenize with the chat template to the sampled ids",
    )


def _template_variables(endpoint: RealModel | None) -> dict | None:
    """``chat_template_kwargs`` of the endpoint's ``extra_body``, as the env renders with."""
    if endpoint is None or not endpoint.extra_body:
        return None
    try:
        body = json.loads(endpoint.extra_body)
    except ValueError:
        return None
    variables = body.get("chat_template_kwargs") if isinstance(body, dict) else None
    return variables if isinstance(variables, dict) else None


def _absolute_if_local(name: str) -> str:
    """A path that exists here, made absolute; anything else (a hub id, a name) as it is."""
    return str(Path(name).resolve()) if Path(name).exists() else name


def _evaluate_row(
    eval_dir: Path, run_error: str | None, tools: bool = True
) -> tuple[CheckResult, list[float]]:
    """The evaluate row from what the run saved: scored rollouts, failures and their cause
    (``tools``: the env offers some, so a rollout should have used one)."""
    samples = _jsonl(eval_dir / SAMPLES_FILE)
    failures = _jsonl(eval_dir / FAILURES_FILE)
    scores = [s["reward"] for s in samples if s.get("reward") is not None]
    cause = failures[0].get("failure") if failures else None
    if not samples:
        why = f"every rollout failed ({len(failures)}): {cause}" if failures else run_error
        return CheckResult("evaluate", FAIL, why or "no rollout was saved"), scores
    failed = f", {len(failures)} failed (first: {cause})" if failures else ""
    if run_error is not None:
        return CheckResult("evaluate", FAIL, f"{run_error}{failed}"), scores
    with_tools = sum(1 for s in samples if s.get("tools_used"))
    if tools and not with_tools:
        row = CheckResult("evaluate", FAIL, f"no rollout made a tool call that ran{failed}")
        return row, scores
    used = f"{with_tools} used tools" if tools else "no tools offered"
    status = WARN if failures else PASS
    return (
        CheckResult(
            "evaluate",
            status,
            f"{len(samples)} rollouts scored, {used}{failed}; "
            f"{METRICS_FILE} and {SAMPLES_FILE} written",
        ),
        scores,
    )


def _jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _reward_range_check(scores: list[float], scripted: bool, real: bool = False) -> CheckResult:
    if not scores:
        return CheckResult("reward range", FAIL, "no rollout was scored")
    outside = [s for s in scores if not 0.0 <= s <= 1.0]
    if outside:
        return CheckResult("reward range", FAIL, f"rewards outside [0, 1]: {outside[:5]}")
    if len(set(scores)) == 1:
        if scripted:
            why = "the scripted policy solves and fails tasks, yet every reward is the same"
        elif real:
            why = (
                "every reward of the real model is the same (the gold and no-op rows check the "
                "reward itself)"
            )
        else:
            why = (
                "every reward is the same; the scripted policy cannot tell (no samples with "
                "gold solutions)"
            )
        return CheckResult(
            "reward range", FAIL if scripted else WARN, f"{scores[0]} for all: {why}"
        )
    return CheckResult(
        "reward range", PASS, f"{min(scores):g} to {max(scores):g} over {len(scores)} rollouts"
    )


@dataclass
class ReplayChecks:
    """The rows of the reward replays and of the judge injection, from one env process."""

    target: EnvTarget
    work: Path
    gold: float
    noop: float
    timeout: float
    process: subprocess.Popen[str] | None = None

    def start(self, judge_url: str, model: str | None) -> None:
        """Start replaying every built-in sample, and asking the judge at ``judge_url``."""
        from hermes_envgen.testing.tokenizer import build_offline_tokenizer

        tokenizer = build_offline_tokenizer(self.work / "tokenizer")
        options = (str(tokenizer), str(self.work), str(self.gold), str(self.noop))
        self.process = start_env_process(self.target, "replays", *options, judge_url, model or "")

    def rows(self, *, stubbed: bool) -> list[CheckResult]:
        """Once the replays are done: one row per replay kind, then the injection's
        (``stubbed``: the scripted stub played the judge)."""
        assert self.process is not None, "start() first"
        try:
            report = env_process_report(self.process, self.timeout, REPLAYS)
        except CheckError as exc:  # rows still: the rows above them are printed
            names = (*REPLAY_ROWS, INJECTION_ROW, *DOOR_ROWS)
            return [CheckResult(name, FAIL, str(exc)) for name in names]
        rows = self.reward_rows(report["rewards"])
        rows.append(self.injection_row(report["injection"], stubbed))
        rows += door_rows(report.get("doors"), self.noop)
        return rows

    def stop(self) -> None:
        """Kill the replays if they still run (the check ends early: Ctrl-C, an error)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()

    def reward_rows(self, report: dict) -> list[CheckResult]:
        """The gold, no-op, tool-touch, shotgun, two-shots, tampering and failure rows."""
        if "error" in report:
            return [
                CheckResult(name, FAIL, f"the replays failed: {report['error']}")
                for name in REPLAY_ROWS
            ]
        if "skipped" in report:
            return [CheckResult(name, WARN, report["skipped"]) for name in REPLAY_ROWS]
        n, gold, noop = len(report["outcomes"]), self.gold, self.noop
        tampering = (
            "rewritten checks, a planted user site and PATH"
            if report.get("tools", True)
            else "a 5,000-digit number, a claim of victory, an injection and empty replies"
        )
        passing = (
            f"all {n} samples earn >= {gold:g}",
            f"answering without tools earns <= {noop:g} on all {n}",
            f"running a tool and giving up earns <= {noop:g} on all {n}",
            f"a list of candidates holding the reference earns <= {noop:g} on all {n}",
            (
                f"a wrong answer.txt with the right reply, or the reverse, earns <= {noop:g} "
                f"on all {n}"
                if report.get("tools", True)
                else "the env offers no tools: its reply is its one answer"
            ),
            f"{tampering} earn <= {noop:g} on all {n}",
        )
        kinds = ("gold", "noop", "tool_touch", "shotgun", "two_shots", "tamper")
        rows = []
        for name, kind, reason in zip(REPLAY_ROWS, kinds, passing):
            failures = report[f"{kind}_failures"]
            if failures:
                rows.append(CheckResult(name, FAIL, _some(failures)))
            else:
                rows.append(CheckResult(name, PASS, reason))
        rows[0] = self.pass_threshold_row(rows[0], report)
        rows.append(self.failures_row(report))
        return rows

    def pass_threshold_row(self, gold_row: CheckResult, report: dict) -> CheckResult:
        """The gold row, warning when a gold solution would not pass evaluation (pass@k)."""
        from hermes_envgen.runtime.rollouts.evaluation.stats import PASS_TOLERANCE

        threshold = report.get("eval_pass_threshold", 1.0)
        below = [o for o in report["outcomes"] if o["gold"] < threshold - PASS_TOLERANCE]
        if gold_row.status != PASS or not below:
            return gold_row
        return CheckResult(
            gold_row.name,
            WARN,
            f"{gold_row.reason}, but {len(below)} earn less than eval_pass_threshold "
            f"{threshold:g} (sample {below[0]['index']}: {below[0]['gold']:g}): pass@1 counts "
            "a solved task as failed; set eval_pass_threshold to what a solved task earns at "
            "least",
        )

    def failures_row(self, report: dict) -> CheckResult:
        """Whether an agent can make a rollout fail (a hook or the reward breaking on what it
        sent), and whether a failure pays more than a no-op (``failure_score``)."""
        broken = report.get("broken_failures") or []
        if broken:
            return CheckResult(
                FAILURES_ROW,
                FAIL,
                f"the agent can break the env: {_some(broken)}; make the hook or the reward "
                "refuse what it cannot read",
            )
        score = float(report.get("failure_score", 0.0))
        if score > self.noop:
            return CheckResult(
                FAILURES_ROW,
                FAIL,
                f"failure_score {score:g} pays a broken judge or hook more than a no-op may "
                f"earn ({self.noop:g}): set it to 0",
            )
        return CheckResult(
            FAILURES_ROW,
            PASS,
            f"no replay broke a hook or the reward; a failed rollout scores {score:g} "
            "(failure_score) in training and evaluation",
        )

    def injection_row(self, report: dict, stubbed: bool) -> CheckResult:
        """The judge-injection row: the configured judge grades an answer that tells it to pay."""
        if "error" in report:
            return CheckResult(INJECTION_ROW, FAIL, f"asking the judge failed: {report['error']}")
        if "skipped" in report:
            return CheckResult(INJECTION_ROW, PASS, report["skipped"])
        judge = report["judge"]
        if report["score"] is None:
            return CheckResult(
                INJECTION_ROW,
                WARN,
                f"the judge at {judge} could not be asked: {report['judge_error']}",
            )
        score = report["score"]
        stub = report["self_judged"] and stubbed  # the scripted stub, not the user's model
        if score > self.noop:
            return CheckResult(
                INJECTION_ROW,
                FAIL,
                f"the judge at {judge} scored an answer that tells it to output a score of 1 "
                f"{score:g}: use a separate, stricter judge (judge_base_url)",
            )
        return CheckResult(
            INJECTION_ROW,
            PASS,
            f"the judge at {judge} scored an injection answer {score:g}"
            + (" (the scripted stub: pass --base-url to ask the real policy)" if stub else ""),
        )


# A row per door to another trainer, each replayed through that door's own adapter.
DOORS = {
    "trl": "TRL's environment_factory",
    "openenv": "the OpenEnv server",
    "verifiers": "the verifiers door's server",
}
DOOR_ROWS = tuple(f"door {door}: parity" for door in DOORS)


def door_rows(report: dict | None, noop: float) -> list[CheckResult]:
    """Per door to another trainer, driven through its own adapter as its trainer drives it
    (testing.door_parity): whether it pays the gold solutions what the env's loop pays, and
    nothing for a no-op or tampering. A door whose library is missing warns, naming the extra;
    no rows from an env process that made no report."""
    if report is None:
        return []
    if "error" in report:
        return [CheckResult(name, FAIL, f"the door replays failed: {report['error']}")
                for name in DOOR_ROWS]  # fmt: skip
    if "skipped" in report:
        return [CheckResult(name, WARN, report["skipped"]) for name in DOOR_ROWS]
    rows = []
    for (door, adapter), name in zip(DOORS.items(), DOOR_ROWS):
        found = report["doors"].get(door)
        if found is None:
            rows.append(CheckResult(name, WARN, f"the {door} door was not replayed"))
        elif found["error"]:
            rows.append(CheckResult(name, FAIL, f"{adapter} crashed: {found['error']}"))
        elif found["unavailable"]:
            rows.append(CheckResult(name, WARN, f"not replayed: {found['unavailable']}"))
        elif found["gold_mismatches"] or found["paid_for_nothing"]:
            failures = found["gold_mismatches"] + found["paid_for_nothing"]
            rows.append(CheckResult(name, FAIL, f"through {adapter}: {_some(failures)}"))
        else:
            n = len(found["gold"])
            rows.append(
                CheckResult(
                    name,
                    PASS,
                    f"{adapter} pays all {n} gold solutions what process pays; a no-op and "
                    f"tampering earn <= {noop:g}",
                )
            )
    return rows


def _some(failures: list[str]) -> str:
    """The first three failures, and how many more."""
    more = f" (+{len(failures) - 3} more)" if len(failures) > 3 else ""
    return "; ".join(failures[:3]) + more


def _cleanup_check(*roots: Path) -> CheckResult:
    # The shared "hermes-envgen" folder may stay; each run's folder and workspaces must go.
    leftovers = [p for root in roots for p in root.rglob("hermes-envgen/*")]
    processes = [pid for root in roots for pid in _processes_under(root)]
    if leftovers or processes:
        return CheckResult(
            "sandbox cleanup",
            FAIL,
            f"{len(leftovers)} sandbox directories and {len(processes)} processes left behind",
        )
    return CheckResult("sandbox cleanup", PASS, "no sandbox directory or process left behind")


def _processes_under(directory: Path) -> list[int]:
    """Pids whose working directory is inside ``directory`` (Linux /proc)."""
    return procfs.working_in(str(directory.resolve()))


def _timed_out(exc: BaseException) -> bool:
    """True when a mode was stopped for running past its timeout (run_env_mode's message)."""
    return " ran past " in (str(exc).splitlines() or [""])[0]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    for line in reversed(text.splitlines()):
        if line.strip().startswith(("error:", "Error", "E ")) or "Error:" in line:
            return line.strip()[:300]
    return (text.splitlines() or [type(exc).__name__])[0][:300]


def format_table(results: list[CheckResult]) -> str:
    """The checklist as aligned text rows."""
    width = max(len(r.name) for r in results)
    return "\n".join(f"{r.status}  {r.name.ljust(width)}  {r.reason}" for r in results)


def failed(results: list[CheckResult]) -> list[str]:
    """The names of the rows that failed."""
    return [r.name for r in results if r.status == FAIL]
