"""Model cards: a README.md in the Hub's format that says how a model was made.

Written at the end of `grpo train` (into the run dir) and by `grpo merge` (into the merged model).
The YAML front matter is what the Hub indexes (base_model, library_name, tags, datasets, license,
model-index with benchmark results); the body is for people: recipe, rewards and weights, the
training summary, evaluation before/after and the report image. Everything is read from the files
a run leaves behind, so a card can be rebuilt at any time; missing pieces are left out, never faked.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import yaml

from grpo_cli import runs
from grpo_cli.artefacts.publish import gguf_file, hub_base_id, is_full_suite, is_local_path, public_base, scrub
from grpo_cli.artefacts.report_data import number_text
from grpo_cli.artefacts.summary import first_and_last, step_span, summary_keys, summary_window, training_logs
from grpo_cli.errors import GrpoError
from grpo_cli.gguf.source import read_header
from grpo_cli.models.vision import is_vision_language
from grpo_cli.paths import is_gguf_reference, is_hub_id, resolve, write_atomic
from grpo_cli.runs.manifest import Manifest, Scores
from grpo_cli.suite_table import SUITES

CARD_FILE = runs.CARD
GGUF_RECORD = "grpo_gguf.json"
"""What `grpo export --gguf` verified, per file; the card's GGUF section reads it."""
SUITE_DATASETS = {s.name: s.hub for s in SUITES.values() if s.hub is not None}
"""The Hub dataset of each suite a model card can report (the suite table's `hub` column)."""


def _read(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
        return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError):
        return None


def base_license(base: str) -> str | None:
    """The base model's licence from its own card: a local dir's README.md, or the Hub cache (never the network);
    a GGUF file's `general.license`."""
    from huggingface_hub import ModelCard

    gguf = gguf_file(base)  # a GGUF reference, or the cache directory converted from one
    if gguf is not None or is_gguf_reference(base):
        try:
            value = read_header(gguf or resolve(base)).metadata.get("general.license")
        except GrpoError:
            return None
        return value if isinstance(value, str) else None

    path = Path(base).expanduser() / CARD_FILE
    if not path.is_file() and is_hub_id(base, owner=True):
        try:
            from huggingface_hub import hf_hub_download

            path = Path(hf_hub_download(base, CARD_FILE, local_files_only=True))
        except Exception:  # noqa: BLE001 - not cached, offline, or no card: the licence is unknown
            return None
    try:
        return ModelCard.load(path).data.license if path.is_file() else None
    except Exception:  # noqa: BLE001 - an unparsable card says nothing about the licence
        return None


def suite_results(*dirs: Path) -> list[dict[str, Any]]:
    """The eval-<suite>.json summaries `grpo eval --suite` wrote into these dirs (first dir wins per suite)."""
    found: dict[str, dict[str, Any]] = {}
    for d in dirs:
        for name in SUITE_DATASETS:
            data = _read(d / runs.suite_result(name))
            if isinstance(data, dict) and isinstance(data.get("summary"), dict) and name not in found:
                found[name] = data["summary"]
    return list(found.values())


def _front_matter(recipe: dict[str, Any], base: str, adapter: bool, name: str,
                  suites: list[dict[str, Any]], vision: bool = False) -> Any:
    from huggingface_hub import EvalResult, ModelCardData

    data_ref = (recipe.get("data") or {}).get("dataset")
    task = "image-text-to-text" if vision else "text-generation"
    evals = [EvalResult(task_type=task, dataset_type=SUITE_DATASETS[s["suite"]].id,
                        dataset_name=SUITE_DATASETS[s["suite"]].name, dataset_split=SUITE_DATASETS[s["suite"]].split,
                        metric_type="accuracy", metric_name=f"accuracy ({s.get('decoding', 'greedy')}, pass@1)",
                        metric_value=round(float(s["accuracy"]), 4))
             for s in suites if s.get("suite") in SUITE_DATASETS and isinstance(s.get("accuracy"), (int, float))
             and is_full_suite(s)]  # a `--limit` smoke test is not a benchmark result
    hub = hub_base_id(base)
    return ModelCardData(
        base_model=hub[0] if hub else None,
        library_name="peft" if adapter else "transformers",
        tags=["grpo", "trl", "grpo-cli", *(["lora"] if adapter else [])],
        datasets=[data_ref] if isinstance(data_ref, str) and is_hub_id(data_ref, owner=True) else None,
        license=base_license(base), pipeline_tag=task,
        model_name=name if evals else None, eval_results=evals or None)


