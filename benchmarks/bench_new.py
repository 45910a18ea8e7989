"""Wall time of ``hermes-envgen new --defaults`` against a bare ``copier copy --defaults``.

Both render the same template: the same bundle, the same tag, git redirected the same way, the
same copier mirror cache. What ``new`` adds on top is its own start-up, the template lookup and
the post-generation hooks (ruff, git init + first commit). Runs alternate; the median ratio is
reported (target: at most 1.05).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hermes_envgen.generate.source import default_ref, git_redirect, template_source, template_url

RUNS = 7


def wall(command: list[str], env: dict[str, str]) -> float:
    """Seconds one command takes, start to exit."""
    start = time.perf_counter()
    subprocess.run(
        command, env=env, check=True, stdin=subprocess.DEVNULL, capture_output=True, text=True
    )
    return time.perf_counter() - start


def main() -> None:
    bundle = template_source()  # a source checkout builds it here, outside the timings
    tag, url = default_ref(bundle), template_url()
    with tempfile.TemporaryDirectory(prefix="bench-new.") as tmp:
        out = Path(tmp)
        env = {
            **os.environ,
            "COPIER_CACHE_DIR": str(out / "copier-cache"),
            # What a wheel does: the bundle is at hand, no working tree to fingerprint.
            "HERMES_ENVGEN_TEMPLATE_SOURCE": str(bundle),
        }
        bare_env = {**env, **git_redirect(url, bundle)}

        def new(name: str) -> list[str]:
            options = ["--defaults", "--output-dir", str(out)]
            return [sys.executable, "-m", "hermes_envgen", "new", name, *options]

        def bare(name: str) -> list[str]:
            options = ["--defaults", "--quiet", "--vcs-ref", tag, "--data", f"project_name={name}"]
            return [sys.executable, "-m", "copier", "copy", *options, url, str(out / name)]

        wall(new("warm-new"), env)  # the mirror clone and the file cache, for both
        wall(bare("warm-bare"), bare_env)
        pairs = []
        for run in range(RUNS):  # alternate, so both see the same machine load
            pairs.append((wall(new(f"new-{run}"), env), wall(bare(f"bare-{run}"), bare_env)))
    new_median = statistics.median(a for a, _ in pairs)
    bare_median = statistics.median(b for _, b in pairs)
    ratio = statistics.median(a / b for a, b in pairs)
    print(f"hermes-envgen new --defaults: {new_median * 1000:6.0f} ms (median of {RUNS})")
    print(f"copier copy --defaults:       {bare_median * 1000:6.0f} ms")
    print(f"ratio: {ratio:.2f} (median of per-run ratios; target <= 1.05)")


if __name__ == "__main__":
    main()
