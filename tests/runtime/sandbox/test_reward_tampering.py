"""An agent that answers wrong and then tries to make the verification pass anyway.

Each attack runs on every backend where docs/concepts/sandboxes.md promises to stop it: local
stops tagged background processes and ignores a planted user site; bwrap and docker also keep
the check files out of the agent's reach and stop daemons that clear their environment.
"""

from __future__ import annotations

import asyncio

import pytest
from helpers.sandbox import (
    BWRAP,
    DOCKER,
    LOCAL,
    alive,
    make_manager,
    processes_running,
    sleep_mark,
    sleep_needle,
)

from hermes_envgen.runtime.loop.tool_context import ToolContext
from hermes_envgen.runtime.rewards import verify_in_sandbox
from hermes_envgen.runtime.sandbox.bwrap.backend import PROCESS_SLACK

BOTH = [LOCAL, BWRAP, DOCKER]
ISOLATED = [BWRAP, DOCKER]
FAILING_CHECK = {"check.sh": "exit 1\n"}

# Rewrites every check file it can find, for as long as it lives.
REWRITER = """
while :; do
    for d in /workspace/.verify-* "$PWD"/.verify-* /verify-* /tmp/.verify-*; do
        printf 'exit 0\\n' > "$d/check.sh" 2>/dev/null
    done
    sleep 0.01
done
"""


def verify(ctx: ToolContext, command: str = "/bin/bash {checks}/check.sh", checks=None):
    return verify_in_sandbox(ctx, checks or FAILING_CHECK, command, timeout=20)


@pytest.mark.parametrize("backend", BOTH)
def test_a_background_process_cannot_rewrite_the_check(backend, tmp_path):
    manager = make_manager(tmp_path, backend)
    marks = [sleep_mark(7201), sleep_mark(7202)]  # this test's alone, among the host's
    daemons = (
        f"(setsid nohup sleep {marks[0]} >/dev/null 2>&1 &); sleep {marks[1]} >/dev/null 2>&1 &"
    )
    if backend != "local":  # a daemon that drops its run tag too: local does not promise it
        marks.append(sleep_mark(7203))
        daemons += f" (setsid env -i /bin/sh -c 'exec sleep {marks[2]}' >/dev/null 2>&1 &);"

    async def main():
        ctx = ToolContext("rewriter", manager)
        await ctx.write_file("rewriter.sh", REWRITER)
        await ctx.terminal(
            f"(setsid nohup bash rewriter.sh >/dev/null 2>&1 &); {daemons} sleep 0.3"
        )
        before = processes_running(*map(sleep_needle, marks))
        # the check waits a moment: time enough for the rewriter, were it still running
        outcome = await verify(ctx, "sleep 1; /bin/bash {checks}/check.sh")
        survivors = {pid for pid in before if alive(pid)}
        await manager.close_all()
        return before, outcome, survivors

    before, outcome, survivors = asyncio.run(main())
    assert len(before) == len(marks)
    assert outcome["exit_code"] == 1, outcome
    assert not survivors, "a process of the rollout outlived it into verification"


@pytest.mark.parametrize("backend", ISOLATED)
def test_verification_cannot_change_or_replace_its_own_check_files(backend, tmp_path):
    # Code of the agent's that the check runs (a test importing the solution, say) tries it.
    manager = make_manager(tmp_path, backend)
    tamper = """
        here=$(dirname "$0")
        printf 'exit 0\\n' > "$here/check.sh"; chmod 777 "$here/check.sh"
        mv "$here" "$here.old"; rm -rf "$here"; mkdir -p "$here"
        printf 'exit 0\\n' > "$here/check.sh"
    """
    checks = {**FAILING_CHECK, "solution_test.sh": tamper}

    async def main():
        ctx = ToolContext("self-tamper", manager)
        outcome = await verify(
            ctx,
            "/bin/bash {checks}/solution_test.sh 2>/dev/null; /bin/bash {checks}/check.sh",
            checks,
        )
        await manager.close_all()
        return outcome

    assert asyncio.run(main())["exit_code"] == 1


@pytest.mark.parametrize("backend", BOTH)
def test_a_planted_user_site_path_or_rc_file_does_not_change_the_check(backend, tmp_path):
    manager = make_manager(tmp_path, backend)
    plant = (
        'site=$(python3 -c "import site; print(site.getusersitepackages())") &&'
        ' mkdir -p "$site" && printf "import os\\nos._exit(0)\\n" > "$site/usercustomize.py" &&'
        ' printf "import os\\nos._exit(0)\\n" > "$site/sitecustomize.py" &&'
        " mkdir -p bin && printf '#!/bin/sh\\nexit 0\\n' > bin/python3 && chmod +x bin/python3 &&"
        " echo 'export PATH=$HOME/bin:$PATH' | tee -a .bashrc .profile .bash_profile > /dev/null"
    )
    checks = {"check.py": "raise SystemExit(1)\n"}

    async def main():
        ctx = ToolContext("user-site", manager)
        planted = await ctx.terminal(plant)
        # as the agent, the plant works: python3 passes whatever it is asked
        gamed = await ctx.terminal("python3 -c 'raise SystemExit(1)'")
        outcome = await verify(ctx, "python3 {checks}/check.py", checks)
        login_shell = await ctx.terminal("bash -lc 'python3 -c \"raise SystemExit(1)\"'")
        await manager.close_all()
        return planted, gamed, outcome, login_shell

    planted, gamed, outcome, login_shell = asyncio.run(main())
    assert planted["exit_code"] == 0, planted
    assert gamed["exit_code"] == 0
    assert outcome["exit_code"] == 1, outcome
    assert login_shell["exit_code"] == 1, login_shell


