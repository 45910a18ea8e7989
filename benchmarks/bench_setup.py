"""Set-up with uv vs. with pip, each from empty caches (cold) and again (warm); the demo's
first run (scripts/demo.sh: set-up, then the demo) cold and warm.

Each run is ``bash scripts/setup.sh`` in a fresh copy of this checkout with no venv, the
package index reached over the network. Cold: empty caches, and no uv anywhere (set-up installs
its pinned uv from the index first, as on a fresh machine). Warm: the same caches again, the venv
removed. pip runs with this machine's pip configuration switched off (PIP_CONFIG_FILE=/dev/null:
no local wheel directory or constraints) so that both download what the lock names.

    python benchmarks/bench_setup.py                # pip and uv, cold and warm (~10 minutes)
    python benchmarks/bench_setup.py --only uv --demo
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COPIED = ["scripts", "src", "hooks", "template", "examples", "hatch_build.py", "copier.yml"]
COPIED += ["README.md", "pyproject.toml", "uv.lock", "requirements-lock.txt"]


def copy_checkout(target: Path) -> Path:
    """The files set-up and the demo read, without .git, .venv or caches."""
    target.mkdir(parents=True)
    for name in COPIED:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, target / name)
    return target


def environment(installer: str, caches: Path, bin_dir: Path) -> dict[str, str]:
    """No uv on PATH, every cache under ``caches``, pip without this machine's configuration."""
    path = [part for part in os.environ["PATH"].split(":") if not (Path(part) / "uv").exists()]
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PIP_", "UV_", "VIRTUAL_ENV"))
    }
    env.update(
        PATH=":".join([str(bin_dir), *path]),
        XDG_CACHE_HOME=str(caches),
        UV_CACHE_DIR=str(caches / "uv"),
        PIP_CACHE_DIR=str(caches / "pip"),
        PIP_CONFIG_FILE="/dev/null",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        HERMES_ENVGEN_INSTALLER=installer,
        PYTHON="python3",
    )
    return env


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=3600)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(
            f"{' '.join(command)} failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
        )
    return elapsed


def measure(installer: str, demo: bool, work: Path) -> dict[str, float]:
    """Seconds of set-up (or of the demo's first run) cold, then warm."""
    caches = work / f"caches-{installer}"
    bin_dir = work / "bin"  # python3 alone: the interpreter this runs on
    if not bin_dir.exists():
        bin_dir.mkdir()
        (bin_dir / "python3").symlink_to(Path(sys.executable).resolve())
    env = environment(installer, caches, bin_dir)
    script = (
        ["bash", "scripts/demo.sh", str(work / "demo-out")]
        if demo
        else ["bash", "scripts/setup.sh"]
    )
    figures = {}
    for state in ("cold", "warm"):
        checkout = copy_checkout(work / f"repo-{installer}-{state}")
        shutil.rmtree(work / "demo-out", ignore_errors=True)
        figures[state] = timed(script, checkout, env)
        print(f"  {installer} {state}: {figures[state]:.1f} s", flush=True)
        shutil.rmtree(checkout)
    shutil.rmtree(caches)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=["pip", "uv"], help="one installer, no ratio")
    parser.add_argument("--demo", action="store_true", help="time scripts/demo.sh, not setup.sh")
    args = parser.parse_args()
    installers = [args.only] if args.only else ["uv", "pip"]
    what = "demo first run (scripts/demo.sh)" if args.demo else "set-up (scripts/setup.sh)"
    print(f"{what}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="bench-setup.") as tmp:
        results = {name: measure(name, args.demo, Path(tmp)) for name in installers}
    print("\n| installer | cold s | warm s |\n|---|---|---|")
    for name, figures in results.items():
        print(f"| {name} | {figures['cold']:.1f} | {figures['warm']:.1f} |")
    if len(results) == 2:
        for state in ("cold", "warm"):
            ratio = results["pip"][state] / results["uv"][state]
            print(f"pip / uv, {state}: {ratio:.1f}x")


if __name__ == "__main__":
    main()
