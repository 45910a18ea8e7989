"""Where hermes-envgen came from, as ``pip install`` needs it again: PEP 610's direct_url.json."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_envgen.generate.origin import _from_direct_url

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        (
            {"url": "https://git.example.com/hermes-envgen.git",
             "vcs_info": {"vcs": "git", "commit_id": COMMIT, "requested_revision": "main"}},
            f"git+https://git.example.com/hermes-envgen.git@{COMMIT}",
        ),  # the commit installed, not the branch that has moved on since
        (
            {"url": "https://git.example.com/hermes-envgen.git", "vcs_info": {"vcs": "git"}},
            "git+https://git.example.com/hermes-envgen.git",
        ),
        (
            {"url": "https://files.example.com/hermes_envgen-0.2.0.tar.gz",
             "archive_info": {"hashes": {"sha256": "00"}}},
            "https://files.example.com/hermes_envgen-0.2.0.tar.gz",
        ),
        ({"url": "file:///nowhere/hermes_envgen-0.2.0-py3-none-any.whl", "archive_info": {}}, ""),
        ({}, ""),
    ],
)  # fmt: skip
def test_a_record_gives_what_pip_installs_again(record: dict, expected: str):
    assert _from_direct_url(record) == expected


def test_a_local_file_or_directory_gives_its_path_with_escapes_undone(tmp_path: Path):
    wheel = tmp_path / "my wheels" / "hermes_envgen-0.2.0-py3-none-any.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"")
    assert _from_direct_url({"url": wheel.as_uri(), "archive_info": {}}) == str(wheel)
    checkout = tmp_path / "src"
    checkout.mkdir()
    record = {"url": checkout.as_uri(), "dir_info": {"editable": True}}
    assert _from_direct_url(record) == str(checkout)
