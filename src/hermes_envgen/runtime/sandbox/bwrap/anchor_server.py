"""The anchor of a bwrap sandbox: the process inside it that starts its commands.

Never imported by the host: ``anchor.py`` runs this file's code with the sandbox's own
``python3 -I -S`` as the sandbox's first process, already in its namespaces and its cgroup;
it confines itself first (``confine``: it binds the workspace, drops to the sandbox's user in
a user namespace of its own, sets its limits), which three more programs did before each
start (sh and mount, setpriv, unshare, bash). Each command is then one ``posix_spawn`` of
this small process, where entering the sandbox from the host costs several execs and a
cgroup move.

Arguments: ``LIMITS`` (``resource:value`` pairs, comma-separated: set soft and hard, once the
user namespace exists, so the process limit counts the sandbox's processes alone), ``DROP``
(empty when bwrap made the user namespace itself, the host process not being root; else
``uid:gid:fd:path``: bind the detached workspace of descriptor ``fd`` at ``path`` (fd -1:
none), drop every group, become ``uid``/``gid``, set no_new_privs, make a user namespace
mapping that uid and gid to themselves, and clear every capability), then the control
socket's descriptor.

Protocol, over the SOCK_SEQPACKET socket the host passes as file descriptor ``argv[1]``:
- once started, the anchor sends ``R`` with a pidfd of itself (the host learns its pid);
- per command the host sends the request (``argc``, the argv, then ``NAME=value`` pairs,
  NUL-separated) with two descriptors: the write end of the command's output pipe and a
  SOCK_SEQPACKET socket for the replies, on which the anchor sends ``S`` with a pidfd of the
  started command (or ``F<errno>:<message>`` if it could not start), then ``E<wait status>``;
- to end the agent's turn the host sends ``K`` (or ``k``: and leave ``/tmp`` as it is) with
  one reply socket: the anchor kills every other process of the sandbox, empties ``/tmp``
  and ``/dev/shm`` and checks that nothing of the sandbox it keeps was changed (its limits,
  priority, I/O priority, CPUs; no System V IPC object or POSIX message queue left), then
  answers ``K`` (the sandbox is as it
  started: verification may run in it) or ``N<why>`` (it is not: the host starts a fresh one).

The agent's processes run as the same user: the anchor makes itself non-dumpable, so they
cannot ptrace it or open its descriptors through /proc; its sockets are close-on-exec, so
no command inherits them, nor what the host left inheritable (closed at the start).
Killing it kills the sandbox (it is the PID namespace's main process), which the host
restarts at the next command. Written for any python3 from 3.9; the host sends it compiled
(``marshal``) by the sandbox's own python3, so no start compiles it.
"""

import os
import sys

if not hasattr(os, "pidfd_open"):  # Python 3.9
    sys.exit("the bwrap backend needs python3 3.9 or later inside the sandbox")

# Not signal, socket, ctypes nor contextlib: their imports would double the start-up time,
# which every sandbox pays. Nor array: it imports collections.abc (3 ms of CPU a start);
# descriptors travel as C ints packed by hand.
# ruff: noqa: SIM105  (try/except/pass, not contextlib.suppress)
import _signal  # type: ignore[import-not-found]  # CPython's own; typeshed has no stub
import _socket
import select
import time

PR_SET_DUMPABLE, PR_SET_NAME, PR_SET_NO_NEW_PRIVS = 4, 15, 38
MS_BIND, CLONE_NEWUSER = 4096, 0x10000000
MAX_REQUEST = 1 << 20
RESET_SECONDS = 5.0  # for the killed processes to be gone
MAX_TMP_ENTRIES = 100_000  # more left in /tmp: a fresh sandbox is cheaper than the clean-up
MAX_TMP_DEPTH = 64
SCRATCH = ("/tmp", "/dev/shm")  # what the agent can write besides the workspace
MQUEUE = "/dev/mqueue"  # the sandbox's own mqueue filesystem: its POSIX message queues
# ioprio_get(2)'s number by machine (os.uname); IOPRIO_WHO_PROCESS, with 0 for the caller
IOPRIO_GET = {"x86_64": 252, "aarch64": 31, "riscv64": 31, "i686": 290, "i386": 290,
              "armv7l": 315, "ppc64le": 274, "ppc64": 274, "s390x": 283}  # fmt: skip
