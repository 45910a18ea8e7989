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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from hermes_envgen.errors import CheckError
from hermes_envgen.runtime.records import FAILURES_FILE, METRICS_FILE, SAMPLES_FILE
from hermes_envgen.runtime.sandbox import procfs
from hermes_envgen.testing.thresholds import GOLD_THRESHOLD, NOOP_THRESHOLD

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
    """Run the checklist on the env at ``path``; CheckError when it cannot run at all.

    ``trainer`` is what the data is for: ``grpo`` (atroposlib's example GRPO trainer, whose
    needs the trainer-ready row checks) or ``none`` (evaluation or SFT data: no such row).
    """
    from hermes_envgen.testing import (
        EnvRunFailed,
        OfflineRun,
        StubServer,
        scripted_policy,
    )
    from hermes_envgen.testing.policy import has_gold

    budget = budget or Budget()
    target = find_env(path)
    progress("importing the env")
    info = in_env_process(target)
    results = [CheckResult("imports", PASS, f"{info['class']} (name {info['name']!r})")]
    results.append(_config_init_check(info))
    results.append(_key_check(target.root, info))
    if results[1].status == FAIL:
        # With a bad server list Atropos ignores base_url and would wait for a server forever.
        skipped = "not run: fix config_init first"
        names: tuple[str, ...] = ("process", TOOL_CALLS_ROW)
        names += (TRAINER_ROW,) if trainer != "none" else ()
        names += ("evaluate", "reward range", *REPLAY_ROWS, INJECTION_ROW, "sandbox cleanup")
        return results + [CheckResult(name, FAIL, skipped) for name in names]

    samples = info.get("samples") or []
    solvable = bool(samples) and all(has_gold(s) for s in samples)
    script = scripted_policy(samples, judge=True) if solvable else GENERIC_POLICY
    work = Path(workdir or tempfile.mkdtemp(prefix="hermes-envgen-check-"))
    stub = None
    replay = ReplayChecks(target, work, gold_threshold, noop_threshold, timeout)
    replays_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="replays")
    try:
        if endpoint is None:
            stub = StubServer(script, port=port).start()  # a port taken: StubServerError
            run = OfflineRun.against_stub(
                target.entry,
                stub.base_url,
                work,
                timeout=timeout,
                extra_env=target.environment(),
                env_flags=stub_flags(info, stub.base_url) | budget.env_flags(),
            )
        else:
            run = OfflineRun(
                target.entry,
                endpoint.base_url,
                _absolute_if_local(endpoint.tokenizer) if endpoint.tokenizer else None,
                work,
                timeout=timeout,
                health_check=None,
                server_flags=endpoint.server_flags(),
                env_flags=endpoint.env_flags() | budget.env_flags(),
                extra_env=target.environment(),
            )

        if endpoint is not None:
            judge_url, model = endpoint.base_url, endpoint.model
        else:
            assert stub is not None  # started above when there is no endpoint
            judge_url, model = stub.base_url, None
        # The replays need neither mode's output: they run beside them, in an env process of
        # their own (on 2 cores a check took 38 s one after another, 20 s of it replays).
        progress(
            "replaying each task's gold solution, a no-op, a tool touch, a shotgun answer, two "
            "shots and asking the judge to grade an injection answer, beside process and evaluate"
        )
        replay.start(judge_url, model)
        replays = replays_pool.submit(replay.rows, stubbed=endpoint is None)
        scores: list[float] = []
        progress("running process (one group)")
        try:
            groups = run.process()
            scores += [s for g in groups for s in g["scores"]]
            results.append(
                CheckResult("process", PASS, f"{len(groups[0]['tokens'])} sequences, valid")
            )
            tokenizer = run.tokenizer or info.get("tokenizer_name")
            if info.get("tools", True):
                results.append(trained_tool_calls_check(groups, str(tokenizer)))
            else:
                results.append(CheckResult(TOOL_CALLS_ROW, PASS, NO_TOOLS))
            if any("inference_logprobs" in g for g in groups):  # token mode: sampled ids
                results.append(
                    token_fidelity_check(
                        groups,
                        str(tokenizer),
                        chat_template=endpoint.chat_template if endpoint else None,
                        template_variables=_template_variables(endpoint),
                    )
                )
            if trainer != "none":
                results.append(trainer_ready_check(groups))
        except (EnvRunFailed, AssertionError, OSError) as exc:
            why = budget.ran_out("process", timeout, info) if _timed_out(exc) else _first_line(exc)
            results.append(CheckResult("process", FAIL, why))
            results.append(CheckResult(TOOL_CALLS_ROW, FAIL, "not run: process failed"))
            if trainer != "none":
                results.append(CheckResult(TRAINER_ROW, FAIL, "not run: process failed"))

        progress("running evaluate")
        eval_dir = work / "eval"
        try:
            run.run("evaluate", env__data_dir_to_save_evals=eval_dir)
            eval_failure = None
        except EnvRunFailed as exc:
            eval_failure = (
                budget.ran_out("evaluate", timeout, info) if _timed_out(exc) else _first_line(exc)
            )
        try:
            row, eval_scores = _evaluate_row(eval_dir, eval_failure, tools=info.get("tools", True))
        except (OSError, KeyError, ValueError) as exc:
            row, eval_scores = CheckResult("evaluate", FAIL, _first_line(exc)), []
        results.append(row)
        scores += eval_scores

        results.append(
            _reward_range_check(scores, scripted=endpoint is None and solvable, real=bool(endpoint))
        )
        progress("waiting for the replays")
        results += replays.result()
        results.append(_cleanup_check(run.sandbox_root, work / "replays", work / "injection"))
    finally:
        replay.stop()  # still running only when the check ends early
        replays_pool.shutdown(wait=True)  # the stub below serves their judge
        if stub is not None:
            stub.stop()
    return results