@pytest.mark.parametrize("backend", ISOLATED)
def test_verification_sees_none_of_what_the_agent_left_in_tmp(backend, tmp_path):
    # A check that trusts a path in /tmp (a cache, a lock file, a tool it drops there) must
    # not find the agent's version of it, whatever its permissions.
    plant = (
        "printf 'exit 0\\n' > /tmp/check-helper.sh; mkdir -p /tmp/.cache/x /tmp/locked;"
        " touch /tmp/locked/f; chmod 000 /tmp/locked /tmp/check-helper.sh"
    )

    async def main():
        ctx = ToolContext("tmp-plant", manager)
        planted = await ctx.terminal(plant)
        outcome = await verify(ctx, "ls -A /tmp | grep -v '^\\.verify-' | grep -v '^\\.home-'")
        await manager.close_all()
        return planted, outcome

    manager = make_manager(tmp_path, backend)
    planted, outcome = asyncio.run(main())
    assert planted["exit_code"] == 0, planted
    assert outcome["output"] == "", outcome  # nothing listed: /tmp was emptied


# The anchor: the sandbox's long-lived process that starts every command, as their user.
FIND_ANCHOR = (
    'for p in /proc/[0-9]*; do [ "$(cat $p/comm)" = sandbox-anchor ] && anchor=${p#/proc/}'
    " && break; done; echo anchor=$anchor;"
)
ATTACH = (
    "import ctypes, os, sys; libc = ctypes.CDLL(None, use_errno=True);"
    ' print("attach", libc.ptrace(16, int(sys.argv[1]), 0, 0), os.strerror(ctypes.get_errno()))'
)


@pytest.mark.parametrize("backend", [BWRAP])
def test_the_anchor_cannot_be_taken_over_and_runs_under_the_limits(backend, tmp_path):
    manager = make_manager(tmp_path, backend, max_processes=64, memory_mb=512, max_file_mb=8)
    attack = (
        f"{FIND_ANCHOR} python3 -c '{ATTACH}' $anchor;"
        " ls /proc/$anchor/fd >/dev/null 2>&1 || echo fds refused;"
        " grep -E '^Max (processes|file size|address space)' /proc/$anchor/limits"
    )

    async def main():
        ctx = ToolContext("ptrace", manager)
        result = await ctx.terminal(attack, timeout=60)
        await manager.close_all()
        return result["output"]

    output = asyncio.run(main())
    lines = output.splitlines()
    assert lines[0].startswith("anchor=") and lines[0] != "anchor=", output
    assert lines[1] == "attach -1 Operation not permitted", output
    assert lines[2] == "fds refused", output
    limits = {line.split("  ")[0]: line.split()[-3] for line in lines[3:]}
    assert limits == {
        "Max file size": str(8 * 1024 * 1024),
        "Max processes": str(64 + PROCESS_SLACK),  # room to start a command past a fork bomb
        "Max address space": str(512 * 1024 * 1024),
    }, output


# What a process of the agent's can change of the anchor (same user, no ptrace needed), which
# every command it starts inherits, and what it can leave in the sandbox besides files.
ANCHOR_TAMPERING = {
    "untouched": "true",
    "priority": "renice -n 7 -p $anchor",
    "file limit": "prlimit --pid $anchor --nofile=100:100",
    "cpus": "taskset -p 1 $anchor",
    "ipc": "ipcmk -M 4096",
    "io priority": "ionice -c 3 -p $anchor",
    "message queue": "python3 -c \"import ctypes,os; ctypes.CDLL(None).mq_open(b'/agent',"
    ' os.O_CREAT | os.O_RDWR, 0o600, None)" && ls /dev/mqueue | grep -qx agent',
}
PRISTINE = (
    "echo nice=$(nice) files=$(ulimit -n) $(grep Cpus_allowed_list /proc/self/status | tr -d '\\t')"
    " shm=$(ipcs -m | grep -c '^0x') sleeping=$(pgrep -c -x sleep) io=\"$(ionice)\""
    " queues=$(ls /dev/mqueue | wc -l)"
)


@pytest.mark.slow
@pytest.mark.parametrize("backend", [BWRAP])
def test_verification_reuses_the_sandbox_only_when_the_agent_changed_nothing(backend, tmp_path):
    # The anchor ends the agent's turn without a second sandbox start: it kills every other
    # process, then refuses to serve verification if the agent changed what commands inherit.
    manager = make_manager(tmp_path, backend)

    async def one(case: str, tamper: str):
        ctx = ToolContext(f"reuse-{case.replace(' ', '-')}", manager)
        done = await ctx.terminal(f"{FIND_ANCHOR} {tamper} >/dev/null && sleep 7204 &")
        anchor = ctx.sandbox._anchor
        outcome = await verify(ctx, PRISTINE)
        return done, ctx.sandbox._anchor is anchor, outcome

    async def main():
        results = await asyncio.gather(*(one(c, t) for c, t in ANCHOR_TAMPERING.items()))
        left = processes_running(b"sleep\x007204")
        await manager.close_all()
        return dict(zip(ANCHOR_TAMPERING, results)), left

    results, left = asyncio.run(main())
    assert not left
    pristine = results["untouched"][2]
    assert pristine["exit_code"] == 0 and "nice=0 " in pristine["output"], pristine
    assert "shm=0 sleeping=0 io=none: prio 0 queues=0" in pristine["output"], pristine
    for case, (done, reused, outcome) in results.items():
        assert done["exit_code"] == 0, (case, done)
        assert reused == (case == "untouched"), case
        assert outcome == pristine, case  # a fresh sandbox's view when the anchor was changed
