"""Read a user's text file (recipe, reward code) with one clear error for every way it can be unreadable.

A recipe saved as Latin-1, a binary file given by mistake, or a directory where a file belongs
must become a paragraph naming the file (and line), not a UnicodeDecodeError traceback.
"""

from __future__ import annotations

from pathlib import Path

from grpo_cli.errors import GrpoError

_UTF8_FIX = "Save it as UTF-8 (most editors offer 'Save with encoding'; `iconv -f latin1 -t utf-8` converts it)."


def decode_error(data: bytes, exc: UnicodeDecodeError, what: str) -> str:
    """Where in `data` the first non-UTF-8 byte is, as 'line L, column C'."""
    line = data.count(b"\n", 0, exc.start) + 1
    column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
    return f"{what} is not UTF-8 text: byte 0x{data[exc.start]:02x} at line {line}, column {column}"


def read_text(path: Path, *, what: str, where: str, missing_fix: str = "") -> str:
    """The file's text; GrpoError (exit 2) when it is missing, a directory, binary, unreadable or not UTF-8."""
    if where != str(path):
        what = f"{what} {path}"  # the message names the file unless `where` already does
    if not path.exists():
        raise GrpoError(f"{what} not found", where=where, fix=missing_fix)
    if path.is_dir():
        raise GrpoError(f"{what} is a directory, not a file", where=where,
                        fix="Give the path of a file inside it.")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise GrpoError(f"cannot read {what}: {exc.strerror or exc}", where=where,
                        fix="Check the file's permissions.") from None
    if b"\x00" in data[:8192]:
        raise GrpoError(f"{what} is a binary file, not text", where=where,
                        fix="Give the text file itself (YAML for a recipe, Python source for a reward).")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GrpoError(decode_error(data, exc, f"{what}"), where=where, fix=_UTF8_FIX) from None