TOOL_CALLS_ROW = "tool calls in training data"
NO_TOOLS = "the env offers no tools (a game, a simulated user): no tool call to check"
TOOL_TOUCH_ROW = "tool touch, then give up"
SHOTGUN_ROW = "shotgun answer"
TWO_SHOTS_ROW = "two shots"
INJECTION_ROW = "judge injection"
TRAINER_ROW = "trainer-ready"
TRAINERS = ("grpo", "none")


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

    from hermes_envgen.runtime.trajectory import trained_runs, untrained_tool_calls

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

    from hermes_envgen.runtime.errors import EnvConfigError
    from hermes_envgen.runtime.template_data import resolve_chat_template
    from hermes_envgen.runtime.template_render import set_template_kwargs
    from hermes_envgen.runtime.trajectory import token_fidelity

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


def _config_init_check(info: dict) -> CheckResult:
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


def _key_check(root: Path, info: dict) -> CheckResult:
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
            return [CheckResult(name, FAIL, str(exc)) for name in (*REPLAY_ROWS, INJECTION_ROW)]
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
        from hermes_envgen.runtime.evaluation.stats import PASS_TOLERANCE

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


DOOR_ROWS = ("doors: gold parity", "doors: no-op and tampering")


def door_rows(report: dict | None, noop: float) -> list[CheckResult]:
    """Whether the session every door to another trainer runs (TRL's environment_factory, the
    OpenEnv server, the verifiers taskset's server) pays the gold solutions what the env's loop
    pays, and nothing for a no-op or tampering (testing.door_parity); no rows from an env
    process that made no report."""
    if report is None:
        return []
    if "error" in report:
        return [CheckResult(name, FAIL, f"the door replays failed: {report['error']}")
                for name in DOOR_ROWS]  # fmt: skip
    if "skipped" in report:
        return [CheckResult(name, WARN, report["skipped"]) for name in DOOR_ROWS]
    n = len(report["session_gold"])
    rows = []
    for name, failures, passing in (
        (DOOR_ROWS[0], report["gold_mismatches"],
         f"a session (TRL, OpenEnv, verifiers) pays all {n} gold solutions what process pays"),
        (DOOR_ROWS[1], report["paid_for_nothing"],
         f"through a session, a no-op and tampering earn <= {noop:g} on all {n}"),
    ):  # fmt: skip
        if failures:
            rows.append(CheckResult(name, FAIL, _some(failures)))
        else:
            rows.append(CheckResult(name, PASS, passing))
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
