"""Workspaces made to hurt the host that reads them: odd names, deep trees, huge files."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import tracemalloc
from pathlib import Path

import pytest
from helpers.sandbox import BWRAP, DOCKER, LOCAL, make_manager

from hermes_envgen.runtime.loop.tool_context import ToolContext
from hermes_envgen.runtime.sandbox import SandboxError

EVERY_BACKEND = [LOCAL, BWRAP, DOCKER]
DEEP = 3000
MOST_A_READ_RETURNS = 250_000  # characters: read_file's cap and its notice
# What the host may allocate to read a 300 MiB file: read_file takes 8 MB of it, search_files
# skips it after 2 MB; the whole file pulled into the host would be 300 MiB.
MOST_A_READ_ALLOCATES = 100 * 1024 * 1024

# Builds a directory tree DEEP levels deep (far beyond PATH_MAX) with a file at the bottom.
DEEP_TREE = f"""python3 - <<'EOF'
import os
os.mkdir("deep")
os.chdir("deep")
for _ in range({DEEP}):
    os.mkdir("d")
    os.chdir("d")
with open("bottom.txt", "w") as file:
    file.write("needle\\n")
EOF
echo needle > top.txt"""


@pytest.mark.parametrize("backend", EVERY_BACKEND)
def test_download_dir_writes_only_below_its_destination(backend, tmp_path):
    manager = make_manager(tmp_path, backend)
    destination = tmp_path / "host" / "dst"
    # "out/" plus 9 characters is as long as "workspace/out": the rest used to become "../"
    names = "out/XXXXXXXXX../evil out/XXXXXXXXX../../evil2 out/ok/good"

    async def main():
        ctx = ToolContext("download", manager)
        made = await ctx.terminal(
            f"for f in {names}; do mkdir -p $(dirname $f) && echo pwned > $f; done; find out"
        )
        written = await ctx.download_dir(f"{ctx.sandbox.workdir}/out", destination)
        relative = await ctx.download_dir("out", tmp_path / "host" / "dst2")
        await manager.close_all()
        return made, written, relative

    made, written, relative = asyncio.run(main())
    assert "XXXXXXXXX.." in made["output"], made
    for path in [*written, *relative]:
        assert path.resolve().is_relative_to(tmp_path / "host"), path
    assert sorted(p.relative_to(destination).as_posix() for p in written) == [
        "XXXXXXXXX../evil",
        "evil2",  # made at out/XXXXXXXXX../../evil2, that is out/evil2
        "ok/good",
    ]
    assert not (tmp_path / "host" / "evil").exists()
    assert not (tmp_path / "evil2").exists()


@pytest.mark.parametrize("backend", EVERY_BACKEND)
def test_a_tree_thousands_deep_is_searched_and_removed(backend, tmp_path):
    manager = make_manager(tmp_path, backend)

    async def main():
        ctx = ToolContext("deep", manager)
        made = await ctx.terminal(DEEP_TREE, timeout=60)
        found = await ctx.call_tool("search_files", {"pattern": "needle"})
        listed = await ctx.sandbox.list_files(".")
        await manager.close_all()
        return made, found, listed

    made, found, listed = asyncio.run(main())
    assert made["exit_code"] == 0, made
    assert found == "top.txt:1: needle"  # the bottom lies deeper than any listing goes
    assert len(listed) == 1
    assert not list((tmp_path / backend).rglob("*d/d/d*"))  # the workspace (host backends)


@pytest.mark.parametrize("backend", EVERY_BACKEND)
def test_undecodable_names_and_contents_reach_the_model_as_valid_text(backend, tmp_path):
    manager = make_manager(tmp_path, backend)

    async def main():
        ctx = ToolContext("names", manager)
        await ctx.terminal("printf 'needle \\377\\376\\n' > \"$(printf 'bad\\377name.txt')\"")
        outputs = [
            await ctx.call_tool("search_files", {"pattern": "needle"}),
            await ctx.call_tool("terminal", {"command": "ls; cat bad*"}),
            await ctx.call_tool("read_file", {"path": "bad\udcffname.txt"}),
        ]
        await manager.close_all()
        return outputs

    outputs = asyncio.run(main())
    for output in outputs:
        output.encode("utf-8")  # no lone surrogate: the tokenizer and the JSON encoder take it
        json.dumps(output, ensure_ascii=False).encode("utf-8")
    assert "bad\\xffname.txt:1: needle" in outputs[0]


@pytest.mark.parametrize("backend", EVERY_BACKEND)
def test_a_huge_sparse_file_is_read_in_bounded_pieces(backend, tmp_path):
    manager = make_manager(tmp_path, backend)

    async def main():
        ctx = ToolContext("sparse", manager)
        await ctx.terminal("truncate -s 300M big.bin && printf 'line\\n' > small.txt")
        tracemalloc.start()
        try:
            head = await ctx.call_tool("read_file", {"path": "big.bin", "end_line": 1})
            whole = await ctx.call_tool("read_file", {"path": "big.bin"})
            found = await ctx.call_tool("search_files", {"pattern": "line"})
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        await manager.close_all()
        return head, whole, found, peak

    head, whole, found, peak = asyncio.run(main())
    assert peak < MOST_A_READ_ALLOCATES, f"reading took {peak / 2**20:.0f} MiB of the host's memory"
    for output in (head, whole):
        assert len(output) < MOST_A_READ_RETURNS
        assert "only its start was read" in output or "cut at" in output
    assert "small.txt:1: line" in found
    assert "1 binary or larger than" in found


@pytest.mark.parametrize("backend", EVERY_BACKEND)
def test_a_link_swapped_while_the_host_reads_never_leads_outside(backend, tmp_path):
    manager = make_manager(tmp_path, backend)
    # docker: the host's file operations run in the container, where outside is its /tmp
    outside = "/tmp/outside" if backend == "docker" else str(tmp_path / "outside")
    tries = 100 if backend == "docker" else 3000  # two docker execs each: a quarter second
    swap = (
        f"while :; do rm -rf d; mkdir d; echo inside > d/secret; rm -rf d; ln -s {outside} d; done"
    )

    async def main():
        ctx = ToolContext("swap", manager)
        sandbox = ctx.sandbox
        if backend == "docker":
            await ctx.terminal(f"mkdir {outside} && echo secret > {outside}/secret")
        else:
            os.mkdir(outside)
            Path(outside, "secret").write_text("secret\n")
        await ctx.terminal(f"(setsid bash -c '{swap}' > /dev/null 2>&1 &); sleep 0.2")
        leaked = 0
        for _ in range(tries):
            with contextlib.suppress(SandboxError):
                leaked += (await sandbox.read_bytes("d/secret")) == b"secret\n"
            with contextlib.suppress(SandboxError):
                await sandbox.write_bytes("d/planted", b"x")
        if backend == "docker":
            left = (await ctx.terminal(f"ls {outside}"))["output"].split()
        else:
            left = os.listdir(outside)
        await manager.close_all()
        return leaked, left

    leaked, left = asyncio.run(main())
    assert leaked == 0
    assert left == ["secret"]  # nothing planted
