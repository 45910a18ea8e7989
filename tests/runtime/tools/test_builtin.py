"""The tool registry (schemas from typed functions) and the built-in file and terminal tools."""

from __future__ import annotations

import asyncio
import json
from typing import Literal

import pytest

from hermes_envgen.runtime.loop.tool_context import ToolContext
from hermes_envgen.runtime.tools import (
    REGISTRY,
    ToolExecutionError,
    ToolRegistry,
    UnknownToolError,
    tool,
)


def test_schema_comes_from_the_signature_and_docstring():
    registry = ToolRegistry()

    @tool(toolset="math", registry=registry)
    def scale(
        values: list[float],
        factor: float = 2.0,
        mode: Literal["up", "down"] = "up",
        note: str | None = None,
        *,
        sandbox=None,
    ) -> list[float]:
        """Scale numbers by a factor.

        Longer explanation that is not part of the summary.

        Args:
            values: The numbers to scale.
            factor: What to multiply by;
                may be fractional.
            mode: Which way to scale.
        Returns:
            The scaled numbers.
        """
        return [v * factor for v in values]

    schema = registry.get("scale").schema
    assert schema == {
        "type": "function",
        "function": {
            "name": "scale",
            "description": "Scale numbers by a factor.",
            "parameters": {
                "type": "object",
                "properties": {
                    "values": {
                        "type": "array",
                        "items": {"type": "number"},
                        "description": "The numbers to scale.",
                    },
                    "factor": {
                        "type": "number",
                        "default": 2.0,
                        "description": "What to multiply by; may be fractional.",
                    },
                    "mode": {
                        "enum": ["up", "down"],
                        "default": "up",
                        "description": "Which way to scale.",
                    },
                    "note": {"type": "string"},
                },
                "required": ["values"],
            },
        },
    }
    assert registry.toolsets() == {"math": ["scale"]}
    assert asyncio.run(registry.get("scale").call({"values": [1, 2]})) == "[2.0, 4.0]"


def test_arguments_are_checked_before_the_call():
    registry = ToolRegistry()

    @tool(registry=registry)
    def echo(text: str) -> str:
        """Echo text."""
        return text

    with pytest.raises(ToolExecutionError, match=r"missing required argument\(s\): text"):
        asyncio.run(registry.get("echo").call({}))
    with pytest.raises(ToolExecutionError, match=r"unknown argument\(s\): txt \(valid: text\)"):
        asyncio.run(registry.get("echo").call({"text": "a", "txt": "b"}))


def test_toolsets_resolve_with_enabled_and_disabled():
    names = lambda tools: [t.name for t in tools]  # noqa: E731
    assert names(REGISTRY.resolve(["terminal"])) == ["terminal"]
    assert names(REGISTRY.resolve(["file"], ["patch"])) == [
        "read_file",
        "search_files",
        "write_file",
    ]
    # disabled is honoured when enabled is not set
    assert "terminal" not in names(REGISTRY.resolve(None, ["terminal"]))
    assert names(REGISTRY.resolve(["terminal", "file"], ["file"])) == ["terminal"]


def test_an_unknown_toolset_fails_with_the_valid_names():
    with pytest.raises(
        UnknownToolError,
        match=r"unknown toolset or tool 'browser'.*valid toolsets:.*file.*python.*terminal.*web",
    ):
        REGISTRY.resolve(["browser"])
    with pytest.raises(UnknownToolError, match="unknown toolset or tool 'nope'"):
        REGISTRY.resolve(None, ["nope"])


def run_tool(sandboxes, name, **arguments):
    async def main():
        return await ToolContext("tools", sandboxes).call_tool(name, arguments)

    return asyncio.run(main())


def test_file_tools_work_inside_the_workspace(sandboxes):
    assert run_tool(
        sandboxes, "write_file", path="src/app.py", content="x = 1\ny = 2\nx = 1\n"
    ) == ("wrote 18 bytes to src/app.py")
    assert (
        run_tool(sandboxes, "read_file", path="src/app.py", start_line=2, end_line=3)
        == "y = 2\nx = 1\n"
    )
    with pytest.raises(ToolExecutionError, match="occurs 2 times"):
        run_tool(sandboxes, "patch", path="src/app.py", old_text="x = 1", new_text="x = 3")
    with pytest.raises(ToolExecutionError, match="was not found"):
        run_tool(sandboxes, "patch", path="src/app.py", old_text="z", new_text="w")
    assert run_tool(sandboxes, "patch", path="src/app.py", old_text="y = 2", new_text="y = 5") == (
        "replaced 1 occurrence(s) in src/app.py"
    )
    assert (
        run_tool(
            sandboxes,
            "patch",
            path="src/app.py",
            old_text="x = 1",
            new_text="x = 0",
            replace_all=True,
        )
        == "replaced 2 occurrence(s) in src/app.py"
    )
    assert run_tool(sandboxes, "read_file", path="src/app.py") == "x = 0\ny = 5\nx = 0\n"
    run_tool(sandboxes, "write_file", path="notes.md", content="x = 0 here too\n")
    assert run_tool(sandboxes, "search_files", pattern=r"x = \d") == (
        "notes.md:1: x = 0 here too\nsrc/app.py:1: x = 0\nsrc/app.py:3: x = 0"
    )
    assert (
        run_tool(sandboxes, "search_files", pattern="x", file_glob="*.md")
        == "notes.md:1: x = 0 here too"
    )
    assert run_tool(sandboxes, "search_files", pattern="nothing") == "no matches"
    with pytest.raises(ToolExecutionError, match="invalid pattern"):
        run_tool(sandboxes, "search_files", pattern="(")
    out = json.loads(run_tool(sandboxes, "terminal", command="cat notes.md; exit 3"))
    assert out == {"exit_code": 3, "output": "x = 0 here too\n"}