def _training_lines(run_dir: Path, manifest: Manifest) -> list[str]:
    step = "?" if manifest.global_step is None else manifest.global_step
    lines = [f"- status: **{manifest.status or 'unknown'}** at step {step}"]
    if manifest.started:
        lines.append(f"- started {manifest.started}, finished {manifest.finished or '-'}")
    if manifest.world_size:
        lines.append(f"- {manifest.world_size} process(es), {manifest.device or '?'}, {manifest.dtype or '?'}")
    stats = manifest.data or {}
    if stats:
        lines.append("- data: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in stats.items()))
    logs = _training_logs(run_dir)
    if not logs:
        return lines
    keys = summary_keys(logs)
    size = summary_window(len(logs))  # the windows `grpo train` and `grpo report` use
    first, final = logs[:size], logs[-size:]  # labelled as `grpo report` labels them
    lines += ["", f"| metric | first ({step_span(first[0].get('step'), first[-1].get('step'))}) | final "
                  f"({step_span(final[0].get('step'), final[-1].get('step'))}) |", "|---|---:|---:|"]
    for k, a, b in first_and_last(logs, keys):
        if a is not None or b is not None:
            lines.append(f"| {k} | {'-' if a is None else f'{a:.4f}'} | {'-' if b is None else f'{b:.4f}'} |")
    return lines


def _training_logs(run_dir: Path) -> list[dict[str, Any]]:
    """The training records of metrics.jsonl (a garbled line, as a killed run leaves, is skipped)."""
    return training_logs(runs.read_jsonl(run_dir / runs.METRICS))


def _number(value: Any) -> str:
    return number_text(value)


def _held_out_how(recipe: dict[str, Any], before: Scores) -> str:
    """One sentence: which prompts, how many samples, how they were drawn."""
    ev = recipe.get("eval") or {}
    data = recipe.get("data") or {}
    if ev.get("suite"):
        what = f"the bundled `{ev['suite']}` suite"
    else:
        what = f"the `{data.get('eval_split') or 'eval'}` split of the training data's source"
    temperature = ev.get("temperature")
    how = "greedy decoding" if temperature == 0 else f"sampling at temperature {temperature}" if temperature else \
        "sampling"
    prompts, k = ("?" if n is None else n for n in (before.prompts, before.k))
    return (f"Held-out evaluation before and after training (`eval.before_after`): {prompts} "
            f"prompts from {what}, {k} completion(s) each, {how}, scored with the recipe's rewards.")


def _suite_lines(suites: list[dict[str, Any]]) -> list[str]:
    lines = ["", "| suite | model | problems | decoding | accuracy | 95% CI |", "|---|---|---:|---|---:|---:|"]
    smoke = []
    for s in suites:
        lo, hi = s.get("ci95") or (0.0, 1.0)
        size = s.get("suite_size")
        problems = f"{s.get('problems')} of {size}" if isinstance(size, int) else f"{s.get('problems')}"
        if not is_full_suite(s):
            smoke.append(str(s.get("suite")))
            problems += " (smoke test)"
        lines.append(f"| {s.get('suite')} | {s.get('model')} | {problems} | {s.get('decoding', '?')}, "
                     f"k={s.get('k', 1)} | {100 * float(s.get('accuracy', 0)):.1f}% | {100 * lo:.1f}–{100 * hi:.1f}% |")
    if smoke:
        lines += ["", f"Runs marked smoke test (`grpo eval --suite … --limit N`) cover only the first problems of "
                      f"{', '.join(smoke)}; they are not benchmark results and are not in this card's metadata."]
    return lines


def _eval_lines(manifest: Manifest, suites: list[dict[str, Any]], recipe: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    best = manifest.best
    if best is not None:
        lines.append(f"- task metric `{best.metric}`: best {best.value:.4f} at step {best.step} "
                     f"(saved in `{best.path}/`)")
    if manifest.eval_before is not None:
        lines += ["", _held_out_how(recipe, manifest.eval_before), "", "| held-out metric | before | after |",
                  "|---|---:|---:|"]
        for key, value, after in manifest.held_out():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                lines.append(f"| {key} | {_number(value)} | {_number(after)} |")
    if suites:
        lines += _suite_lines(suites)
    return lines or ["No evaluation was recorded (set `eval.before_after`, `eval.every_steps`, or run "
                     "`grpo eval --suite NAME` on the run dir before writing the card)."]


CARD_MARK = "through grpo-cli"
"""In every card grpo writes: a README.md without it is the user's own, which push never replaces unforced."""


def build_card(target: Path, *, run_dir: Path | None, base: str, adapter: bool, name: str | None = None) -> str:
    """The card's text for the model in `target`, made by the run in `run_dir` (None: only what target holds);
    `name` titles it when target is not where the model will live (`grpo merge` writes into a temporary dir)."""
    from huggingface_hub import ModelCard

    run = run_dir or target
    recipe = _read(run / runs.RECIPE)
    recipe = recipe if isinstance(recipe, dict) else {}  # a hand-edited file must not break the card
    manifest = runs.read_manifest(run)
    suites = suite_results(target, run)
    name = name or target.resolve().name
    vision = any((d / n).is_file() for d in (target, run) for n in ("preprocessor_config.json", "processor_config.json")
                 ) or is_vision_language((recipe.get("model") or {}).get("kind", "auto") if recipe else "auto", base,
                                         local_only=True)
    data = _front_matter(recipe, base, adapter, name, suites, vision)
    shown = public_base(base)  # never this machine's path: a Hub id, `bundled:NAME`, or the folder's name
    hub = data.base_model
    named = f"`{hub or shown}`" + (f" (trained from `{shown}`)" if hub and hub != shown and not is_local_path(base)
                                   else "")
    recipe = scrub(recipe)
    what = "a LoRA adapter for" if adapter else "a fine-tune of"
    trl = manifest.package_version("trl") if manifest is not None else None
    lines = [f"# {name}", "", f"{name} is {what} {named}, trained with GRPO (Group Relative Policy Optimization) "
             f"using TRL{f' {trl}' if trl else ''} {CARD_MARK}.", ""]
    rewards = recipe.get("rewards") or []
    if rewards:
        lines += ["## Rewards", "", "| reward | weight |", "|---|---:|"]
        for r in rewards:
            label = r.get("label") or r.get("name") or r.get("function") or r.get("model") or "?"
            lines.append(f"| {label} | {r.get('weight', 1.0)} |")
        lines.append("")
    if manifest is not None:
        lines += ["## Training", "", *_training_lines(run, manifest), ""]
    lines += ["## Evaluation", "", *_eval_lines(manifest or Manifest(), suites, recipe), ""]
    if (run / runs.REPORT_IMAGE).is_file():
        lines += ["## Training curves", "", "![training curves](report.png)", ""]
    if recipe:
        lines += ["## Recipe", "", "```yaml", yaml.safe_dump(recipe, sort_keys=False).rstrip(), "```", ""]
    lines += gguf_lines(target)
    versions = (manifest.versions if manifest is not None else None) or {}
    if versions:
        lines += ["## Framework versions", "", *(f"- {k}: {v}" for k, v in versions.items()), ""]
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines)).content


