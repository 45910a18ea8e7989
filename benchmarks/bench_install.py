"""What a worker installs to run a generated project: before the extras and now, side by side.

A default project (toolsets terminal and file) is generated once. Each round makes two fresh
venvs and installs into each, in one uv command, hermes-envgen from source and the project at
the versions of its constraints.txt: "before" with hermes-envgen of BASELINE (every library a
dependency) and the project's dependency line as that release's template wrote it (no
extras), "now" with this checkout's files and the project as rendered; both sources without
.git, built alike. uv runs
offline from the cache scripts/setup.sh filled (no network); the figures are the install's
wall time, the site-packages' size on disk and its distributions.

    python benchmarks/bench_install.py                    # baseline 700c4ad, 2 rounds (~1 min)
    python benchmarks/bench_install.py --baseline REV --rounds 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
UV = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
OLD_DEPENDENCY = '"hermes-envgen~=0.1",'  # the dependency line before the toolsets' extras


def run(command: list[str], *, text: bool = True, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(command, capture_output=True, text=text, stdin=subprocess.DEVNULL,
                          timeout=900, **kwargs)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{str(done.stderr)[-3000:]}")
    return done


def baseline_source(revision: str, where: Path) -> Path:
    """The checkout at ``revision`` (git archive: its files, no .git)."""
    archive = run(["git", "-C", str(REPO), "archive", "--format=tar", revision], text=False)
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(where, filter="data")
    return where


def working_tree(where: Path) -> Path:
    """This checkout's files as they are now (tracked or new, not ignored), without .git: built
    as the baseline's archive is."""
    listed = run(["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard", "-z"])
    for name in filter(None, listed.stdout.split("\0")):
        if (REPO / name).is_file():
            (where / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, where / name)
    return where


def generated_project(where: Path) -> tuple[Path, Path]:
    """A default project as rendered now, and a copy with the dependency line of before."""
    cli = str(Path(sys.executable).parent / "hermes-envgen")
    run([cli, "new", "bench-env", "--defaults", "-o", str(where)])
    now = where / "bench-env"
    before = where / "bench-env-before"
    shutil.copytree(now, before, ignore=shutil.ignore_patterns(".git"))
    pyproject = before / "pyproject.toml"
    lines = pyproject.read_text().splitlines(keepends=True)
    (index,) = [i for i, line in enumerate(lines) if line.strip().startswith('"hermes-envgen[')]
    lines[index] = f"    {OLD_DEPENDENCY}\n"
    pyproject.write_text("".join(lines))
    return now, before


def site_size(venv: Path) -> tuple[int, int]:
    """Bytes on disk under site-packages (each hard-linked file once) and its distributions."""
    (site,) = venv.glob("lib/python*/site-packages")
    seen, total = set(), 0
    for root, _, files in os.walk(site):
        for name in files:
            stat = os.lstat(os.path.join(root, name))
            if (stat.st_dev, stat.st_ino) not in seen:
                seen.add((stat.st_dev, stat.st_ino))
                total += stat.st_blocks * 512
    return total, len(list(site.glob("*.dist-info")))


def install(source: Path, project: Path, venv: Path, env: dict[str, str]) -> float:
    """Seconds to install hermes-envgen from ``source`` and ``project`` into a fresh venv."""
    run([UV, "venv", "--quiet", "--python", sys.executable, str(venv)], env=env)
    constraints = str(project / "constraints.txt")
    started = time.monotonic()
    run([UV, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"),
         "-c", constraints, str(source), str(project)], env=env)  # fmt: skip
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="700c4ad", help="hermes-envgen before the extras")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(UV_OFFLINE="1", UV_COMPILE_BYTECODE="0", UV_LINK_MODE="copy")
    with tempfile.TemporaryDirectory(prefix="bench-install-") as tmp:
        work = Path(tmp)
        old_source = baseline_source(args.baseline, work / "baseline")
        new_source = working_tree(work / "now")
        now_project, old_project = generated_project(work / "projects")
        sides = {"before": (old_source, old_project), "now": (new_source, now_project)}
        times: dict[str, list[float]] = {side: [] for side in sides}
        sizes: dict[str, tuple[int, int]] = {}
        for round_ in range(args.rounds):
            for side, (source, project) in sides.items():
                venv = work / f"venv-{side}-{round_}"
                times[side].append(install(source, project, venv, env))
                sizes[side] = site_size(venv)
                shutil.rmtree(venv)
    print(f"default project (terminal, file); uv offline from its cache; {args.rounds} rounds")
    print(f"{'':8} {'install s (best)':>17} {'site-packages MB':>17} {'distributions':>14}")
    for side in sides:
        size, count = sizes[side]
        print(f"{side:8} {min(times[side]):17.1f} {size / 1e6:17.0f} {count:14d}")
    (old_size, old_count), (new_size, new_count) = sizes["before"], sizes["now"]
    print(
        f"now / before: size {new_size / old_size:.2f} ({(old_size - new_size) / 1e6:.0f} MB "
        f"less), {old_count - new_count} distributions fewer, time "
        f"{min(times['now']) / min(times['before']):.2f}"
    )


if __name__ == "__main__":
    main()
