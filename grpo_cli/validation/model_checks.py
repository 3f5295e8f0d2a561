"""What `grpo validate` checks about the model reference, without loading it: a directory's config.json and chat
template, a GGUF file's header (architecture, tensor types, chat template, the converter installed)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from grpo_cli.errors import GrpoError, Problem, RecipeError
from grpo_cli.findings import Findings
from grpo_cli.paths import is_gguf_reference
from grpo_cli.planning.model_config import find_model_config
from grpo_cli.recipe.schema import Recipe

if TYPE_CHECKING:
    from grpo_cli.validation.outcome import Preflight


def check_model(recipe: Recipe, pf: Preflight) -> Findings:
    """The model reference; the plan's `model` line (what it is, its dtype, how it is tuned)."""
    found = Findings()
    m = recipe.model
    tuning = f"LoRA r={m.lora.r} alpha={m.lora.alpha}" if m.lora else "full fine-tune"
    if m.quantization:
        tuning += f" on a {m.quantization} base"
    found.plan["model"] = f"{_reference(recipe, found)} (dtype {m.dtype}, {tuning})"
    return found


def check_context_length(recipe: Recipe, pf: Preflight) -> Findings:
    """`context_length_findings` as a preflight check."""
    return context_length_findings(recipe)


def context_length_findings(recipe: Recipe) -> Findings:
    """A prompt and completion longer than the model's positions, refused where its config is known (a local
    directory, the HF cache, `model.shape`, the shipped table; nothing is downloaded). A config that scales its
    positions (`rope_scaling`) may reach further: then a warning, not a refusal. `grpo calibrate` asks it too."""
    found = Findings()
    try:
        config, source = find_model_config(recipe)
    except (GrpoError, OSError, ValueError):
        return found  # an unreadable config is the model check's to report
    limit, scaled = _positions(config) if isinstance(config, dict) else (None, False)
    if limit is None:
        return found
    lengths = [("training.max_completion_length", recipe.training.max_completion_length)]
    if recipe.eval.max_new_tokens is not None:
        lengths.append(("eval.max_new_tokens", recipe.eval.max_new_tokens))
    for key, completion in lengths:
        too_long = _too_long(key, completion, recipe.data.max_prompt_tokens, limit, source)
        if too_long is None:
            continue
        if scaled:
            found.warnings.append(f"{too_long.what}; its rope_scaling may extend that: check the model card. "
                                  f"{too_long.fix}")
        else:
            found.problems.append(too_long)
    return found


def _too_long(key: str, completion: int, prompt: int | None, limit: int, source: str) -> Problem | None:
    """The paragraph for a completion length (`key`) that, with the longest prompt, passes the model's positions."""
    if completion + (prompt or 1) <= limit:
        return None
    where = f"(max_position_embeddings in {source})"
    if prompt is None:
        return Problem(key, f"{key} {completion} leaves no room for a prompt in the model's {limit} positions {where}",
                       f"Set {key} below {limit}, with data.max_prompt_tokens for the prompt.")
    return Problem(f"data.max_prompt_tokens + {key}", f"data.max_prompt_tokens {prompt} + {key} {completion} = "
                   f"{completion + prompt} tokens, more than the model's {limit} positions {where}",
                   f"Lower them so that data.max_prompt_tokens + {key} <= {limit}.")


def _positions(config: dict[str, object]) -> tuple[int | None, bool]:
    """(max_position_embeddings, whether rope scaling may extend it), from the config or its text_config."""
    for part in (config, config.get("text_config")):
        if not isinstance(part, dict):
            continue
        limit = next((part[k] for k in ("max_position_embeddings", "n_positions") if isinstance(part.get(k), int)),
                     None)
        if limit is not None and not isinstance(limit, bool) and limit > 0:
            rope = part.get("rope_scaling") or part.get("rope_parameters") or {}
            kind = rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, dict) else "default"
            return limit, kind not in (None, "default")
    return None, False


def check_vllm(recipe: Recipe, pf: Preflight) -> Findings:
    """A model vLLM cannot serve is refused here, not at its first generate; the plan says vLLM's dtype."""
    if recipe.launch.vllm.mode == "off":
        return Findings()
    from grpo_cli.planning.async_mode import async_plan, async_problems
    from grpo_cli.planning.vllm_support import sampling_dtype, vllm_model_findings, vllm_runs_on_cpu

    config, _ = find_model_config(recipe)
    found = vllm_model_findings(recipe, config)
    found.problems += async_problems(recipe)
    if recipe.launch.vllm.mode == "async":  # its staleness bound and correction, named
        found.plan["async"] = async_plan(recipe, vllm_runs_on_cpu(recipe))
    dtype = sampling_dtype(recipe, config)
    where = "CPU" if vllm_runs_on_cpu(recipe) else "GPU"
    samples = (f"{dtype} (training in {recipe.model.dtype}; TRL's importance-sampling correction absorbs the "
               "difference)" if dtype else "the checkpoint's dtype (float32 -> bfloat16)")
    found.plan["vLLM"] = f"{recipe.launch.vllm.mode} on {where}, samples in {samples}"
    return found