IOPRIO_WHO_PROCESS = 1
DEFAULT_SIGNALS = tuple(
    n for n in _signal.valid_signals() if n not in (_signal.SIGKILL, _signal.SIGSTOP)
)
SCM_RIGHTS = _socket.SCM_RIGHTS
FD_SIZE = 4  # a C int, as SCM_RIGHTS carries descriptors on Linux


def receive(sock, buffer):
    """One message (read into ``buffer``) and the descriptors sent with it, close-on-exec."""
    size, ancillary, _, _ = sock.recvmsg_into([buffer], _socket.CMSG_SPACE(4 * FD_SIZE),
                                              _socket.MSG_CMSG_CLOEXEC)  # fmt: skip
    fds = []
    for level, kind, payload in ancillary:
        if level == _socket.SOL_SOCKET and kind == SCM_RIGHTS:
            for start in range(0, len(payload) - FD_SIZE + 1, FD_SIZE):
                fds.append(int.from_bytes(payload[start : start + FD_SIZE], sys.byteorder))
    return bytes(buffer[:size]), fds


def send_fd(sock, data, fd):
    packed = fd.to_bytes(FD_SIZE, sys.byteorder)
    sock.sendmsg([data], [(_socket.SOL_SOCKET, SCM_RIGHTS, packed)])


def parse(request):
    """The argv and environment of a request."""
    fields = request.decode("utf-8", "surrogateescape").split("\0")
    argc = int(fields[0])
    argv, pairs = fields[1 : 1 + argc], fields[1 + argc :]
    if not argv or argc < 1:
        raise ValueError("empty argv")
    return argv, dict(pair.split("=", 1) for pair in pairs if "=" in pair)


def report_failure(reply, exc):
    """Tell the host why a command did not start, and close its reply socket."""
    number = getattr(exc, "errno", None) or 0
    message = getattr(exc, "strerror", None) or str(exc)
    try:
        reply.send(f"F{number}:{message}".encode())
    except OSError:
        pass
    reply.close()


def start(data, fds, running, poller):
    """Start one requested command and tell the host its pid, or why it did not start."""
    if len(fds) != 2:
        for fd in fds:
            os.close(fd)
        return
    output, reply_fd = fds
    reply = _socket.socket(fileno=reply_fd)
    try:
        argv, env = parse(data)
        pid = os.posix_spawnp(
            argv[0], argv, env,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, output, 1),
                (os.POSIX_SPAWN_DUP2, output, 2),
            ],
            setsid=True,  # its own session and process group, which the host kills
            setsigdef=DEFAULT_SIGNALS,  # none ignored: Python's, or the host's, if started so
            setsigmask=(),
        )  # fmt: skip
    except (OSError, ValueError) as exc:
        report_failure(reply, exc)
        return
    finally:
        os.close(output)
    try:
        pidfd = os.pidfd_open(pid)
    except OSError as exc:  # out of descriptors: the host could not kill it, so stop it now
        os.kill(pid, _signal.SIGKILL)
        os.waitpid(pid, 0)
        report_failure(reply, exc)
        return
    running[pidfd] = (pid, reply)
    poller.register(pidfd, select.POLLIN)
    try:
        send_fd(reply, b"S", pidfd)
    except OSError:  # the host gave up on it: it runs and is reaped anyway
        pass


def finish(pidfd, running, poller):
    """Reap a command that exited and send the host its wait status."""
    pid, reply = running.pop(pidfd)
    poller.unregister(pidfd)
    os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    try:
        reply.send(b"E%d" % status)
    except OSError:
        pass
    reply.close()


def io_priority():
    """This process's I/O priority (ioprio_get(2)); None where its system call is not known
    (``reset`` then cannot vouch for it, and the sandbox restarts for verification)."""
    number = IOPRIO_GET.get(os.uname().machine)
    if number is None:
        return None
    return libc("syscall", number, IOPRIO_WHO_PROCESS, 0)


