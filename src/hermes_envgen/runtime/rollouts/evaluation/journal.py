"""What an evaluation owes and what it has done: the planned rollouts and the journal of
finished ones (samples.jsonl, failures.jsonl) that lets an interrupted run resume.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes_envgen.runtime.errors import ResumeError
from hermes_envgen.runtime.rollout import item_key
from hermes_envgen.runtime.rollouts.records import (
    FAILURES_FILE,
    METRICS_FILE,
    SAMPLES_FILE,
    SETTINGS_FILE,
)
from hermes_envgen.runtime.text import valid_unicode

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvalTask:
    """One rollout an evaluation owes: the item, its stable key, and the sample's index."""

    item: Any
    item_key: str
    index: int

    @property
    def key(self) -> str:
        """The rollout's key in samples.jsonl: the same in every run of the same evaluation."""
        return f"{self.item_key}#{self.index}"

    def identity(self) -> dict[str, Any]:
        """The fields that tie a saved record to this rollout."""
        return {"key": self.key, "item_key": self.item_key, "sample_index": self.index}


def plan_eval(items: Iterable[Any], samples_per_item: int) -> list[EvalTask]:
    """Every rollout of an evaluation, k per item; a repeated item gets keys of its own."""
    seen: dict[str, int] = {}
    tasks: list[EvalTask] = []
    for item in items:
        base = item_key(item)
        seen[base] = seen.get(base, 0) + 1
        key = base if seen[base] == 1 else f"{base}-{seen[base]}"
        tasks += [EvalTask(item, key, index) for index in range(samples_per_item)]
    return tasks


def summary(record: dict) -> dict:
    """What metrics, progress and resume need of a saved rollout: its key and a few numbers.

    The journal keeps only this in memory (the conversation stays in the file), so an
    evaluation of any size holds a few hundred bytes per rollout.
    """
    return {
        "key": record["key"],
        "item_key": record.get("item_key"),
        "sample_index": record.get("sample_index"),
        "reward": record.get("reward"),
        "failure": record.get("failure"),
        "rollout_error": record.get("rollout_error"),
        "turns_used": record.get("turns_used", 0),
        "finished_naturally": bool(record.get("finished_naturally")),
        "tool_calls": tool_call_count(record),
        "tool_errors": tool_error_count(record),
        "reward_counts": record.get("reward_counts") or {},
        "reward_signals": record.get("reward_signals") or {},
        # the env's turn_reward values (those given; None is none)
        "turn_rewards": [r for r in record.get("turn_rewards") or () if r is not None],
    }


def tool_call_count(record: dict) -> int:
    """Tool calls of a saved rollout (records of older versions lack the count: from messages)."""
    if "tool_calls" in record:
        return int(record["tool_calls"])
    return sum(
        len(m.get("tool_calls") or []) for m in record.get("messages", []) if isinstance(m, dict)
    )


def tool_error_count(record: Mapping[str, Any]) -> int:
    """Failed tool calls of a saved rollout (a list in the file, a count in a summary)."""
    errors = record.get("tool_errors")
    return errors if isinstance(errors, int) else len(errors or [])