def gguf_lines(target: Path) -> list[str]:
    """The card's GGUF section: each file `grpo export --gguf` wrote and verified (grpo_gguf.json)."""
    entries = _read(target / GGUF_RECORD)
    entries = [e for e in entries if isinstance(e, dict) and e.get("file")] if isinstance(entries, list) else []
    if not entries:
        return []
    lines = ["## GGUF", ""]
    for e in entries:
        where = "in this repository" if e.get("in_model_dir") else "written beside it"
        lines.append(f"- `{e['file']}` ({str(e.get('type', '?')).upper()}, {where}): read back through transformers' "
                     f"GGUF loader, its logits are within {float(e.get('max_logit_diff', 0)):.3g} of this model's "
                     f"(tolerance {float(e.get('tolerance', 0)):.3g}); runs with llama.cpp and Ollama.")
    return [*lines, ""]


def refresh_gguf_section(target: Path) -> None:
    """Put the GGUF section into an existing grpo card in place (a merged model's card is not rebuilt without its
    run), before its framework versions."""
    path = target / CARD_FILE
    if not path.is_file():
        return
    text = path.read_text(encoding="utf-8")
    if "grpo-cli" not in text.split("\n---", 1)[0]:
        return  # not a card grpo wrote
    head, sep, rest = text.partition("\n## GGUF\n")
    if sep:  # drop the old section: up to the next heading
        after = rest.split("\n## ", 1)
        text = head + ("\n## " + after[1] if len(after) > 1 else "\n")
    section = "\n".join(gguf_lines(target))
    marker = "## Framework versions"
    text = text.replace(marker, section + marker, 1) if marker in text else text.rstrip("\n") + "\n\n" + section
    path.write_text(text, encoding="utf-8")


def write_card(target: Path, *, run_dir: Path | None, base: str, adapter: bool, name: str | None = None) -> Path:
    """Write target/README.md (and copy the report image beside it when it lives elsewhere)."""
    text = build_card(target, run_dir=run_dir, base=base, adapter=adapter, name=name)
    image = (run_dir or target) / runs.REPORT_IMAGE
    if image.is_file() and not (target / runs.REPORT_IMAGE).exists():
        shutil.copy2(image, target / runs.REPORT_IMAGE)

    path = target / CARD_FILE
    try:
        if path.is_dir():
            raise IsADirectoryError(21, "it is a directory")
        write_atomic(path, text)  # whole or not at all: a push interrupted here leaves the old card
    except OSError as exc:
        raise GrpoError(f"cannot write the model card {path}: {exc.strerror or exc}", where=str(target),
                        fix=f"The card is grpo's {CARD_FILE} of the run: move what is at {path} aside, or make "
                            f"{target} writable.") from None
    return path