def _reference(recipe: Recipe, pf: Findings) -> str:
    """The model reference: a local directory with config.json (and a chat template for chat prompts), a GGUF
    file, or a hub id (checked when it loads); its description for the plan."""
    ref = recipe.model.name_or_path
    local = recipe.local_model_dir(ref)
    if local is not None and is_gguf_reference(str(local)):
        return _gguf_checks(recipe, local, pf)
    if local is not None:
        if not (local / "config.json").exists():
            pf.problems.append(Problem("model.name_or_path", f"{local} is not a model directory (no config.json)",
                                       "Give a directory saved with save_pretrained, or a hub id like "
                                       "Qwen/Qwen2.5-0.5B-Instruct."))
        elif recipe.data.prompt.chat and not _has_chat_template(local):
            pf.problems.append(Problem("data.prompt.chat", f"the prompts are chat messages but the tokenizer in "
                                       f"{local} has no chat template",
                                       "Use an instruct/chat model, or set `chat: false` with a `template` for "
                                       "plain-text prompts."))
        return f"local directory {local}"
    return f"hub model {ref}" + (f" @ {recipe.model.revision}" if recipe.model.revision else "")


def check_model_reference(recipe: Recipe) -> None:
    """RecipeError when the model reference cannot be used (a GGUF file missing, a directory, truncated, of an
    architecture transformers cannot convert): `grpo memory` would otherwise plan for it, or say "no plan", exit 0."""
    found = Findings()
    _reference(recipe, found)
    problems = [p for p in found.problems if p.where == "model.name_or_path"]
    if problems:
        raise RecipeError(problems, source=recipe.source)


def _gguf_checks(recipe: Recipe, path: Path, pf: Findings) -> str:
    """A GGUF model: the file exists, transformers can convert its architecture and tensor types, and the
    converter is installed; all read from the header, nothing dequantised."""
    import importlib.util

    from grpo_cli.gguf.cache import cached_conversion
    from grpo_cli.gguf.source import read_header

    if path.is_dir():
        pf.problems.append(Problem("model.name_or_path", f"{path} is a directory, not a GGUF file",
                                   "Name the .gguf file itself."))
        return f"GGUF file {path}"
    if not path.is_file():
        pf.problems.append(Problem("model.name_or_path", f"GGUF file {path} not found",
                                   "Check the path (relative to the recipe), or `package:NAME/FILE.gguf` for a "
                                   "file inside an installed Python package."))
        return f"GGUF file {path}"
    try:
        info = read_header(path)
    except GrpoError as exc:
        pf.problems.append(Problem("model.name_or_path", exc.problems[0].what, exc.problems[0].fix))
        return f"GGUF file {path}"
    for why in info.unsupported():
        pf.problems.append(Problem("model.name_or_path", f"{path.name}: {why}",
                                   "Use a GGUF of a supported architecture and tensor type, or the model's "
                                   "safetensors checkpoint."))
    if recipe.data.prompt.chat and info.chat_template is None:
        pf.problems.append(Problem("data.prompt.chat", f"the prompts are chat messages but {path.name} carries no "
                                   "chat template (tokenizer.chat_template)",
                                   "Use an instruct GGUF, or set `chat: false` with a `template`."))
    if importlib.util.find_spec("gguf") is None and cached_conversion(path) is None:
        # A problem, not a warning: `grpo train` would stop at the conversion, seconds of imports later.
        pf.problems.append(Problem("model.name_or_path", f"converting {path.name} to safetensors needs the `gguf` "
                                   "package, which is not installed here (and no converted copy is cached)",
                                   "pip install gguf   (or pip install 'grpo-cli[gguf]')"))
    return info.describe()


def _has_chat_template(model_dir: Path) -> bool:
    """Whether a saved tokenizer carries a chat template (a .jinja file or tokenizer_config.json's key)."""
    import json

    if (model_dir / "chat_template.jinja").exists() or (model_dir / "chat_template.json").exists():
        return True
    config = model_dir / "tokenizer_config.json"
    if not config.exists():
        return True  # a tokenizer we cannot read here; training checks it when it loads
    try:
        settings = json.loads(config.read_text(encoding="utf-8"))
    except ValueError:
        return True
    return not isinstance(settings, dict) or bool(settings.get("chat_template"))  # not a dict: loading names it
