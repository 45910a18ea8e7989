"""The ``hermes-envgen`` command line. Each command is a thin call into a module elsewhere.

Heavy imports (atroposlib, transformers, copier) happen inside the commands, so ``--help``
starts fast.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
from typer.core import TyperGroup

from hermes_envgen.testing.thresholds import GOLD_THRESHOLD, NOOP_THRESHOLD

if TYPE_CHECKING:  # the Click that Typer carries (TyperGroup's own signature)
    from typer._click import Context, HelpFormatter

# The sections of --help, in this order; each command names its own.
MAKE, RUN, TEST_KIT, MAINTENANCE = "Make", "Run and check", "Test kit", "Maintenance"
PANELS = (MAKE, RUN, TEST_KIT, MAINTENANCE)
# Within a section, what people reach for first comes first.
FIRST = ("new", "update", "demo", "check", "reach", "view", "parsers")


class SectionedHelp(TyperGroup):
    """``--help`` with the commands in sections (Make first), in Click's plain text."""

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {panel: [] for panel in PANELS}
        commands = [(name, self.get_command(ctx, name)) for name in self.list_commands(ctx)]
        shown = [(name, c) for name, c in commands if c is not None and not c.hidden]
        # As Click does: each summary fits on the line beside the longest name.
        limit = formatter.width - 6 - max((len(name) for name, _ in shown), default=0)
        for name, command in shown:
            panel = getattr(command, "rich_help_panel", None) or MAINTENANCE
            sections.setdefault(panel, []).append((name, command.get_short_help_str(limit)))
        for panel, rows in sections.items():
            rows.sort(key=lambda row: FIRST.index(row[0]) if row[0] in FIRST else len(FIRST))
            if rows:
                with formatter.section(panel):
                    formatter.write_dl(rows)


app = typer.Typer(
    cls=SectionedHelp,
    name="hermes-envgen",
    help="Generate, run and test multi-turn, tool-using RL environments for Atropos.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Click's plain help: Typer's rich panels label every flag (--help too) with a bogus <bool>.
    rich_markup_mode=None,
)


F = TypeVar("F", bound=Callable[..., Any])

# The libraries of pyproject.toml's extras that commands import, and the extra of each.
EXTRA_OF_LIBRARY = {
    "copier": "generator",
    "gguf": "gguf",
    "re2": "file",
    "bm25s": "web",
    "lxml": "web",
    "mcp": "mcp",
}


def fail(message: str, code: int = 2) -> NoReturn:
    """Print a one-line error for a user mistake and exit with ``code``."""
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(code)


def command(name: str | None = None, *, panel: str) -> Callable[[F], F]:
    """Register a command whose hermes-envgen errors become one line and their exit code.

    Where the commands' errors meet the terminal; their code comes from
    ``hermes_envgen.errors.exit_code`` (2 for a user mistake, 3 for update conflicts, 130 for
    Ctrl-C), as for the env's command line and the hooks. ``panel``: its section of --help.
    """

    def register(function: F) -> F:
        @functools.wraps(function)
        def run(*args: Any, **kwargs: Any) -> Any:
            from hermes_envgen.errors import HermesEnvgenError, exit_code

            try:
                return function(*args, **kwargs)
            except HermesEnvgenError as exc:
                fail(str(exc), exit_code(exc))
            except ModuleNotFoundError as exc:  # an optional extra not installed
                library = (exc.name or "").partition(".")[0]
                if library not in EXTRA_OF_LIBRARY:
                    raise
                command = name or function.__name__.replace("_", "-")
                extra = EXTRA_OF_LIBRARY[library]
                fail(f"{command} needs {library}: pip install 'hermes-envgen[{extra}]'")

        app.command(name, rich_help_panel=panel)(run)
        return function

    return register


