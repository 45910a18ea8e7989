"""The shell scripts the docker backend runs inside a container, and their exit codes.

``docker exec`` of ``sh -c SCRIPT``: the file scripts read, write and list workspace files
byte for byte, resolving every path inside the container and refusing what leads outside
``/workspace``; the kill scripts end processes with shell builtins only (a fork bomb may hold
every process slot); the verification scripts prepare what checks run with.
"""

from __future__ import annotations

from hermes_envgen.runtime.sandbox.workspace_files import MAX_LIST_DEPTH, MAX_LISTED_FILES

# Exit codes of the file scripts.
OUTSIDE, MISSING, DIRECTORY, NO_PARENT, NOT_REGULAR, DENIED, TOO_LARGE = 3, 4, 5, 6, 7, 8, 9

# Each file script gets the workspace as $1 and the path as $2 (already absolute and
# lexically inside, its bytes escaped by escaped_path); it resolves symlinks with realpath,
# as the container sees them. The dots keep a name's trailing newlines from $(...).
_CONFINE = """ws=$1
t=$(printf '%b.' "$2"); t=${t%.}
p=$(realpath -m -- "$t" && echo .) || exit 3
p=${p%.}; p=${p%?}
case $p in "$ws"|"$ws"/*) ;; *) echo "$t resolves to $p" >&2; exit 3 ;; esac
"""
_READABLE = """[ -e "$p" ] || exit 4
[ -d "$p" ] && exit 5
[ -f "$p" ] || exit 7
[ -r "$p" ] || exit 8
"""
# A path checked is not yet a file opened: a link swapped in meanwhile by a process of the
# agent's would lead outside. So the file is opened first (descriptor 3), and what the
# descriptor holds is checked before a byte moves.
_OPENED_INSIDE = """case $(readlink /proc/self/fd/3) in
  "$ws"/*) ;; *) echo "$t changed into a link while it was opened" >&2; exit 3 ;; esac
"""
_OPEN_TO_READ = _CONFINE + _READABLE + 'exec 3< "$p"\n' + _OPENED_INSIDE
READ_SCRIPT = _OPEN_TO_READ + "exec cat <&3\n"
# At most the first $3 bytes: a huge (or sparse) file never crosses docker exec whole.
HEAD_SCRIPT = _OPEN_TO_READ + 'exec head -c "$3" <&3\n'
# The same, refusing (exit 9) a file whose size is over $4 before a byte moves.
SIZED_SCRIPT = (
    _OPEN_TO_READ + '[ "$(stat -L -c %s /proc/self/fd/3)" -le "$4" ] || exit 9\n'
    'exec head -c "$3" <&3\n'
)
# The agent's user may not write every place of the workspace (chmod): the checks say so
# with an exit code, as the other backends say "permission denied", not in sh's words.
# $a: the deepest part of the parent directory that exists, where mkdir would start. The
# script enters the parent (a link swapped in later cannot move it), opens the file there
# without truncating it, checks what it opened, and only then truncates and writes it.
WRITE_SCRIPT = (
    _CONFINE
    + """[ -d "$p" ] && exit 5
parent=${p%/*}
a=$parent
while [ -n "$a" ] && [ ! -e "$a" ]; do a=${a%/*}; done
[ -d "$a" ] || exit 6
[ "$a" = "$parent" ] || [ -w "$a" ] || exit 8
mkdir -p -- "$parent" || exit 1
cd -P -- "$parent" || exit 1
case $(pwd -P) in "$ws"|"$ws"/*) ;; *) echo "$t changed into a link" >&2; exit 3 ;; esac
name=./${p##*/}
if [ -e "$name" ]; then [ -f "$name" ] || exit 7; [ -w "$name" ] || exit 8; fi
[ -e "$name" ] || [ -w . ] || exit 8
exec 3>> "$name"
"""
    + _OPENED_INSIDE
    + "exec cat > /proc/self/fd/3\n"
)
# Bounded as the other backends' listing (workspace_files): no deeper than MAX_LIST_DEPTH
# directories, at most MAX_LISTED_FILES files; what cannot be read is left out.
LIST_SCRIPT = (
    _CONFINE
    + f"""if [ -f "$p" ] && [ ! -L "$p" ]; then printf '%s\\0' "$p"; exit 0; fi
[ -d "$p" ] || exit 0
find "$p" -maxdepth {MAX_LIST_DEPTH + 1} -type f -print0 2>/dev/null |
  head -z -n {MAX_LISTED_FILES}
"""
)
# Kills every process whose environment holds the tag ($1); run by bash as the container's
# user. Only builtins: a fork bomb may hold every process slot the container has. Rounds
# catch children forked while their parents were being killed.
KILL_SCRIPT = """for round in 1 2 3 4 5 6 7 8 9 10; do
  found=
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    [ "$pid" = "$$" ] && continue
    while IFS= read -r -d '' variable; do
      if [ "$variable" = "$1" ]; then kill -9 "$pid"; found=1; break; fi
    done < "$d/environ"
  done 2>/dev/null
  [ -z "$found" ] && break
done
exit 0
"""

# Kills every process of the container but docker's init (pid 1) and its first child, the
# ``sleep infinity`` that keeps the container up; run by bash, builtins only (no process
# slot needed beyond its own); rounds catch what forked meanwhile.
KILL_ALL_SCRIPT = """read -r anchor _ < /proc/1/task/1/children
for round in 1 2 3 4 5 6 7 8 9 10; do
  found=
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    if [ "$pid" = 1 ] || [ "$pid" = "$anchor" ] || [ "$pid" = "$$" ]; then continue; fi
    kill -9 "$pid" 2>/dev/null && found=1
  done
  [ -z "$found" ] && break
done
exit 0
"""
# Kills the kept channel's agent of pid $1 that stopped answering (docker_channel), if that
# pid is still the agent's: a stopped process never reads the end of its stdin.
KILL_AGENT_SCRIPT = """[ "$(cat "/proc/$1/comm" 2>/dev/null)" = sandbox-channel ] && kill -9 "$1"
exit 0
"""
# Before verification, as the agent's user (the owner of all it left): /tmp emptied (as on
# bwrap, where verification gets a fresh one) and the verification's HOME ($1) made.
VERIFICATION_TMP_SCRIPT = """chmod -R u+rwX /tmp/* /tmp/.[!.]* /tmp/..?* 2>/dev/null
find /tmp -mindepth 1 -delete 2>/dev/null
mkdir -m 0700 -- "$1"
"""
# Writes stdin to the check file $2 below the fresh check directory $1, as root: the
# directory (in the sticky /tmp) and the file are root's and read-only to everyone else.
INSTALL_SCRIPT = """umask 022
[ -d "$1" ] || mkdir -m 0755 -- "$1" || exit 1
mkdir -p -- "$(dirname -- "$2")" && cat > "$2" && chmod 0444 -- "$2"
"""
