"""The code blocks and names of the project's Markdown pages, for the docs tests.

A page is README.md, CONTRIBUTING.md or a page under docs/. A fenced block of a shell or Python
language is run by tests/docs/test_examples.py unless the line before it (blank lines aside)
says otherwise, with its reason:

    <!-- not-run: REASON -->             not runnable offline or here (a GPU, other machines...)
    <!-- run-by: tests/PATH.py -->       run as written by that test, which reads this page

A text block after a run block, marked ``<!-- prints -->``, is what that block prints: each of
its lines (``...`` standing for any text) must be a line of the block's output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
RUN_LANGUAGES = {"bash", "sh", "shell", "python", "py"}
MARKER = re.compile(r"^<!-- (not-run|run-by|prints)(?:: (.*?))? -->$")
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)\s*(?P<info>[^\n]*)$")
SNIPPET = re.compile(r'^--8<-- "([^"]+)"$')


@dataclass
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    marker: str = ""  # not-run, run-by, prints or ""
    reason: str = ""
    expected: list[str] = field(default_factory=list)  # what it prints, when a prints block follows

    @property
    def where(self) -> str:
        return f"{shown(self.page)}:{self.line}"

    @property
    def included(self) -> str | None:
        """The file a block made of one snippet line (``--8<-- "path"``) shows, else None."""
        match = SNIPPET.match(self.text.strip())
        return match.group(1) if match else None

    @property
    def runs(self) -> bool:
        return self.language in RUN_LANGUAGES and not self.marker and not self.included


def shown(page: Path) -> str:
    """A page's path as messages give it: from the repository's root."""
    return str(page.relative_to(REPO)) if page.is_relative_to(REPO) else str(page)


def pages() -> list[Path]:
    return [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted(DOCS.rglob("*.md"))]


def blocks(page: Path) -> list[Block]:
    """The page's fenced blocks in order, each with the marker before it."""
    found: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    marker: tuple[str, str] | None = None
    index = 0
    while index < len(lines):
        line = lines[index]
        match = FENCE.match(line)
        if match:
            fence, info = match.group("fence"), match.group("info").strip()
            body = []
            index += 1
            while index < len(lines) and not lines[index].strip().startswith(fence):
                body.append(lines[index])
                index += 1
            language = info.split()[0].lstrip("{.").rstrip("}") if info else ""
            block = Block(page, index - len(body), language, "\n".join(body) + "\n")
            if marker:
                block.marker, block.reason = marker
            if block.marker == "prints" and found:
                found[-1].expected = body
            found.append(block)
            marker = None
        else:
            marked = MARKER.match(line.strip())
            if marked:
                marker = (marked.group(1), (marked.group(2) or "").strip())
            elif line.strip():
                marker = None
        index += 1
    return found


def prose_lines(page: Path) -> list[tuple[int, str]]:
    """The page's lines outside fenced blocks, numbered from 1."""
    out, fence = [], ""
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        match = FENCE.match(line)
        if match and (not fence or match.group("fence") == fence):
            fence = "" if fence else match.group("fence")
            continue
        if not fence:
            out.append((number, line))
    return out


def all_lines(page: Path) -> list[tuple[int, str]]:
    return list(enumerate(page.read_text(encoding="utf-8").splitlines(), 1))
