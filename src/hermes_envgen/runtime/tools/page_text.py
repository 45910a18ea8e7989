"""An HTML page's title and readable text, and the process that reads fetched pages as text.

``html_text`` parses with libxml2's HTML parser (lxml's event target: no tree is built), in
time linear in the page: Python's ``html.parser`` is quadratic on some inputs (40,000
unclosed ``<a`` tags took 5 s), and so was a regex over the text (80 KB of ``x`` and 40,000
no-break spaces, 15 s). The env reads the pages ``web_fetch`` fetched in this process (``python
-I`` of this file: standard library and lxml only), kept and killed at a limit by
``workers``, so that no page can hold the event loop.

Protocol, pages one after another: on stdin, an 8-byte big-endian length and that many bytes
of UTF-8 markup; on stdout, an 8-byte length and that many bytes of a JSON ``[title, text]``.
The process exits at the end of stdin, or once it has waited ``IDLE_EXIT`` seconds for a page.
"""

from __future__ import annotations

import json
import re
import select
import sys
from typing import Any

IDLE_EXIT = 60.0  # seconds without a page before the process exits (the env never waits)
SKIPPED = frozenset({"script", "style", "noscript", "template", "svg", "head"})
BLOCKS = frozenset(
    {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article",
     "pre", "blockquote", "table", "ul", "ol"}
)  # fmt: skip
_SPACES = re.compile(r"[ \t\r\f\v]+")  # one character class, no backtracking: linear


class _TextOfHtml:
    """lxml's parser target: the text outside skipped elements, a newline around blocks."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.title: list[str] = []
        self._skipping = 0
        self._in_title = False

    def start(self, tag: str, attrib: Any) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in SKIPPED:
            self._skipping += 1
        elif tag in BLOCKS:
            self.parts.append("\n")

    def end(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in SKIPPED:
            self._skipping = max(0, self._skipping - 1)
        elif tag in BLOCKS:
            self.parts.append("\n")

    def data(self, data: str) -> None:
        if self._in_title:
            self.title.append(data)
        elif not self._skipping:
            self.parts.append(data)

    def close(self) -> None:
        return None


def html_text(markup: str) -> tuple[str, str]:
    """The title and the readable text of an HTML page (scripts and styles left out)."""
    from lxml import etree  # paid by the first page only

    target = _TextOfHtml()
    # UTF-8 bytes: lxml refuses some str (lone surrogates); recover: a broken page still gives
    # what was parsed
    parser = etree.HTMLParser(target=target, encoding="utf-8", recover=True, no_network=True)
    data = markup.encode("utf-8", "replace")
    if data.strip():  # lxml refuses an empty document
        try:
            parser.feed(data)
            parser.close()
        except etree.LxmlError:
            pass
    # Runs of whitespace: within a line one space; one holding a newline, one newline.
    lines = _SPACES.sub(" ", "".join(target.parts)).split("\n")
    text = "\n".join(line for line in (line.strip() for line in lines) if line)
    return " ".join("".join(target.title).split()), text


def _read_exactly(stream: Any, size: int) -> bytes | None:
    data = stream.read(size)
    return data if len(data) == size else None


def main() -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while select.select([stdin], [], [], IDLE_EXIT)[0]:
        header = _read_exactly(stdin, 8)
        markup = None if header is None else _read_exactly(stdin, int.from_bytes(header, "big"))
        if markup is None:
            return
        answer = json.dumps(html_text(markup.decode("utf-8", "replace"))).encode()
        stdout.write(len(answer).to_bytes(8, "big") + answer)
        stdout.flush()


if __name__ == "__main__":
    main()
