"""Text from outside (a model's reply, a tool's output) made valid Unicode where it enters.

A JSON reply may carry half of a surrogate pair (``"\\ud800"``): Python decodes it to a str no
UTF-8 encoder, tokenizer or JSON file takes. Such characters are replaced with U+FFFD and
counted where the text enters the runtime, so that nothing later meets them.
"""

from __future__ import annotations

import re

REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_unicode(text: str) -> tuple[str, int]:
    """``text`` with every lone surrogate replaced by U+FFFD, and how many were replaced.

    A pair of surrogates left as two characters (a str built in Python, not decoded from
    JSON) is joined into the character it stands for, not replaced.
    """
    try:
        text.encode("utf-8")
        return text, 0
    except UnicodeEncodeError:
        pass
    joined = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return _SURROGATE.subn(REPLACEMENT, joined)