@contextmanager
def without_cycle_collection() -> Iterator[None]:
    """No cyclic garbage collection inside: for the one-shot copier commands (new, update).

    They import copier, jinja and pydantic, all kept until the process exits; the collector
    would only scan those objects again and again (some 30 ms of a 600 ms run) to free
    nothing that the exit does not free. What exists at the end is frozen: neither the next
    collection nor the one at exit scans it all again (in a process that goes on, such as a
    test runner, it is never collected).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def print_version(value: bool) -> None:
    """``--version``: print the installed version and stop, as ``version`` does."""
    if value:
        from hermes_envgen import __version__

        typer.echo(__version__)
        raise typer.Exit()


@app.callback()
def main_callback(
    version: Annotated[
        bool | None,
        typer.Option(
            "--version", callback=print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = None,
) -> None:
    """Generate, run and test multi-turn, tool-using RL environments for Atropos."""


@command("stub-server", panel=TEST_KIT)
def stub_server(
    script: Annotated[
        Path | None, typer.Option(help="YAML/JSON script of the scripted model.")
    ] = None,
    tasks: Annotated[
        str | None,
        typer.Option(
            help="Instead of a script, the test kit's policy for the SAMPLES of this module "
            "(my_env.samples): it solves each task in one rollout and gives up in the next, "
            "and plays the judge."
        ),
    ] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (0 = any free port).")] = 8000,
    error_rate: Annotated[
        float, typer.Option(help="Share of requests answered with HTTP 500.")
    ] = 0.0,
    latency: Annotated[float, typer.Option(help="Seconds added to every request.")] = 0.0,
    malformed_rate: Annotated[
        float, typer.Option(help="Share of requests given a broken body.")
    ] = 0.0,
    drop_rate: Annotated[
        float, typer.Option(help="Share of connections dropped unanswered.")
    ] = 0.0,
    hang_rate: Annotated[float, typer.Option(help="Share of requests never answered.")] = 0.0,
    seed: Annotated[int, typer.Option(help="Seed of the fault injection.")] = 0,
    status: Annotated[
        int, typer.Option(help="Answer every request with this HTTP error status (0: off).")
    ] = 0,
    status_after: Annotated[
        int, typer.Option(help="... after answering this many requests normally.")
    ] = 0,
    tokenizer: Annotated[
        Path | None,
        typer.Option(help="The env's tokenizer for token-id prompts (default: the offline one)."),
    ] = None,
    generate: Annotated[
        bool,
        typer.Option(
            help="Serve POST /generate (off: like stock `vllm serve`, tokens only "
            "through /v1/completions)."
        ),
    ] = True,
) -> None:
    """Serve a scripted OpenAI-compatible model on HTTP, for offline runs and tests."""
    from hermes_envgen.testing.stub_server import Faults, serve_script_or_tasks

    faults = Faults(
        error_rate, latency, malformed_rate, drop_rate, hang_rate, seed, status, status_after
    )
    options = {"host": host, "port": port, "tokenizer": tokenizer, "generate": generate}
    serve_script_or_tasks(script, tasks, faults, **options)


@command("offline-tokenizer", panel=TEST_KIT)
def offline_tokenizer(
    directory: Annotated[Path, typer.Argument(help="Directory to write the tokenizer into.")],
) -> None:
    """Write a byte-level ChatML tokenizer that loads with no download (for offline runs)."""
    from hermes_envgen.testing.tokenizer import build_offline_tokenizer

    typer.echo(build_offline_tokenizer(directory))


@command("tokenizer-from-gguf", panel=TEST_KIT)
def tokenizer_from_gguf(
    gguf_file: Annotated[Path, typer.Argument(help="The model's .gguf file.")],
    directory: Annotated[Path, typer.Argument(help="Directory to write the tokenizer into.")],
) -> None:
    """Write a GGUF model's tokenizer and chat template as a directory AutoTokenizer loads."""
    from hermes_envgen.devtools.gguf_tokenizer import tokenizer_from_gguf as build

    typer.echo(build(gguf_file, directory))