@pytest.mark.parametrize("path", ["../outside.txt", "/etc/passwd", "a/../../x"])
def test_file_tools_refuse_paths_outside_the_workspace(sandboxes, path):
    for name, args in [
        ("read_file", {}),
        ("write_file", {"content": "x"}),
        ("patch", {"old_text": "a", "new_text": "b"}),
        ("search_files", {"pattern": "x"}),
    ]:
        key = "path"
        with pytest.raises(ToolExecutionError, match="outside the workspace"):
            run_tool(sandboxes, name, **{key: path}, **args)


@pytest.mark.timeout(120)
def test_searches_reuse_a_matcher_and_replace_one_that_was_killed_or_died(tmp_path):
    import os
    import signal

    from hermes_envgen.runtime.sandbox import SandboxManager, SandboxSettings
    from hermes_envgen.runtime.tools import search_worker, workers

    manager = SandboxManager(SandboxSettings(root=str(tmp_path), command_timeout=2))

    async def main():
        ctx = ToolContext("reuse", manager)
        other = ToolContext("other", manager)
        await ctx.call_tool("write_file", {"path": "a.txt", "content": "needle one\n"})
        await other.call_tool("write_file", {"path": "b.txt", "content": "needle two\n"})
        pool = await workers.pool(search_worker)
        first = [await ctx.call_tool("search_files", {"pattern": "needle"}) for _ in range(3)]
        mine = await other.call_tool("search_files", {"pattern": "needle"})
        reused = (pool.started, [m.process.pid for m in pool.idle])
        # A matcher in use is never shared: while one is held (a search under way, as far as
        # the pool knows), the next search gets a matcher of its own; both are kept after.
        held = await pool.acquire()
        both = await asyncio.gather(
            ctx.call_tool("search_files", {"pattern": "one"}),
            other.call_tool("search_files", {"pattern": "two"}),
        )
        at_once = (pool.started, held.process.pid in {m.process.pid for m in pool.idle})
        await pool.release(held, reusable=True)
        # One that died while idle is replaced.
        for matcher in pool.idle:
            os.kill(matcher.process.pid, signal.SIGKILL)
            await matcher.process.wait()
        after_death = await ctx.call_tool("search_files", {"pattern": "needle"})
        started_after_death = pool.started
        # One killed at the time limit is not reused, and the next search works.
        await ctx.terminal("head -c 1999999 /dev/zero | tr '\\0' a > long.txt")
        before = {m.process.pid for m in pool.idle}
        slow = await ctx.call_tool(
            "search_files", {"pattern": "[a-z]{1,1000}[a-z]{1,1000}!", "file_glob": "long*"}
        )
        killed = before - {m.process.pid for m in pool.idle}
        after_timeout = await ctx.call_tool("search_files", {"pattern": "one"})
        await manager.close_all()
        return (first, mine, reused, both, at_once, after_death, started_after_death, slow,
                killed, after_timeout, pool)  # fmt: skip

    (first, mine, reused, both, at_once, after_death, started_after_death, slow, killed,
     after_timeout, pool) = asyncio.run(main())  # fmt: skip
    assert first == ["a.txt:1: needle one"] * 3
    assert mine == "b.txt:1: needle two"  # the same matcher, and none of a.txt
    assert reused[0] == 1 and len(reused[1]) == 1
    assert list(both) == ["a.txt:1: needle one", "b.txt:1: needle two"]
    assert at_once[0] >= 2 and not at_once[1]  # a matcher of their own, the held one untouched
    assert after_death == "a.txt:1: needle one" and started_after_death == at_once[0] + 1
    assert "search stopped after 2 s" in slow and len(killed) == 1
    assert after_timeout == "a.txt:1: needle one"
    assert not pool.idle  # the loop's end ended them
    for pid in killed:
        assert not os.path.exists(f"/proc/{pid}"), "a killed matcher was left running"


def test_a_search_finds_the_lines_a_line_by_line_search_finds(sandboxes):
    import re

    # One file a case: the matcher looks at a file's lines only when its text has a match.
    texts = ["foo\r\nbar", "baz\rfoo", "x\n\ny", "bar foo\u2028z", "foo-bar", "  foo\nq",
             "qux\x0cfoo", "end foo", "BAR\nfoo"]  # fmt: skip
    for number, text in enumerate(texts):
        run_tool(sandboxes, "write_file", path=f"t{number}.txt", content=text)
    patterns = [r"foo$", r"^foo", r"^$", r"\bfoo\b", r"^\s+foo$", r"qux$", r"\Afoo",
                r"foo\z", r"(?i)^bar", r"o b", r"r$"]  # fmt: skip
    for pattern in patterns:
        expected = [
            f"t{number}.txt:{line_number}: {line}"
            for number, text in enumerate(texts)
            for line_number, line in enumerate(text.splitlines(), 1)
            if re.search(pattern.replace(r"\z", r"\Z"), line)
        ]
        found = run_tool(sandboxes, "search_files", pattern=pattern)
        assert found == ("\n".join(expected) or "no matches"), pattern
