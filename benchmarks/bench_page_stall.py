"""How long one fetched page holds the env's event loop while it is read as text: before and now.

Before, ``web_fetch`` reduced HTML to text on the event loop with ``html.parser`` and two
regexes, quadratic on some pages: every rollout of the process stalled with it. Now
``page_text.html_text`` (libxml2, linear) runs in a worker process
(``web.html_text_in_worker``). For each family of hostile page and each size, a ticker on
the loop (every 1 ms) records the longest the loop went without a turn while the page was read:
the old way (its code, kept below as it was) and the new one, side by side in one run, with
their ratio. The old way is measured up to ``--old-max`` units (it grows with their square);
past that its figure is extrapolated from its largest measured one, marked ``~``.

    .venv/bin/python benchmarks/bench_page_stall.py [--old-max 40000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import time
from collections.abc import Awaitable, Callable
from html.parser import HTMLParser
from typing import Any

from hermes_envgen.runtime.tools.web import html_text_in_worker

FAMILIES: dict[str, Callable[[int], str]] = {
    # 80 KB of text, then a run of no-break spaces (issue 38: 40,000 of them, 14.9 s)
    "x then U+00A0 run": lambda n: "x" * 80_000 + "\u00a0" * n,
    # unclosed tags (issue 38: 40,000, 4.9 s)
    "unclosed <a": lambda n: "<a" * n,
}
SIZES = [5_000, 10_000, 20_000, 40_000, 1_000_000]  # the largest: a page of 2 MB


class _OldTextOfHtml(HTMLParser):
    """The page-to-text of web.py before this change, as it was."""

    SKIPPED = frozenset({"script", "style", "noscript", "template", "svg", "head"})
    BLOCKS = frozenset(
        {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section",
         "article", "pre", "blockquote", "table", "ul", "ol"}
    )  # fmt: skip

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title: list[str] = []
        self._skipping = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in self.SKIPPED:
            self._skipping += 1
        elif tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in self.SKIPPED:
            self._skipping = max(0, self._skipping - 1)
        elif tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title.append(data)
        elif not self._skipping:
            self.parts.append(data)


def old_html_text(markup: str) -> tuple[str, str]:
    parser = _OldTextOfHtml()
    with contextlib.suppress(Exception):
        parser.feed(markup)
        parser.close()
    text = re.sub(r"[ \t\r\f\v]+", " ", "".join(parser.parts))
    text = re.sub(r"\s*\n\s*", "\n", text).strip()
    return " ".join("".join(parser.title).split()), text


async def old_way(markup: str) -> Any:
    return old_html_text(markup)  # on the loop, as read_page called it


async def longest_block(read: Callable[[str], Awaitable[Any]], markup: str) -> float:
    """Seconds the loop went without a turn at most while ``read(markup)`` ran."""
    loop = asyncio.get_running_loop()
    longest = 0.0

    async def tick() -> None:
        nonlocal longest
        while True:
            before = loop.time()
            await asyncio.sleep(0.001)
            longest = max(longest, loop.time() - before)

    ticker = asyncio.ensure_future(tick())
    await asyncio.sleep(0.01)  # ticking
    try:
        await read(markup)
        await asyncio.sleep(0.01)  # the ticker's next turn: it sees the wait that just ended
    finally:
        ticker.cancel()
    return longest


async def main(old_max: int) -> None:
    await html_text_in_worker("<p>warm</p>")  # the reader started: what a run pays once
    print(f"{'page':<20} {'units':>8} {'MB':>5} {'old s':>8} {'new s':>7} {'old/new':>8}")
    for family, make in FAMILIES.items():
        measured: tuple[int, float] | None = None
        for units in SIZES:
            markup = make(units)
            megabytes = len(markup.encode()) / 1e6
            if units <= old_max:
                old = await longest_block(old_way, markup)
                measured = (units, old)
                old_text = f"{old:8.3f}"
            else:
                assert measured is not None
                old = measured[1] * (units / measured[0]) ** 2
                old_text = f"~{old:7.0f}"
            started = time.perf_counter()
            new = await longest_block(html_text_in_worker, markup)
            took = time.perf_counter() - started
            print(
                f"{family:<20} {units:>8} {megabytes:5.2f} {old_text} {new:7.3f} "
                f"{old / new:8.0f}   (new: read in {took:.2f} s)"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old-max", type=int, default=40_000, help="largest size run the old way")
    asyncio.run(main(parser.parse_args().old_max))