@command(panel=TEST_KIT)
def trainer(
    port: Annotated[int, typer.Option(help="Port for Atropos's API server (run-api).")] = 8000,
    host: Annotated[
        str,
        typer.Option(help="Address run-api listens on (0.0.0.0: reachable from other machines)."),
    ] = "127.0.0.1",
    batch_size: Annotated[int, typer.Option(help="Rollouts in each batch.")] = 16,
    steps: Annotated[int, typer.Option(help="Batches to pull, then stop.")] = 3,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for each batch.")] = 600,
) -> None:
    """Run run-api and a minimal trainer that pulls batches: serve mode end to end, no GPU."""
    from hermes_envgen.testing.trainer import pull_batches

    warn = functools.partial(typer.secho, err=True, fg=typer.colors.YELLOW)
    pull_batches(port=port, host=host, batch_size=batch_size, steps=steps, timeout=timeout,
                 say=typer.echo, warn=warn)  # fmt: skip


@command(panel=RUN)
def parsers() -> None:
    """List the tool-call parsers for raw-text models and the format each reads."""
    from hermes_envgen.runtime.parsers import list_parsers

    rows = list_parsers()
    width = max(len(name) for name, _ in rows)
    for name, fmt in rows:
        typer.echo(f"{name.ljust(width)}  {fmt}")


@command(panel=MAINTENANCE)
def cleanup(
    sandbox_root: Annotated[
        Path | None,
        typer.Option(help="The env's sandbox_root (default: the temp directory)."),
    ] = None,
) -> None:
    """Remove the sandboxes that runs killed without cleaning up left (their processes too)."""
    from hermes_envgen.runtime.sandbox.runs import (
        reap_dead_runs_on_host,
        reap_stale_runs,
        runs_directory,
    )

    parent = runs_directory(sandbox_root)
    reaped = reap_stale_runs(parent)
    reap_dead_runs_on_host()
    typer.echo(f"removed {len(reaped)} stale run(s) under {parent}")


class ConflictMode(str, Enum):
    """Where an update leaves what it could not merge."""

    inline = "inline"
    rej = "rej"


DataOption = Annotated[
    list[str] | None,
    typer.Option(
        "--data",
        "-d",
        metavar="KEY=VALUE",
        help="Answer a question up front (repeatable); a list as a,b.",
    ),
]


@command(panel=MAKE)
def new(
    path: Annotated[
        str,
        typer.Argument(
            help="The project to make: a name (math-agent) or a path (./envs/math-agent); "
            "its last part names the project and its package.",
        ),
    ],
    output_dir: Annotated[
        Path,
        typer.Option(
            "--output-dir",
            "-o",
            help="Directory a relative PATH starts in (made, with its parents, if missing).",
        ),
    ] = Path(),
    defaults: Annotated[
        bool, typer.Option("--defaults", help="Take the default answer of every open question.")
    ] = False,
    data: DataOption = None,
) -> None:
    """Generate a new environment project at PATH (asks questions on a terminal)."""
    with without_cycle_collection():
        from hermes_envgen.generate import new_project, parse_data_pairs, project_location

        name, directory = project_location(path, output_dir)
        project = new_project(name, directory, data=parse_data_pairs(data or []), defaults=defaults)
    typer.echo(project.summary())
    for notice in project.notices:
        typer.echo(f"warning: {notice}", err=True)


@command(panel=MAKE)
def update(
    path: Annotated[Path, typer.Argument(help="The generated project.")] = Path(),
    vcs_ref: Annotated[
        str | None,
        typer.Option(help="Template version to update to (default: this hermes-envgen's)."),
    ] = None,
    conflict: Annotated[
        ConflictMode, typer.Option(help="How to leave conflicts: inline markers, or .rej files.")
    ] = ConflictMode.inline,
    defaults: Annotated[
        bool,
        typer.Option("--defaults/--no-defaults", help="Take the default answer of new questions."),
    ] = False,
    data: DataOption = None,
) -> None:
    """Bring template improvements into a generated project (a three-way merge), and rewrite
    the names of earlier releases it still uses."""
    with without_cycle_collection():
        from hermes_envgen.generate import parse_data_pairs, update_project

        result = update_project(
            path,
            vcs_ref=vcs_ref,
            data=parse_data_pairs(data or []),
            defaults=defaults,
            conflict=conflict.value,
        )
    for line in result.migration.to_change:
        typer.secho(f"change by hand: {line}", err=True, fg=typer.colors.YELLOW)
    typer.echo(result.summary())


