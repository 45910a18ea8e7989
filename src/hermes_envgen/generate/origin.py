"""Where this hermes-envgen came from, as the argument ``pip install`` needs to get it again.

hermes-envgen is on no package index: a generated project's README must say where to install it
from before ``pip install -e '.[dev]'`` can resolve the project's ``hermes-envgen~=X.Y``. The
answer is the source ``new`` itself runs from: a source checkout, a wheel file, a git commit or
an archive URL (what pip recorded in ``direct_url.json``, PEP 610).
"""

from __future__ import annotations

import json
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from urllib.parse import unquote, urlparse

from hermes_envgen.generate import source


def _from_direct_url(record: dict) -> str:
    """The pip argument that installs again what a ``direct_url.json`` record describes."""
    url = str(record.get("url", ""))
    vcs = record.get("vcs_info")
    if isinstance(vcs, dict) and vcs.get("vcs") == "git" and url:
        commit = vcs.get("commit_id")
        return f"git+{url}@{commit}" if commit else f"git+{url}"
    parsed = urlparse(url)
    if parsed.scheme == "file":
        path = Path(unquote(parsed.path))
        return str(path) if path.exists() else ""
    return url


def install_source() -> str:
    """What to pass to ``pip install`` for this hermes-envgen; "" when it came from an index."""
    checkout = source.source_checkout()
    if checkout is not None:  # the code running now is a checkout's, whatever pip recorded
        return str(checkout)
    try:
        text = distribution("hermes-envgen").read_text("direct_url.json")
    except PackageNotFoundError:
        return ""
    if not text:
        return ""  # installed from an index: the project's dependency resolves there too
    try:
        record = json.loads(text)
    except ValueError:
        return ""
    return _from_direct_url(record) if isinstance(record, dict) else ""
