"""What may leave this machine in a push: no local paths, and no smoke test passed off as a benchmark result.

A LoRA run on a local base model writes that model's absolute path into adapter_config.json (PEFT
records `model.name_or_path`), and the manifest and recipe name local files; none of that means
anything on the Hub and it tells strangers about this machine. A `grpo eval --suite NAME --limit 50`
is a smoke test: the card shows it as one, and the Hub's model-index gets only full-suite results.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from grpo_cli.errors import GrpoError
from grpo_cli.gguf.cache import conversion_record
from grpo_cli.gguf.source import read_header
from grpo_cli.paths import is_gguf_reference, is_hub_id, resolve

# A GGUF file's name ends in its quantisation (SmolLM2-135M-Instruct.Q4_1.gguf, qwen2-0_5b-instruct-q8_0.gguf).
_QUANT_SUFFIX = re.compile(r"[.-](?:[QqIi][Qq]?\d\w*|[Ff]16|[Ff]32|[Bb][Ff]16)$")
_HF_URL = re.compile(r"^https?://huggingface\.co/([\w.-]+/[\w.-]+?)/?$")
# An absolute or home path inside text (report.md): not the second slash of a URL, not a relative path.
_TEXT_PATH = re.compile(r"(?<![\w:/.~-])(?:~|/(?=[\w.-]+/))[\w.~+@%-]*(?:/[\w.~+@%-]+)+/?")


def is_local_path(value: str) -> bool:
    """An absolute or home-relative path, or one that exists here (a Hub id such as `org/name` is not)."""
    if not value or value.startswith("bundled:"):
        return False
    if value.startswith(("/", "~", "./", "../")) or (len(value) > 2 and value[1] == ":" and value[2] in "/\\"):
        return True
    if is_hub_id(value, owner=True):
        return False
    try:
        return Path(value).exists()
    except OSError:  # a name the system cannot look up (longer than a file name may be) is no path on this machine
        return False


def public_base(base: str, hub_id: str | None = None) -> str:
    """How a card and adapter_config.json name the base model: a Hub id, `bundled:NAME`, else the folder's name."""
    if hub_id:
        return hub_id
    if is_local_path(base):
        return Path(base.rstrip("/\\")).name or "local-model"
    return base


def gguf_file(reference: str) -> Path | None:
    """The GGUF file a reference names, or the one a converted cache directory was made from."""
    try:
        path = resolve(reference)
    except Exception:  # noqa: BLE001 - a package that is gone: no file to read
        return None
    if is_gguf_reference(reference):
        return path if path.is_file() else None
    record = conversion_record(path) if path.is_dir() else None
    source = Path(str(record.get("source"))) if record else None
    return source if source is not None and source.is_file() else None


def hub_base_id(reference: str) -> tuple[str, str] | None:
    """The Hub id a base model is published as, and where it was found; None when nothing names one.

    A GGUF file names its source repository in `general.source.*` (llama.cpp's converter) or else its
    organisation in `general.organization`, which with the file name less its quantisation is the Hub id
    (SmolLM2-135M-Instruct.Q4_1.gguf by HuggingFaceTB -> HuggingFaceTB/SmolLM2-135M-Instruct). A model
    directory may record it as `_name_or_path` in config.json.
    """
    if is_hub_id(reference, owner=True) and not is_local_path(reference):
        return reference, "the model reference"
    gguf = gguf_file(reference)
    if gguf is not None:
        try:
            meta = read_header(gguf).metadata
        except GrpoError:
            return None
        for key in ("general.source.repo_url", "general.source.url", "general.source.huggingface.repository"):
            value = str(meta.get(key) or "")
            url = _HF_URL.match(value)
            repo = url.group(1) if url else value if key.endswith("repository") else ""
            if repo and is_hub_id(repo, owner=True):
                return repo, f"the GGUF header's {key}"
        org, stem = meta.get("general.organization"), _QUANT_SUFFIX.sub("", gguf.name[:-len(".gguf")])
        basename = str(meta.get("general.basename") or "")
        if isinstance(org, str) and basename and basename.lower() in stem.lower() and is_hub_id(f"{org}/{stem}",
                                                                                                  owner=True):
            return f"{org}/{stem}", "the GGUF header's general.organization and the file name"
        return None
    path = Path(reference).expanduser()
    try:
        named = json.loads((path / "config.json").read_text(encoding="utf-8")).get("_name_or_path")
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(named, str) and is_hub_id(named, owner=True) and not is_local_path(named):
        return named, "config.json's _name_or_path"
    return None


def scrub_text(text: str) -> tuple[str, list[str]]:
    """Text (report.md) with every absolute or home path replaced by its last component, and the paths found."""
    found: list[str] = []

    def last(match: re.Match[str]) -> str:
        found.append(match.group(0))
        return Path(match.group(0).rstrip("/")).name

    return _TEXT_PATH.sub(last, text), found


def scrub(value: Any) -> Any:
    """A copy of a JSON/YAML value with every local path replaced by its last component."""
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    if isinstance(value, str) and is_local_path(value) and "\n" not in value:
        return Path(value.rstrip("/\\")).name
    return value


def local_paths(value: Any) -> list[str]:
    """The local paths a JSON/YAML value holds, in order."""
    if isinstance(value, dict):
        return [p for v in value.values() for p in local_paths(v)]
    if isinstance(value, list):
        return [p for v in value for p in local_paths(v)]
    return [value] if isinstance(value, str) and "\n" not in value and is_local_path(value) else []


def is_full_suite(summary: dict[str, Any]) -> bool:
    """Whether a suite summary covers every problem of the suite (only those are Hub results)."""
    size, problems = summary.get("suite_size"), summary.get("problems")
    return isinstance(size, int) and problems == size


def sanitized(path: Path) -> tuple[bytes, list[str]]:
    """The JSON, YAML or Markdown file with local paths scrubbed, and the paths that were there. A file that is not
    valid UTF-8 JSON/YAML would be uploaded as junk (or crash the scrubbing): one paragraph naming it instead."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".md":
            clean, found = scrub_text(text)
            return clean.encode(), found
        if path.suffix == ".json":
            data = json.loads(text)
            return (json.dumps(scrub(data), indent=2) + "\n").encode(), local_paths(data)
        data = yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        kind = {".json": "JSON", ".md": "Markdown"}.get(path.suffix, "YAML")
        why = exc.strerror if isinstance(exc, OSError) else str(exc).splitlines()[0][:120]
        raise GrpoError(f"{path} is damaged: not readable UTF-8 {kind} ({why})", where="RUN_DIR",
                        fix=f"It would be uploaded with the model: restore it from a copy, or delete {path.name} "
                            "(the upload then goes without it).") from None
    return yaml.safe_dump(scrub(data), sort_keys=False).encode(), local_paths(data)
