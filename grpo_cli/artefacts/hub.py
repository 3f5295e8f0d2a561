"""`grpo push RUN_DIR REPO_ID` and `output.push_to_hub`: upload a model or adapter with its card.

What goes up is decided here, from the run dir's top level: weights, config, tokenizer, the card and
report, the recipe and eval summaries. Checkpoints, best/, optimizer state, TensorBoard logs and the
sampled completions (which may quote training data) stay local.
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_cli import runs
from grpo_cli.artefacts.card import CARD_FILE, CARD_MARK, GGUF_RECORD, suite_results, write_card
from grpo_cli.artefacts.publish import hub_base_id, is_full_suite, is_local_path, public_base, sanitized
from grpo_cli.errors import GrpoError
from grpo_cli.gguf.source import read_header
from grpo_cli.model_files import read_json_value, regular_file_problem, safetensors_problem
from grpo_cli.models.sources import read_json
from grpo_cli.paths import is_hub_id

if TYPE_CHECKING:
    from rich.console import Console

    from grpo_cli.recipe.schema import Recipe

UPLOAD_PATTERNS = ("*.safetensors", "*.safetensors.index.json", "config.json", "generation_config.json",
                   "adapter_config.json", "tokenizer*", "special_tokens_map.json", "vocab.*", "merges.txt",
                   "chat_template.*", "added_tokens.json", CARD_FILE, runs.REPORT_IMAGE, runs.REPORT_SUMMARY,
                   runs.RECIPE, runs.MANIFEST, runs.suite_result("*"), runs.MERGE_INFO, "*.gguf", GGUF_RECORD)
WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "adapter_model.safetensors")


@dataclass
class StagedPush:
    """What an upload sends: the folder, the files in it (relative names) and where they go."""

    folder: Path
    files: list[str]
    repo_id: str
    url: str = ""
    replaced: dict[str, bytes] = field(default_factory=dict, repr=False)
    """Files sent with other content than on disk: local paths scrubbed (adapter_config.json, manifest.json)."""
    warnings: list[str] = field(default_factory=list)


def staged_files(folder: Path) -> list[str]:
    """The top-level entries of `folder` that an upload sends, sorted (anything but a directory: a device or a
    named pipe under a model file's name is refused by the checks, not left out unsaid)."""
    return sorted(p.name for p in folder.iterdir()
                  if not p.is_dir() and any(fnmatch.fnmatch(p.name, pat) for pat in UPLOAD_PATTERNS))


HUB_NAME_LIMIT = 96
"""The Hub's longest repository name (the part after `user/`), as huggingface_hub's validate_repo_id has it."""
_HUB_PART = re.compile(r"^[\w.-]+$")


def check_repo_id(repo_id: str, where: str = "REPO_ID", *, bare_ok: bool = False) -> None:
    """A clear error for an id the Hub would refuse, before anything is written or uploaded.

    `bare_ok`: a name without owner is taken as the logged-in user's (output.push_to_hub; see `full_repo_id`).
    """
    if bare_ok and "/" not in repo_id:
        repo_id = f"user/{repo_id}"
    owner, _, name = repo_id.partition("/")
    if not owner or not name or "/" in name:
        raise GrpoError(f"{repo_id!r} is not a Hub repository id", where=where, fix="Use `user/name` or `org/name`.")
    if len(name) > HUB_NAME_LIMIT:
        raise GrpoError(f"the repository name in {repo_id[:40]!r}... is {len(name)} characters long; the Hub allows "
                        f"at most {HUB_NAME_LIMIT}", where=where, fix="Choose a shorter name.")
    bad = next((p for p in (owner, name) if not _HUB_PART.match(p) or "--" in p or ".." in p
                or p.startswith(("-", ".")) or p.endswith(("-", ".", ".git"))), None)
    if bad is not None:
        raise GrpoError(f"{bad!r} in {repo_id!r} is not a valid Hub name", where=where,
                        fix="Use letters, digits, '-', '_' and '.', not starting or ending with '-' or '.', "
                            "without '--' or '..'.")


def _check_own_card(folder: Path, force: bool) -> None:
    """A README.md grpo did not write (the user's own card) is never replaced without --force."""
    path = folder / CARD_FILE
    if force or not path.is_file() or CARD_MARK in path.read_bytes().decode("utf-8", "replace"):
        return
    raise GrpoError(f"{path} is not a model card grpo wrote (your own, or one edited past recognition); pushing "
                    "writes grpo's card there", where="RUN_DIR",
                    fix=f"Move it aside (e.g. to {CARD_FILE}.mine) and push again, or pass --force to replace it.")


def stage_run(run_dir: str | Path, repo_id: str, base_model: str | None = None, force: bool = False) -> StagedPush:
    """Check the folder holds a model, (re)write its card, validate the card, and list what would go up.

    `base_model`: the Hub id of a base model this machine knows by a local path (`--base-model`).
    """
    from huggingface_hub import ModelCard

    folder = Path(run_dir).expanduser()
    if not folder.is_dir():
        raise GrpoError(f"{folder} is not a directory", where="RUN_DIR",
                        fix="Give the output dir of `grpo train` or of `grpo merge`.")
    check_repo_id(repo_id)
    if not any((folder / w).exists() for w in WEIGHTS):
        raise GrpoError(f"{folder} holds no final model (no {' or '.join(WEIGHTS[::2])})", where="RUN_DIR",
                        fix="Push a finished run, a checkpoint's parent after training completed, or a merged model.")
    _check_files(folder)
    adapter = (folder / "adapter_config.json").is_file()
    base = _base_of(folder, adapter)
    if base_model is not None and not is_hub_id(base_model, owner=True):
        raise GrpoError(f"{base_model!r} is not a Hub model id", where="--base-model",
                        fix="Name the base model as the Hub does, `org/name` (e.g. Qwen/Qwen2.5-0.5B-Instruct).")
    _check_own_card(folder, force)
    kept = _card(folder, base, base_model, adapter)
    card = ModelCard.load(folder / CARD_FILE)  # the Hub's own parser: bad front matter raises here
    if "grpo" not in (card.data.tags or []):
        raise GrpoError(f"the model card in {folder} lost its tags", where=CARD_FILE)
    staged = StagedPush(folder, staged_files(folder), repo_id)
    if kept:
        staged.warnings.append(kept)
    _scrub_local_paths(staged, base, base_model)
    if not card.data.base_model:
        staged.warnings.append(f"the card's metadata names no Hub base model ({public_base(base)} does not say which "
                               "Hub model it is); pass `--base-model ORG/NAME` so the Hub links the base")
    for s in (s for s in suite_results(folder) if not is_full_suite(s)):
        staged.warnings.append(
            f"{runs.suite_result(str(s.get('suite')))} covers {s.get('problems')} of {s.get('suite_size', '?')} "
            f"{s.get('suite')} problems (`--limit`): the card shows it as a smoke test and leaves it out of the "
            f"Hub metadata; run `grpo eval --suite {s.get('suite')}` without --limit for a result to publish.")
    return staged


_RESAVE = ("Push the run again after re-saving the model (`grpo train --resume` finishes it, `grpo merge` writes a "
           "merged copy), or restore the file from the model's original files.")
LIST_FILES = frozenset({GGUF_RECORD})
REQUIRED_KEYS = {"config.json": "model_type", "tokenizer.json": "model"}
"""What a model file must name for transformers to load it."""
GRPO_RECORDS = (runs.MANIFEST, runs.MERGE_INFO, runs.suite_result("*"), GGUF_RECORD)
"""JSON files grpo wrote about the model (not part of it): a damaged one is restored or left out, not re-saved."""
"""JSON files an upload sends that hold a list (each verified GGUF export), not an object."""


def _check_files(folder: Path) -> None:
    """Before anything is written or sent: every file a regular one, every weights file whole, every JSON file
    parsed (a junk config.json or an empty tokenizer.json would upload a model nobody can load), every file
    scrubbed for paths readable."""
    for name in (*staged_files(folder), CARD_FILE):
        path = folder / name
        if name == CARD_FILE and path.is_dir():
            continue  # the card is written before it is sent: writing it names the directory in the way
        why = regular_file_problem(path)
        if why is not None:
            raise GrpoError(f"{path} {why}", where="RUN_DIR", fix="Put the file itself there, or move the entry "
                            "aside; push reads and uploads files saved on disk.")
        if name.endswith(".safetensors") and (why := safetensors_problem(path)):
            raise GrpoError(f"{path} is damaged or truncated: {why}", where="RUN_DIR", fix=_RESAVE)
        if name in ("adapter_config.json", runs.MANIFEST, runs.RECIPE):
            sanitized(path)
        if name.endswith(".json"):
            _check_json(path)
        if name.endswith(".gguf"):
            read_header(path)  # a GGUF cut short (tensor data past its end) is refused, naming the file


def _check_json(path: Path) -> None:
    """A JSON file an upload sends parses to what its readers expect; config.json names its model type and
    tokenizer.json holds a tokenizer model (`{}` for either is a model nobody can load)."""
    name = path.name
    model_file = not any(fnmatch.fnmatch(name, pat) for pat in GRPO_RECORDS)
    fix = _RESAVE if model_file else (f"It would be uploaded with the model: restore it from a copy, or delete {name} "
                                      "(the upload then goes without it).")
    data = read_json_value(path, what="the file", where="RUN_DIR", fix=fix, kind=list if name in LIST_FILES else dict)
    key = REQUIRED_KEYS.get(name)
    if key is not None and not data.get(key):
        raise GrpoError(f"{path} has no `{key}`: transformers cannot load the model from it", where="RUN_DIR", fix=fix)


def _merge_info(folder: Path) -> dict[str, Any]:
    return read_json(folder / runs.MERGE_INFO) if (folder / runs.MERGE_INFO).is_file() else {}


def _base_of(folder: Path, adapter: bool) -> str:
    """The base model as the run named it: a recipe's reference over PEFT's local path; a merge's record."""
    if adapter:
        base = str(read_json(folder / "adapter_config.json").get("base_model_name_or_path") or "unknown")
        named = _recipe_base(folder)
        if is_local_path(base) and named and not is_local_path(named):
            base = named  # PEFT wrote where the base sat on disk; the recipe says what it is (hub id, bundled:)
        return base
    return str(_merge_info(folder).get("base") or _recipe_base(folder) or "unknown")


def _card(folder: Path, base: str, base_model: str | None, adapter: bool) -> str | None:
    """(Re)write the card from the run's files; a merged model whose run is not on this machine keeps the card
    `grpo merge` wrote (every section), with only `base_model` set from --base-model. Returns a note then."""
    run = folder if (folder / runs.RECIPE).is_file() else None
    recorded = _merge_info(folder).get("run_dir")
    if run is None and isinstance(recorded, str) and (Path(recorded) / runs.RECIPE).is_file():
        run = Path(recorded)
    existing = folder / CARD_FILE
    if run is None and (folder / runs.MERGE_INFO).is_file() and existing.is_file():
        from huggingface_hub import ModelCard

        card = ModelCard.load(existing)
        if "grpo-cli" in (card.data.tags or []):
            if base_model:
                card.data.base_model = base_model
                card.save(existing)
            return (f"{CARD_FILE} is kept as `grpo merge` wrote it: the run it came from is not on this machine, "
                    "so results evaluated since are not added")
    write_card(folder, run_dir=run, base=base_model or base, adapter=adapter)
    return None


def _scrub_local_paths(staged: StagedPush, base: str, base_model: str | None) -> None:
    """Send adapter_config.json, manifest.json, recipe.yaml, grpo_merge.json and report.md without this machine's
    paths, and adapter_config.json naming its base by a Hub id when one is known; say so."""
    for name in ("adapter_config.json", runs.MANIFEST, runs.RECIPE, runs.MERGE_INFO, runs.REPORT_SUMMARY):
        if name not in staged.files:
            continue
        content, paths = sanitized(staged.folder / name)
        if name == "adapter_config.json":
            content = _adapter_config(staged, content, paths, base, base_model)
        if paths or content != (staged.folder / name).read_bytes():
            staged.replaced[name] = content
    others = [n for n in staged.replaced if n != "adapter_config.json"]
    if others:
        staged.warnings.append(f"local paths in {', '.join(others)} are sent as their last component only")


def _adapter_config(staged: StagedPush, content: bytes, paths: list[str], base: str, base_model: str | None
                    ) -> bytes:
    """adapter_config.json as sent: its base a Hub id (--base-model, or what the base's files name) whenever
    the saved one is a path, `bundled:` or `package:` reference that nobody else can load."""
    on_disk = json.loads((staged.folder / "adapter_config.json").read_text(encoding="utf-8"))
    saved = str(on_disk.get("base_model_name_or_path") or "")
    if is_hub_id(saved, owner=True) and not paths and not base_model:
        return content
    data = json.loads(content)
    found = (base_model, "--base-model") if base_model else hub_base_id(base) or hub_base_id(saved)
    named = found[0] if found else public_base(base)
    data["base_model_name_or_path"] = named
    where = f"its path on this machine ({paths[0]})" if paths else repr(saved)
    how = (f" (from {found[1]})" if found[1] != "--base-model" else "") if found else (
        ", which PEFT cannot load from the Hub; pass `--base-model ORG/NAME` with the base model's Hub id")
    staged.warnings.append(f"adapter_config.json names the base model by {where}: it is sent as {named!r}{how}")
    return (json.dumps(data, indent=2) + "\n").encode()


def _recipe_base(folder: Path) -> str | None:
    import yaml

    try:
        recipe = yaml.safe_load((folder / runs.RECIPE).read_text(encoding="utf-8")) or {}
    except (OSError, ValueError, yaml.YAMLError):
        return None
    model = recipe.get("model") if isinstance(recipe, dict) else None
    name = model.get("name_or_path") if isinstance(model, dict) else None
    return name if isinstance(name, str) else None


def push_run(run_dir: str | Path, repo_id: str, *, private: bool = True, dry_run: bool = False,
             base_model: str | None = None, force: bool = False) -> StagedPush:
    """Stage, then create the repo (if needed) and upload the staged files in one commit."""
    if not repo_id.strip("/ "):
        raise GrpoError("the repository id is empty", where="REPO_ID", fix="Give it as `user/name` or `org/name`.")
    if "/" not in repo_id and not dry_run:
        from huggingface_hub import HfApi

        repo_id = full_repo_id(HfApi(), repo_id)
    staged = stage_run(run_dir, repo_id if "/" in repo_id else f"user/{repo_id}", base_model, force)
    if dry_run:
        return staged
    from huggingface_hub import CommitOperationAdd, HfApi

    api = HfApi()
    operations = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=staged.replaced.get(name)
                                     or str(staged.folder / name)) for name in staged.files]
    try:
        url = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        api.create_commit(repo_id=repo_id, repo_type="model", operations=operations,
                          commit_message="Upload GRPO model trained with grpo-cli")
    except Exception as exc:  # noqa: BLE001 - network, auth and offline errors all mean the same to the user
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise GrpoError(f"upload to {repo_id} failed: {first}", where="push",
                        fix="Log in with `huggingface-cli login` (or set HF_TOKEN), check the network and that "
                            "HF_HUB_OFFLINE is not set; `grpo push --dry-run` shows what would be sent.") from None
    staged.url = str(url)
    return staged


