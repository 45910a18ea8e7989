"""The statistics of evaluation: pass@k and pass^k estimators and 95% intervals."""

from __future__ import annotations

import math
import statistics

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile: two-sided 95% intervals
# A weighted sum that should be 1.0 may come out as 0.9999999999999999: it still passes.
PASS_TOLERANCE = 1e-9


def wilson_interval(p: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion ``p`` observed over ``n`` units."""
    p = min(1.0, max(0.0, p))
    denominator = 1.0 + z * z / n
    center = (p + z * z / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1.0 - p) / n + z * z / (4 * n * n))
    return max(0.0, center - half), min(1.0, center + half)


def normal_interval(values: list[float], z: float = Z95) -> tuple[float, float] | None:
    """Mean ± z standard errors of ``values``; None with fewer than two values."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    half = z * statistics.stdev(values) / math.sqrt(len(values))
    return mean - half, mean + half


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased chance that at least one of k samples passes, from n samples with c passing."""
    if n < k:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased chance that all of k samples pass (pass^k), from n samples with c passing."""
    if n < k:
        raise ValueError(f"pass^{k} needs at least {k} samples, got {n}")
    return math.comb(c, k) / math.comb(n, k)


def passed(reward: float, threshold: float) -> bool:
    """Whether a rollout with this reward counts as passed."""
    return reward >= threshold - PASS_TOLERANCE
