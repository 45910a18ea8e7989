"""ToolContext: what a reward function can do in the rollout's sandbox."""

from __future__ import annotations

import asyncio
import os

from hermes_envgen.runtime.loop.tool_context import ToolContext


def test_terminal_files_and_tools_address_the_same_sandbox(sandboxes):
    async def main():
        ctx = ToolContext("r", sandboxes)
        await ctx.write_file("a.txt", "alpha\n")
        result = await ctx.terminal("cat a.txt && exit 4")
        via_tool = await ctx.call_tool("read_file", {"path": "a.txt"})
        text = await ctx.read_file("a.txt")
        await ctx.cleanup()
        return result, via_tool, text

    result, via_tool, text = asyncio.run(main())
    assert result == {"exit_code": 4, "output": "alpha\n"}
    assert via_tool == text == "alpha\n"


def test_upload_and_download_are_binary_safe(sandboxes, tmp_path):
    blob = bytes(range(256)) * 64 + os.urandom(4096)
    source = tmp_path / "in"
    (source / "nested").mkdir(parents=True)
    (source / "blob.bin").write_bytes(blob)
    (source / "nested" / "text.txt").write_text("héllo\r\n")

    async def main():
        ctx = ToolContext("b", sandboxes)
        await ctx.upload_file(source / "blob.bin", "single.bin")
        written = await ctx.upload_dir(source, "tree")
        # the sandbox's own tools see exactly the same bytes
        digest = await ctx.terminal(
            "sha256sum single.bin tree/blob.bin | cut -c1-64 | uniq | wc -l"
        )
        await ctx.download_file("single.bin", tmp_path / "out" / "single.bin")
        downloaded = await ctx.download_dir("tree", tmp_path / "out" / "tree")
        await ctx.cleanup()
        return written, digest, downloaded

    written, digest, downloaded = asyncio.run(main())
    assert written == ["tree/blob.bin", "tree/nested/text.txt"]
    assert digest["output"].strip() == "1"
    assert (tmp_path / "out" / "single.bin").read_bytes() == blob
    assert (tmp_path / "out" / "tree" / "blob.bin").read_bytes() == blob
    assert (tmp_path / "out" / "tree" / "nested" / "text.txt").read_bytes() == "héllo\r\n".encode()
    assert len(downloaded) == 2


def test_cleanup_removes_the_sandbox_and_is_idempotent(sandboxes):
    async def main():
        ctx = ToolContext("c", sandboxes)
        await ctx.terminal("touch x")
        workspace = ctx.sandbox.workspace
        await ctx.cleanup()
        await ctx.cleanup()
        return workspace

    workspace = asyncio.run(main())
    assert not workspace.exists() and "c" not in sandboxes


def test_reward_code_stays_responsive_while_a_command_runs(sandboxes):
    async def main():
        ctx = ToolContext("n", sandboxes)
        ticks = 0

        async def tick():
            nonlocal ticks
            for _ in range(10):
                await asyncio.sleep(0.05)
                ticks += 1

        await asyncio.gather(ctx.terminal("sleep 0.6"), tick())
        await ctx.cleanup()
        return ticks

    assert asyncio.run(main()) == 10


def test_a_tool_without_a_sandbox_parameter_makes_no_sandbox(sandboxes):
    from hermes_envgen.runtime.tools import ToolRegistry, tool

    registry = ToolRegistry()

    @tool(registry=registry)
    async def echo(text: str) -> str:
        """Return the text."""
        return text

    async def main():
        ctx = ToolContext("pure", sandboxes, registry)
        output = await ctx.call_tool("echo", {"text": "hi"})
        made = "pure" in sandboxes
        await ctx.cleanup()
        return output, made

    assert asyncio.run(main()) == ("hi", False)
    assert not sandboxes.root.exists()  # not even the run's directory was created