def full_repo_id(api: Any, name: str) -> str:
    """`name` in the namespace of the logged-in user (a recipe may name the repo alone, as TRL's hub_model_id)."""
    try:
        user = api.whoami()["name"]
    except Exception as exc:  # noqa: BLE001 - no token, offline: the same to the user
        raise GrpoError(f"output.push_to_hub names {name!r} without an owner, and the logged-in user cannot be "
                        f"found: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", where="push",
                        fix="Log in with `huggingface-cli login` (or set HF_TOKEN), or write `user/name`.") from None
    return f"{user}/{name}"


def finish_run_card(recipe: Recipe, out: Path, console: Console | None = None) -> Path | None:
    """End of `grpo train`: the card in the run dir, then the upload when output.push_to_hub names a repo.

    Neither may fail a finished run: problems are printed, the run's outputs stay as they are.
    """
    say = console.print if console is not None else (lambda *a, **k: None)
    try:
        path = write_card(out, run_dir=out, base=recipe.model.name_or_path, adapter=recipe.model.lora is not None)
    except Exception as exc:  # noqa: BLE001 - a card is a convenience
        say(f"[yellow]model card not written:[/] {exc}", soft_wrap=True)
        return None
    say(f"model card: {path}", markup=False, soft_wrap=True)
    if recipe.output.push_to_hub:
        try:
            staged = push_run(out, recipe.output.push_to_hub, private=recipe.output.hub_private)
            say(f"pushed {len(staged.files)} files to {staged.url}", markup=False, soft_wrap=True)
            for warning in staged.warnings:
                say(f"note: {warning}", markup=False, soft_wrap=True)
        except GrpoError as exc:
            say(f"[yellow]not pushed:[/] {exc}", soft_wrap=True)
    return path
