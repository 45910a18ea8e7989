"""Every shell and Python block of the docs and the README runs, as written, offline.

The blocks of one page run in order as one bash script in a scratch directory (so a page's
blocks share what the earlier ones made: a generated project, a tokenizer), with this venv's
commands on PATH, ``examples/`` at hand, no network and a timeout. A model is always the test
kit's stub server, which the pages start themselves. Blocks that cannot run here say so on
the page (``<!-- not-run: why -->``, or ``<!-- run-by: the test that runs them -->``); see
tests/helpers/markdown_blocks.py.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.markdown_blocks import REPO, Block, blocks, pages

PAGE_TIMEOUT = 300
PYTHON = ("python", "py")
RUNNABLE = {page: [b for b in blocks(page) if b.runs] for page in pages()}
SHELL = {page: [b for b in found if b.language not in PYTHON] for page, found in RUNNABLE.items()}
SHELL_PAGES = [page for page, found in SHELL.items() if found]
PYTHON_BLOCKS = [b for found in RUNNABLE.values() for b in found if b.language in PYTHON]


def test_every_block_runs_or_says_why_not():
    problems = []
    for page in pages():
        for block in blocks(page):
            if block.marker in ("not-run", "run-by") and not block.reason:
                problems.append(f"{block.where}: {block.marker} without a reason")
            if block.marker == "run-by":
                test = REPO / block.reason
                if not test.is_file():
                    problems.append(f"{block.where}: run-by names no file: {block.reason}")
                elif str(page.relative_to(REPO)) not in test.read_text(encoding="utf-8"):
                    problems.append(f"{block.where}: {block.reason} does not read this page")
            if block.included and not (REPO / block.included).is_file():
                problems.append(f"{block.where}: includes a missing file {block.included}")
    assert problems == []
    counted = [b for found in RUNNABLE.values() for b in found]
    assert len(counted) >= 10, "the docs lost their runnable examples"


def test_included_examples_compile():
    for page in pages():
        for block in blocks(page):
            if block.included and block.included.endswith(".py"):
                source = (REPO / block.included).read_text(encoding="utf-8")
                compile(source, block.included, "exec")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def script_of(page_blocks: list[Block], port: int) -> str:
    """One bash script: each block after a line that marks where its output starts."""
    parts = [
        "set -euo pipefail",
        # Background servers a block started are stopped however the script ends.
        "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT",
    ]
    for number, block in enumerate(page_blocks):
        parts.append(f"echo '@@block {number}@@'")
        parts.append(re.sub(r"(?<![\d.])8000(?!\d)", str(port), block.text))  # the pages' port
    return "\n".join(parts) + "\n"


def matches(expected: str, output: list[str]) -> bool:
    pattern = ".*".join(re.escape(part) for part in expected.rstrip().split("..."))
    return any(re.fullmatch(pattern, line.rstrip()) for line in output)


def offline_env(tmp_path: Path) -> dict[str, str]:
    """This venv's commands first on PATH, a private git identity, no way out but 127.0.0.1."""
    gitconfig = tmp_path / "gitconfig"
    gitconfig.write_text("[user]\n\tname = Docs Test\n\temail = docs@example.com\n")
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env.pop("HERMES_ENVGEN_TEMPLATE_SOURCE", None)
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",
        GIT_CONFIG_GLOBAL=str(gitconfig),
        GIT_CONFIG_NOSYSTEM="1",
        HTTPS_PROXY="http://127.0.0.1:9",  # offline for sure
        HTTP_PROXY="http://127.0.0.1:9",
        COPIER_CACHE_DIR=str(tmp_path / "copier-cache"),
        NO_PROXY="127.0.0.1,localhost,::1",
        no_proxy="127.0.0.1,localhost,::1",
    )
    return env


@pytest.mark.slow
def test_the_python_blocks_run(tmp_path: Path):
    """All in one interpreter, each as its own module (imports are paid once)."""
    runner = "\n".join(
        [
            "import runpy, sys",
            "for path in sys.argv[1:]:",
            "    print(f'@@block {path}@@', flush=True)",
            # Not as __main__: a block that ends in `Env.cli()` defines an env, it does not serve.
            "    runpy.run_path(path, run_name='docs_example')",
        ]
    )
    paths = []
    for number, block in enumerate(PYTHON_BLOCKS):
        path = tmp_path / f"block_{number}.py"
        path.write_text(block.text, encoding="utf-8")
        paths.append(str(path))
    result = subprocess.run(
        [sys.executable, "-c", runner, *paths],
        cwd=tmp_path,
        env=offline_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=PAGE_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    started = result.stdout.count("@@block ")
    failed = PYTHON_BLOCKS[max(started - 1, 0)]
    assert result.returncode == 0, f"{failed.where}:\n{result.stderr[-3000:]}"
    assert started == len(PYTHON_BLOCKS) >= 3


@pytest.mark.slow
@pytest.mark.parametrize("page", SHELL_PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_the_page_runs(page: Path, tmp_path: Path):
    page_blocks = SHELL[page]
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "examples").symlink_to(REPO / "examples")
    result = subprocess.run(
        ["bash", "-c", script_of(page_blocks, free_port())],
        cwd=workdir,
        env=offline_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=PAGE_TIMEOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    outputs = re.split(r"^@@block \d+@@\n", result.stdout, flags=re.MULTILINE)[1:]
    failed = page_blocks[len(outputs) - 1] if outputs else page_blocks[0]
    assert result.returncode == 0, (
        f"{failed.where}: exit {result.returncode}\n"
        f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    for block, output in zip(page_blocks, outputs):
        lines = output.splitlines()
        missing = [line for line in block.expected if line.strip() and not matches(line, lines)]
        assert missing == [], (
            f"{block.where}: the page says it prints {missing}; it printed {lines}"
        )
