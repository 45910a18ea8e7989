"""The CLI: fast start, clear errors for user mistakes."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hermes_envgen", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def test_help_does_not_import_atroposlib_or_transformers():
    code = (
        "import sys; from typer.testing import CliRunner; from hermes_envgen.cli import app; "
        "r = CliRunner().invoke(app, ['--help']); assert r.exit_code == 0, r.output; "
        "heavy = ('atroposlib', 'transformers', 'copier', 'openai'); "
        "print([m for m in heavy if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_help_lists_the_commands_in_sections_new_first():
    result = run_cli("--help")
    assert result.returncode == 0
    sections: dict[str, list[str]] = {}
    for line in result.stdout.split("Options:")[1].splitlines():
        if line and not line.startswith(" "):
            section = sections.setdefault(line.rstrip(":"), [])
        elif line.startswith("  ") and not line.startswith("   ") and sections:
            section.append(line.split()[0])
    assert sections == {
        "Make": ["new", "update", "demo"],
        "Run and check": ["check", "reach", "view", "parsers", "rescore"],
        "Test kit": ["stub-server", "offline-tokenizer", "tokenizer-from-gguf", "trainer"],
        "Maintenance": ["cleanup"],
    }


def test_the_version_is_printed_one_way():
    from hermes_envgen import __version__

    result = run_cli("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{__version__}\n"
    assert run_cli("version").returncode == 2  # no second way


@pytest.mark.parametrize(
    "command", [[], ["new"], ["update"], ["demo"], ["check"], ["view"], ["rescore"]]
)
def test_help_shows_no_placeholder_for_flags(command):
    # Typer's rich panels once labelled every flag, --help included, with "<bool>".
    result = run_cli(*command, "--help")
    assert result.returncode == 0, result.stderr
    assert "--help" in result.stdout and "<bool>" not in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["stub-server", "--script", "/no/such/script.yaml"],
            "cannot read script /no/such/script.yaml",
        ),
        (
            ["stub-server", "--script", "{script}", "--error-rate", "3"],
            "error_rate must be between 0 and 1",
        ),
        (
            ["stub-server", "--script", "{script}", "--tokenizer", "/no/such/tokenizer"],
            "cannot load the tokenizer '/no/such/tokenizer'",
        ),
        (["stub-server"], "give --script FILE or --tasks MODULE (one of them)"),
        (["stub-server", "--script", "{script}", "--tasks", "x.samples"], "one of them"),
        (["stub-server", "--tasks", "no_such_env.samples"], "--tasks no_such_env.samples: cannot"),
        (["stub-server", "--tasks", "json"], "--tasks json: it has no SAMPLES"),
    ],
)
def test_stub_server_user_mistakes_exit_2_without_a_traceback(tmp_path, args, message):
    script = tmp_path / "s.yaml"
    script.write_text("conversations: [{turns: [{content: hi}]}]")
    result = run_cli(*[a.replace("{script}", str(script)) for a in args])
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_stub_server_on_a_busy_port_exits_2(stub_server, tmp_path):
    busy = stub_server({"conversations": [{"turns": [{"content": "x"}]}]})
    script = tmp_path / "s.yaml"
    script.write_text("conversations: [{turns: [{content: hi}]}]")
    result = run_cli("stub-server", "--script", str(script), "--port", str(busy.port))
    assert result.returncode == 2
    assert f"cannot listen on 127.0.0.1:{busy.port}" in result.stderr


@pytest.mark.slow
def test_trainer_on_a_busy_port_fails_in_one_line(stub_server):
    busy = stub_server({"conversations": [{"turns": [{"content": "x"}]}]})
    result = run_cli("trainer", "--port", str(busy.port), "--steps", "1", timeout=120)
    assert result.returncode == 1
    assert re.fullmatch(rf"error: run-api exited with \d+ \(port {busy.port}\)\n", result.stderr)


def test_offline_tokenizer_command(tmp_path):
    result = run_cli("offline-tokenizer", str(tmp_path / "tok"))
    assert result.returncode == 0
    assert (tmp_path / "tok" / "tokenizer.json").exists()