def own_state():
    """What of this process an agent's process of the same user could change, and every
    command inherits: limits, priority, I/O priority, scheduling, CPUs (see ``reset``)."""
    with open("/proc/self/limits") as file:
        limits = file.read()
    with open("/proc/self/stat", "rb") as file:
        fields = file.read().rsplit(b")", 1)[1].split()
    with open("/proc/self/status") as file:
        cpus = [line for line in file if line.startswith("Cpus_allowed")]
    # fields from the state on: 16 nice, 38 policy, 37 rt priority (stat(5) minus 3)
    return limits, fields[16], fields[37], fields[38], cpus, io_priority()


def others():
    """The pids of this PID namespace but its init's and the anchor's own."""
    me = os.getpid()
    return [n for n in os.listdir("/proc") if n.isdigit() and int(n) not in (1, me)]


def kill_the_rest(running, poller):
    """SIGKILL every other process of the sandbox; whether all are gone (reaped) in time.

    ``kill(-1)`` reaches every process of the PID namespace (nested ones too) but its init
    and the caller, atomically: a fork under way when it lands fails.
    """
    deadline = time.monotonic() + RESET_SECONDS
    while True:
        try:
            os.kill(-1, _signal.SIGKILL)
        except OSError:  # none left to signal
            pass
        for pidfd in list(running):
            finish(pidfd, running, poller)
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        if not others():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)  # orphans are reaped by the namespace's init


def empty(directory, fd=None, depth=0, budget=None):
    """Remove everything below ``directory`` (no link followed); whether it is empty now.

    Only the anchor runs meanwhile: nothing swaps an entry between a check and its use.
    """
    budget = budget if budget is not None else [MAX_TMP_ENTRIES]
    if depth > MAX_TMP_DEPTH:
        return False
    own = fd is None
    if own:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for entry in list(os.scandir(fd)):
            budget[0] -= 1
            if budget[0] < 0:
                return False
            if entry.is_dir(follow_symlinks=False):
                os.chmod(entry.name, 0o700, dir_fd=fd)  # the agent may have made it 000
                below = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
                                dir_fd=fd)  # fmt: skip
                try:
                    if not empty(entry.name, below, depth + 1, budget):
                        return False
                finally:
                    os.close(below)
                os.rmdir(entry.name, dir_fd=fd)
            else:
                os.unlink(entry.name, dir_fd=fd)
        return True
    finally:
        if own:
            os.close(fd)


def leftover_ipc():
    """Whether a System V IPC object of the agent's is left in the sandbox's namespace."""
    for kind in ("shm", "msg", "sem"):
        try:
            with open("/proc/sysvipc/" + kind) as file:
                if len(file.read().splitlines()) > 1:  # a header, then one line per object
                    return kind
        except OSError:
            pass
    return None


def leftover_message_queues():
    """Whether a POSIX message queue is left in the sandbox's IPC namespace (its mqueue
    filesystem is mounted at ``MQUEUE``; an OSError if it is not: no vouching then)."""
    return bool(os.listdir(MQUEUE))


def reset(data, fds, running, poller, state):
    """End the agent's turn (see the protocol above) and tell the host how it went."""
    for fd in fds[1:]:
        os.close(fd)
    reply = _socket.socket(fileno=fds[0])
    why = ""
    try:
        if not kill_the_rest(running, poller):
            why = "processes outlived SIGKILL"
        elif data == b"K" and not all(empty(path) for path in SCRATCH):
            why = "too much left in /tmp"
        elif leftover_ipc():
            why = "System V IPC objects left"
        elif leftover_message_queues():
            why = "POSIX message queues left"
        elif state[-1] is None:
            why = "the anchor's I/O priority cannot be read on this machine"
        elif own_state() != state:
            why = "the anchor's limits, scheduling or I/O priority were changed"
    except (OSError, RecursionError) as exc:
        why = str(exc)
    try:
        reply.send(b"N" + why.encode(errors="replace")[:500] if why else b"K")
    except OSError:
        pass
    reply.close()