@command(panel=MAKE)
def demo(
    directory: Annotated[
        Path | None, typer.Argument(help="Where to generate the demo env (default: a temp dir).")
    ] = None,
    data: DataOption = None,
    groups: Annotated[int, typer.Option(help="Groups to roll out in process mode.")] = 3,
) -> None:
    """Generate an env and run it end to end offline: stub model, process, evaluate."""
    from hermes_envgen.devtools.demo import run_demo
    from hermes_envgen.generate import parse_data_pairs

    result = run_demo(
        directory,
        data=parse_data_pairs(data or []),
        groups=groups,
        progress=show_progress,
    )
    typer.echo(result.summary())


@command(panel=RUN)
def check(
    path: Annotated[Path, typer.Argument(help="The env project (or env.py) to check.")] = Path("."),
    base_url: Annotated[
        str | None, typer.Option(help="Check against this real endpoint instead of the stub.")
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model name at --base-url.")] = None,
    server_type: Annotated[
        str | None, typer.Option(help="Server type at --base-url: openai, vllm or sglang.")
    ] = None,
    tokenizer: Annotated[
        str | None, typer.Option(help="Tokenizer for --base-url runs (repo id or directory).")
    ] = None,
    chat_template: Annotated[
        str | None,
        typer.Option(help="For --base-url runs: the env's chat_template (built-in name or file)."),
    ] = None,
    inference_api: Annotated[
        str | None,
        typer.Option(help="How --base-url is sampled: auto, chat, completions or generate."),
    ] = None,
    extra_body: Annotated[
        str | None,
        typer.Option(help="Extra JSON fields for every model request, e.g. '{\"top_k\": 20}'."),
    ] = None,
    tool_choice: Annotated[
        str | None, typer.Option(help="tool_choice sent with chat requests (e.g. auto).")
    ] = None,
    port: Annotated[int, typer.Option(help="Port of the stub model (0 = any free port).")] = 0,
    timeout: Annotated[float, typer.Option(help="Seconds each env mode may run.")] = 300,
    group_size: Annotated[
        int | None,
        typer.Option(min=1, help="Rollouts in process's group (default: the env's group_size)."),
    ] = None,
    max_turns: Annotated[
        int | None,
        typer.Option(min=1, help="Turns per rollout (default: the env's max_agent_turns)."),
    ] = None,
    eval_size: Annotated[
        int | None,
        typer.Option(min=1, help="Items evaluate holds out (default: the env's eval_size)."),
    ] = None,
    gold_threshold: Annotated[
        float, typer.Option(help="Least reward a task's gold solution must earn.")
    ] = GOLD_THRESHOLD,
    noop_threshold: Annotated[
        float, typer.Option(help="Most reward answering at once, without tools, may earn.")
    ] = NOOP_THRESHOLD,
    trainer: Annotated[
        str,
        typer.Option(
            help="What the data is for: grpo (atroposlib's example GRPO trainer, which needs "
            "inference logprobs) or none (evaluation or SFT data)."
        ),
    ] = "grpo",
    reach_only: Annotated[
        bool,
        typer.Option(
            help="Deprecated: use `hermes-envgen reach` (which takes the same --base-url, "
            "--rollout-server-url and --docker-host)."
        ),
    ] = False,
    rollout_server_url: Annotated[
        str | None, typer.Option(help="With --reach-only: run-api's URL.")
    ] = None,
    docker_host: Annotated[
        list[str] | None,
        typer.Option(
            help="With --reach-only: a Docker engine (tcp://..., ssh://...); repeat, or "
            "comma-separated (every engine of sandbox_docker_hosts)."
        ),
    ] = None,
) -> None:
    """Check that an env is ready to train on: imports, config, process, evaluate, rewards."""
    from hermes_envgen.devtools.check import Budget, real_model, run_checks

    if reach_only:  # the earlier spelling of `reach`
        from hermes_envgen.devtools.reach import reach_from_flags

        typer.echo(
            "warning: `check --reach-only` is deprecated: use `hermes-envgen reach`", err=True
        )
        rows = reach_from_flags(base_url, rollout_server_url, docker_host, asked_by="--reach-only")
        print_checklist(rows, failed_code=2)
        return
    endpoint = real_model(
        base_url, model, server_type, tokenizer, chat_template=chat_template,
        inference_api=inference_api, extra_body=extra_body, tool_choice=tool_choice,
    )  # fmt: skip
    results = run_checks(
        path, endpoint=endpoint, budget=Budget(group_size, max_turns, eval_size), port=port,
        timeout=timeout, gold_threshold=gold_threshold, noop_threshold=noop_threshold,
        trainer=trainer, progress=show_progress,
    )  # fmt: skip
    print_checklist(results, failed_code=1, passed="ready to train")


@command(panel=RUN)
def reach(
    base_url: Annotated[
        str | None,
        typer.Option(help="A model server's URL (comma-separated: several), as --openai.base_url."),
    ] = None,
    rollout_server_url: Annotated[
        str | None, typer.Option(help="run-api's URL, as --env.rollout_server_url.")
    ] = None,
    docker_host: Annotated[
        list[str] | None,
        typer.Option(
            help="A Docker engine (tcp://..., ssh://...); repeat, or comma-separated (every "
            "engine of sandbox_docker_hosts)."
        ),
    ] = None,
) -> None:
    """Check that this host reaches the model servers, run-api and Docker engines it needs."""
    from hermes_envgen.devtools.reach import reach_from_flags

    print_checklist(reach_from_flags(base_url, rollout_server_url, docker_host), failed_code=2)


def print_checklist(rows: list[Any], *, failed_code: int, passed: str | None = None) -> None:
    """A checklist's rows; a FAIL among them exits with ``failed_code``, naming them."""
    from hermes_envgen.devtools.check import failed, format_table

    typer.echo(format_table(rows))
    names = failed(rows)
    if names and passed:  # `check`: the verdict in a line of its own
        typer.secho(f"not ready: {', '.join(names)} failed", err=True, fg=typer.colors.RED)
    if names:
        raise typer.Exit(failed_code)
    if passed:
        typer.secho(passed, fg=typer.colors.GREEN)


def show_progress(message: str) -> None:
    """A long command's progress line, dimmed, on stderr."""
    typer.secho(f"... {message}", err=True, dim=True)


@command(panel=RUN)
def view(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="samples.jsonl / failures.jsonl of evaluate, or process JSONL; two files: "
            "two runs side by side (A before, B after)."
        ),
    ],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="Where to write (default: PATH.html; B.vs-A.html for two)."
        ),
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(help="The run's tokenizer (directory or name): token views show text."),
    ] = None,
    tokens_from: Annotated[
        int, typer.Option(min=0, help="Draw token views from this rollout on (0: the first).")
    ] = 0,
) -> None:
    """Render rollouts as one self-contained HTML page: the run at a glance, filters, tokens."""
    from hermes_envgen.devtools.view import view as write

    typer.echo(write(paths, output, tokenizer=tokenizer, tokens_from=tokens_from))


@command(panel=RUN)
def rescore(
    run: Annotated[
        Path, typer.Argument(help="The run: samples.jsonl of evaluate, or process JSONL.")
    ],
    env: Annotated[
        str, typer.Option("--env", help="The env as it is now: its module or .py file.")
    ],
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Where to write (default: RUN.rescored.jsonl)."),
    ] = None,
    no_judge: Annotated[
        bool, typer.Option("--no-judge", help="Score only what needs no LLM judge.")
    ] = False,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue an interrupted rescore's output.")
    ] = False,
    workers: Annotated[
        int | None,
        typer.Option(min=1, help="Rollouts replayed at once (default: max_eval_workers)."),
    ] = None,
) -> None:
    """Score a run's rollouts again with the env's current reward, replaying their tool calls."""
    from hermes_envgen.devtools.rescore import format_summary
    from hermes_envgen.devtools.rescore import rescore as run_rescore

    result = run_rescore(env, run, output, no_judge=no_judge, resume=resume, workers=workers)
    typer.echo(format_summary(result))


def main() -> None:
    app()
