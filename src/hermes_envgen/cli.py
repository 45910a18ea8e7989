"""The ``hermes-envgen`` command line. Each command is a thin call into a module elsewhere.

Heavy imports (atroposlib, transformers, copier) happen inside the commands, so ``--help``
starts fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, NoReturn

import typer

app = typer.Typer(
    name="hermes-envgen",
    help="Generate, run and test multi-turn, tool-using RL environments for Atropos.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print a one-line error for a user mistake and exit with ``code``."""
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(code)


@app.callback()
def main_callback() -> None:
    """Generate, run and test multi-turn, tool-using RL environments for Atropos."""


@app.command()
def version() -> None:
    """Print the installed version."""
    from hermes_envgen import __version__

    typer.echo(__version__)


@app.command("stub-server")
def stub_server(
    script: Annotated[Path, typer.Option(help="YAML/JSON script of the scripted model.")],
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
) -> None:
    """Serve a scripted OpenAI-compatible model on HTTP, for offline runs and tests."""
    from hermes_envgen.testing.script import ScriptError
    from hermes_envgen.testing.stub_server import Faults, StubServer, serve_forever

    try:
        faults = Faults(error_rate, latency, malformed_rate, drop_rate, hang_rate, seed)
        server = StubServer(script, host=host, port=port, faults=faults, announce=True)
    except (ScriptError, ValueError) as exc:
        fail(str(exc))
    try:
        serve_forever(server)
    except OSError as exc:
        fail(str(exc))


@app.command("offline-tokenizer")
def offline_tokenizer(
    directory: Annotated[Path, typer.Argument(help="Directory to write the tokenizer into.")],
) -> None:
    """Write a byte-level ChatML tokenizer that loads with no download (for offline runs)."""
    from hermes_envgen.testing.tokenizer import build_offline_tokenizer

    typer.echo(build_offline_tokenizer(directory))


@app.command()
def parsers() -> None:
    """List the tool-call parsers for raw-text models and the format each reads."""
    from hermes_envgen.runtime.parsers import list_parsers

    rows = list_parsers()
    width = max(len(name) for name, _ in rows)
    for name, fmt in rows:
        typer.echo(f"{name.ljust(width)}  {fmt}")


def main() -> None:
    app()
