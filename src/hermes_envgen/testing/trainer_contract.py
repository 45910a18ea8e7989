"""What atroposlib's example GRPO trainer needs of the groups it trains on, checked without torch.

The reference trainer that ships with atroposlib 0.4.0 (``example_trainer``, the ``atropos-grpo``
command) batches groups with ``pad_data_to_good_offset`` and computes a clipped GRPO loss. Read
off its code, it needs of every group:

- ``tokens``, ``masks`` and ``scores`` of one length, and an ``overrides`` key (it reads
  ``item["overrides"]``; None is fine);
- masks of each sequence as long as its tokens, holding -100 (not trained) or the token itself:
  the masks become the labels of the loss;
- ``inference_logprobs``, the logprob the sampler gave each token, aligned with ``tokens``: its
  loss is an importance ratio against them, and without them it stops ("GRPO requires
  inference_logprobs"; the ``null`` that run-api hands out for a group without them already
  fails its batching with a TypeError). Chat-mode sampling (the server parses tool calls and
  returns text) has no token ids and so no such logprobs; token mode (``inference_api``
  completions or generate on vLLM or SGLang) has them;
- scores that differ within the group: advantages are the scores less their group's mean, so a
  group whose scores are all equal adds no gradient, and a batch of such groups trains nothing
  (a warning: whether scores differ is the policy's doing as much as the env's).

:func:`trainer_problems` says which of these a set of groups breaks, in words a user can act on;
``hermes-envgen check`` turns it into its "trainer-ready" row.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from hermes_envgen.runtime.inference import CHAT_MODE_DATA

NOT_TRAINED = -100  # a mask value: the position is not trained

NO_LOGPROBS = f"no inference_logprobs: {CHAT_MODE_DATA}"


@dataclass
class TrainerVerdict:
    """Whether a trainer can take steps on some groups: blocking problems, then warnings."""

    groups: int = 0
    sequences: int = 0
    trained_tokens: int = 0
    problems: list[str] = field(default_factory=list)  # the trainer would fail or refuse
    warnings: list[str] = field(default_factory=list)  # it would run, learning less

    @property
    def ready(self) -> bool:
        return not self.problems


def trainer_problems(groups: Iterable[dict]) -> TrainerVerdict:
    """Check ``groups`` (as ``process`` writes them or run-api hands them out) against the
    example trainer's needs. The first problem of each kind is named with its group and
    sequence; the rest are counted."""
    verdict = TrainerVerdict()
    found: dict[str, tuple[str, int]] = {}  # kind -> (first message, count)
    without_logprobs = equal_scores = 0

    def problem(kind: str, message: str) -> None:
        first, count = found.get(kind, (message, 0))
        found[kind] = (first, count + 1)

    for g, group in enumerate(groups):
        verdict.groups += 1
        tokens, masks, scores = group.get("tokens"), group.get("masks"), group.get("scores")
        if not (isinstance(tokens, list) and isinstance(masks, list) and isinstance(scores, list)):
            problem("shape", f"group {g} lacks tokens, masks or scores")
            continue
        if not len(tokens) == len(masks) == len(scores) or not tokens:
            problem(
                "shape",
                f"group {g} has {len(tokens)} token sequences, {len(masks)} masks and "
                f"{len(scores)} scores",
            )
            continue
        if "overrides" not in group:
            problem("overrides", f"group {g} has no 'overrides' key (None will do)")
        if not all(isinstance(s, (int, float)) and math.isfinite(s) for s in scores):
            problem("scores", f"group {g} has a score that is not a finite number: {scores}")
        elif len(scores) > 1 and max(scores) == min(scores):
            equal_scores += 1
        logprobs = group.get("inference_logprobs")
        if not logprobs:
            without_logprobs += 1
        elif len(logprobs) != len(tokens):
            problem(
                "logprobs",
                f"group {g} has inference_logprobs for {len(logprobs)} of {len(tokens)} sequences",
            )
            logprobs = None
        for i, (ids, mask) in enumerate(zip(tokens, masks)):
            verdict.sequences += 1
            where = f"group {g}, sequence {i}"
            if len(ids) != len(mask):
                problem("masks", f"{where}: {len(ids)} tokens but {len(mask)} mask values")
                continue
            trained = [p for p, m in enumerate(mask) if m != NOT_TRAINED]
            verdict.trained_tokens += len(trained)
            if not trained:
                problem("untrained", f"{where} trains no token (every mask is -100)")
            wrong = next((p for p in trained if mask[p] != ids[p]), None)
            if wrong is not None:
                problem(
                    "labels",
                    f"{where}: mask {mask[wrong]} at position {wrong} is neither -100 nor the "
                    f"token there ({ids[wrong]}); masks are the loss's labels",
                )
            if logprobs:
                _check_logprobs(logprobs[i], ids, trained, where, problem)

    if without_logprobs:
        if without_logprobs == verdict.groups:
            verdict.problems.append(NO_LOGPROBS)
        else:
            verdict.problems.append(
                f"{without_logprobs} of {verdict.groups} groups have no inference_logprobs; "
                "the trainer would compare the others' with a placeholder"
            )
    for first, count in found.values():
        verdict.problems.append(first if count == 1 else f"{first} (and {count - 1} more)")
    if equal_scores:
        message = (
            f"{equal_scores} of {verdict.groups} groups have equal scores: their advantages are "
            "zero, so they add no gradient"
        )
        if equal_scores == verdict.groups:
            message += "; a step on them changes nothing"
        verdict.warnings.append(message)
    return verdict


def _check_logprobs(values: list, ids: list, trained: list[int], where: str, problem) -> None:
    if len(values) != len(ids):
        problem("logprobs", f"{where}: {len(ids)} tokens but {len(values)} inference logprobs")
        return
    bad = next(
        (
            p
            for p in trained
            if not isinstance(values[p], (int, float))
            or not math.isfinite(values[p])
            or values[p] > 0
        ),
        None,
    )
    if bad is not None:
        problem(
            "logprobs",
            f"{where}: inference logprob {values[bad]!r} at trained position {bad} is not a "
            "log-probability (a finite number <= 0)",
        )


def summary(verdict: TrainerVerdict) -> str:
    """One line: ready with what, or the first problem (and how many more)."""
    if verdict.ready:
        groups = f"{verdict.groups} group{'s' * (verdict.groups != 1)}"
        line = (
            f"{groups}, {verdict.sequences} sequences, {verdict.trained_tokens} trained tokens "
            "with inference logprobs: atroposlib's GRPO trainer can train on them"
        )
        return line + (f" ({verdict.warnings[0]})" if verdict.warnings else "")
    more = len(verdict.problems) - 1
    return verdict.problems[0] + (f" (+{more} more problem{'s' * (more > 1)})" if more else "")