class SampleJournal:
    """samples.jsonl and failures.jsonl of one evaluation, appended to as rollouts finish.

    Each line is flushed as soon as its rollout is scored, so a killed run loses only the
    rollouts in flight. With ``resume`` the saved lines are read back and their rollouts are
    not run again; without it, the files of an earlier run are moved to
    ``earlier-runs/<n>/`` first (a new n each time: no earlier run is ever overwritten), so
    that a new run never mixes with an old one. ``settings`` (model, temperature, ...) are
    saved beside them, and a resume with other settings is refused. With no ``directory``
    the records are kept in memory only. In memory, ``records`` holds each rollout's
    :func:`summary`, never its conversation.
    """

    def __init__(
        self, directory: str | Path | None, settings: dict[str, Any], *, resume: bool
    ) -> None:
        self.directory = Path(directory) if directory is not None else None
        self.records: dict[str, dict] = {}  # key -> summary: earlier runs' and this run's
        self._files: dict[str, Any] = {}
        if self.directory is None:
            if resume:
                raise ResumeError(
                    "resume needs the saved samples: set --env.data_dir_to_save_evals to the "
                    "directory of the run to continue"
                )
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        if resume:
            self._check_settings(settings)
            for name in (SAMPLES_FILE, FAILURES_FILE):
                self._load(self.directory / name)
        else:
            self._move_aside()
        (self.directory / SETTINGS_FILE).write_text(json.dumps(settings, indent=2) + "\n")

    def append(self, record: dict) -> None:
        """Save one finished rollout: to failures.jsonl if it has a failure, else samples.jsonl."""
        self.records[record["key"]] = summary(record)
        if self.directory is None:
            return
        name = FAILURES_FILE if record.get("failure") else SAMPLES_FILE
        if name not in self._files:
            self._files[name] = (self.directory / name).open("a", encoding="utf-8")
        stream = self._files[name]
        # Valid UTF-8 whatever the record holds (an item's or an env's own lone surrogate):
        # a line that cannot be written would end the evaluation.
        line, _ = valid_unicode(json.dumps(record, ensure_ascii=False, default=str))
        stream.write(line + "\n")
        stream.flush()  # the line survives a kill of this process from now on

    def close(self) -> None:
        """Close the files (appending opens them again)."""
        for stream in self._files.values():
            stream.close()
        self._files.clear()

    def _check_settings(self, settings: dict[str, Any]) -> None:
        assert self.directory is not None  # only a journal that saves has settings to check
        path = self.directory / SETTINGS_FILE
        try:
            saved = json.loads(path.read_text())
        except FileNotFoundError:
            if (self.directory / SAMPLES_FILE).exists():
                logger.warning("no %s: cannot check that the settings match", path)
            return
        except ValueError:
            raise ResumeError(f"cannot resume: {path} is not valid JSON") from None
        keys = settings.keys() | saved.keys()
        changed = sorted(key for key in keys if settings.get(key) != saved.get(key))
        if changed:
            raise ResumeError(
                f"cannot resume the evaluation in {self.directory}: it ran with other settings "
                f"({', '.join(changed)}); run again without --env.resume true to start afresh"
            )

    def _load(self, path: Path) -> None:
        """Read the records a file holds, line by line, repairing what a kill left: a line cut
        short (even inside a UTF-8 character) is dropped, a last line with no newline gets one.
        """
        if not path.exists():
            return
        kept = dropped = 0
        unterminated = False
        with path.open("rb") as lines:
            for line in lines:
                unterminated = not line.endswith(b"\n")
                record = _parse(line)
                if record is None:
                    dropped += 1
                    continue
                self.records[record["key"]] = summary(record)
                kept += 1
        if dropped:
            logger.warning("%s: %d unreadable line(s) dropped", path, dropped)
        if dropped or unterminated:
            # Rewritten (streamed, then renamed over), so the next append starts on a line of
            # its own.
            partial = path.with_name(f".{path.name}.repair")
            with path.open("rb") as lines, partial.open("wb") as out:
                for line in lines:
                    if _parse(line) is not None:
                        out.write(line.rstrip(b"\n") + b"\n")
            partial.replace(path)
        logger.info("resuming: %d rollout(s) read from %s", kept, path)

    def _move_aside(self) -> None:
        """Move an earlier run's files into ``earlier-runs/<n>/``, a new number every time.

        Never over an earlier copy: each rerun without resume keeps every run before it.
        """
        assert self.directory is not None  # only a journal that saves has earlier runs
        if not any((self.directory / n).exists() for n in EARLIER_RUN_RESULTS):
            return  # nothing measured yet: settings alone are not a run to keep
        names = (*EARLIER_RUN_RESULTS, SETTINGS_FILE)
        present = [n for n in names if (self.directory / n).exists()]
        target = _next_free(self.directory / EARLIER_RUNS_DIR)
        for name in present:
            (self.directory / name).replace(target / name)
        logger.warning(
            "starting a fresh evaluation in %s: the earlier run's %s moved to %s (pass "
            "--env.resume true to continue a run instead)",
            self.directory,
            ", ".join(present),
            target,
        )


# An earlier run's results: a fresh run moves them aside, with the settings they ran with.
EARLIER_RUN_RESULTS = (SAMPLES_FILE, FAILURES_FILE, METRICS_FILE)
EARLIER_RUNS_DIR = "earlier-runs"


def _next_free(parent: Path) -> Path:
    """A new, empty directory ``parent/<n>``, n one above the highest there (1 first).

    ``mkdir`` without exist_ok claims the number: two runs starting at once get two.
    """
    parent.mkdir(parents=True, exist_ok=True)
    taken = [int(p.name) for p in parent.iterdir() if p.name.isdigit()]
    number = max(taken, default=0) + 1
    while True:
        candidate = parent / str(number)
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            number += 1


def _parse(line: bytes) -> dict | None:
    """A journal line's record; None for a line a kill cut short, or one that is no record."""
    try:
        record = json.loads(line.decode("utf-8"))
    except ValueError:  # also UnicodeDecodeError: cut inside a character
        return None
    if isinstance(record, dict) and isinstance(record.get("key"), str):
        return record
    return None