def libc(name, *arguments):
    """A C library function called with ints, bytes (as pointers) or None; its int result.

    Through _ctypes (ctypes itself takes 3 ms to import); ctypes if need be."""
    try:
        import _ctypes

        # dlopen(NULL): the program itself (typeshed's stub allows a path only)
        function = _ctypes.dlsym(_ctypes.dlopen(None), name)  # type: ignore[arg-type]
        return _ctypes.call_function(function, arguments)
    except (ImportError, AttributeError, OSError):
        import ctypes

        return getattr(ctypes.CDLL(None), name)(*arguments)


def write_file(path, text):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def confine(limits, drop):
    """Become what the sandbox's commands run as (see the module's docstring)."""
    if drop:
        uid, gid, workspace, path = drop.split(":", 3)
        uid, gid, workspace = int(uid), int(gid), int(workspace)
        if workspace >= 0:  # bound in the sandbox's mount namespace, the only one that has it
            source = b"/proc/self/fd/%d" % workspace
            libc("mount", source, path.encode(), None, MS_BIND, None)
            os.close(workspace)
            if os.stat(path).st_dev == os.stat("/").st_dev:
                sys.exit("cannot bind the workspace")
            os.chdir(path)  # bwrap entered the directory under the mount
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)  # the capabilities of the host's namespace are gone
        # The uid change made it non-dumpable, so its /proc files root's: its maps below could
        # not be written. No other process runs in the sandbox yet; main() ends it again.
        libc("prctl", PR_SET_DUMPABLE, 1, 0, 0, 0)
        if libc("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            sys.exit("cannot set no_new_privs")
        host_namespace = os.readlink("/proc/self/ns/user")
        libc("unshare", CLONE_NEWUSER)
        if os.readlink("/proc/self/ns/user") == host_namespace:
            sys.exit("cannot make the sandbox's user namespace")
        write_file("/proc/self/setgroups", "deny")
        write_file("/proc/self/uid_map", f"{uid} {uid} 1")
        write_file("/proc/self/gid_map", f"{gid} {gid} 1")
        # None of the new namespace's capabilities either: a header (version 3, this
        # process), then effective, permitted and inheritable sets of two words, all empty.
        header = (0x20080522).to_bytes(4, sys.byteorder) + bytes(4)
        if libc("capset", header, bytes(24)) != 0:
            sys.exit("cannot drop the capabilities")
    for pair in filter(None, limits.split(",")):
        number, value = (int(field) for field in pair.split(":"))
        both = value.to_bytes(8, sys.byteorder) * 2  # struct rlimit64: soft, hard
        libc("prlimit64", 0, number, both, None)  # failing (a lower hard limit), it stays


def prctl(option, argument):
    """prctl(2)."""
    return libc("prctl", option, argument, 0, 0, 0)


def main(limits, drop, control_fd):
    confine(limits, drop)
    prctl(PR_SET_DUMPABLE, 0)  # no ptrace, no /proc/<pid>/fd by the agent (after the drop,
    # which made it dumpable again)
    prctl(PR_SET_NAME, b"sandbox-anchor")
    os.set_inheritable(control_fd, False)
    # Whatever else bwrap passed down (the host's inheritable descriptors): no command's.
    os.closerange(3, control_fd)
    os.closerange(control_fd + 1, 1 << 20)
    control = _socket.socket(fileno=control_fd)
    state = own_state()
    send_fd(control, b"R", os.pidfd_open(os.getpid()))
    poller = select.poll()
    poller.register(control_fd, select.POLLIN)
    running: dict[int, tuple[int, _socket.socket]] = {}  # pidfd -> pid, its reply socket
    buffer = bytearray(MAX_REQUEST)
    while True:
        for fd, _ in poller.poll():
            if fd != control_fd:
                finish(fd, running, poller)
                continue
            data, fds = receive(control, buffer)
            if not data and not fds:
                return  # the host closed its end: the sandbox ends
            if data in (b"K", b"k") and fds:
                reset(data, fds, running, poller, state)
            else:
                start(data, fds, running, poller)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
