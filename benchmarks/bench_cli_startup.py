"""Wall time of ``hermes-envgen --help`` against ``python -c pass``, side by side in one run.

The CLI must not import atroposlib or transformers just to print its help: this shows what a
user waits for beyond the interpreter's own start.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

RUNS = 15


def wall(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    cli = [sys.executable, "-m", "hermes_envgen", "--help"]
    bare = [sys.executable, "-c", "pass"]
    wall(cli)  # warm the file cache
    cli_times, bare_times = [], []
    for _ in range(RUNS):  # alternate, so both see the same machine load
        cli_times.append(wall(cli))
        bare_times.append(wall(bare))
    cli_median, bare_median = statistics.median(cli_times), statistics.median(bare_times)
    print(f"hermes-envgen --help: {cli_median * 1000:6.0f} ms (median of {RUNS})")
    print(f"python -c pass:       {bare_median * 1000:6.0f} ms")
    print(
        f"ratio: {cli_median / bare_median:.1f}x, {1000 * (cli_median - bare_median):.0f} ms more"
    )


if __name__ == "__main__":
    main()
