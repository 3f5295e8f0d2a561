r"""Text that grpo did not write (completions, run files) shown on a terminal without the terminal acting on it.

A completion is whatever a model wrote, and a run file whatever is on disk. Printed raw, `ESC[2J` clears the
screen, an OSC sequence retitles the window or plants a hyperlink, a carriage return or a backspace hides what came
before it, a bidirectional override reorders the line, and a lone surrogate (valid in JSON, not in UTF-8) stops the
print with an encoding error. `visible` writes each such character as Python's escape (`\x1b[2J`, `\u202e`), so
the reader sees what is there and the terminal interprets none of it. Newlines and tabs stay as they are.
"""

from __future__ import annotations

import re

_HIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """`text` with control characters, bidirectional controls and lone surrogates written as escapes."""
    return _HIDDEN.sub(_escape, text)
