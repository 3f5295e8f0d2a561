"""The `training` section: TRL GRPOConfig fields, checked against the installed TRL.

The keys are TRL's own (`beta`, `num_generations`, `loss_type`, ...), so knowledge of TRL
transfers. They are checked against the fields of the installed GRPOConfig, read from
its source without importing torch (see `grpo_cli.recipe.trl_fields`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar, overload

from pydantic import ConfigDict, model_validator
from pydantic_core import PydanticCustomError

from grpo_cli.errors import did_you_mean
from grpo_cli.recipe.hints import MIGRATIONS, unknown_key_hint
from grpo_cli.recipe.schema.common import Section
from grpo_cli.recipe.trl_fields import accepted_values, grpo_config_fields, json_schema_for

# GRPOConfig fields that other recipe sections own: setting them here would be ambiguous.
OWNED_ELSEWHERE = {
    "output_dir": "output.dir",
    "report_to": "output.report_to",
    "run_name": "output.run_name",
    "project": "output.trackio_project",
    "overwrite_output_dir": "output.overwrite",
    "use_vllm": "launch.vllm.mode",
    "vllm_mode": "launch.vllm.mode",
    "vllm_server_host": "launch.vllm.host",
    "vllm_server_port": "launch.vllm.port",
    "vllm_server_base_url": "launch.vllm.base_url",
    "vllm_server_timeout": "launch.vllm.server_timeout",
    "vllm_gpu_memory_utilization": "launch.vllm.gpu_memory_utilization",
    "vllm_tensor_parallel_size": "launch.vllm.tensor_parallel_size",
    "vllm_enable_sleep_mode": "launch.vllm.enable_sleep_mode",
    "vllm_max_model_length": "launch.vllm.max_model_length",
    "reward_weights": "rewards[].weight",
    "deepspeed": "launch.profile",
    "fsdp": "launch.profile",
    "fsdp_config": "launch.profile",
    "trust_remote_code": "model.trust_remote_code",
    "model_init_kwargs": "model",
}

# Values TRL 1.16 accepts but only checks deep inside training.
CHOICES: dict[str, tuple[Any, ...]] = {
    "loss_type": ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"),
    "scale_rewards": ("group", "batch", "none", True, False),
    "importance_sampling_level": ("token", "sequence"),
    "multi_objective_aggregation": ("sum_then_normalize", "normalize_then_sum"),
    "eval_strategy": ("no", "steps", "epoch"),
    "save_strategy": ("no", "steps", "epoch", "best"),
    "logging_strategy": ("no", "steps", "epoch"),
    "vllm_importance_sampling_mode": ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask"),
}

# (lower bound, inclusive?) for numbers that make no sense below it.
BOUNDS: dict[str, tuple[float, bool]] = {
    "learning_rate": (0.0, False),
    "temperature": (0.0, False),
    "epsilon": (0.0, False),
    "epsilon_high": (0.0, False),
    "beta": (0.0, True),
    "top_p": (0.0, False),
    "num_generations": (2.0, True),
    "num_generations_eval": (1.0, True),
    "max_completion_length": (1.0, True),
    "per_device_train_batch_size": (1.0, True),
    "per_device_eval_batch_size": (1.0, True),
    "gradient_accumulation_steps": (1.0, True),
    "steps_per_generation": (1.0, True),
    "generation_batch_size": (1.0, True),
    "num_iterations": (1.0, True),
    "num_train_epochs": (0.0, False),
    "warmup_steps": (0.0, True),
    "weight_decay": (0.0, True),
    "max_grad_norm": (0.0, True),
    "logging_steps": (0.0, False),
    "save_steps": (0.0, False),
    "eval_steps": (0.0, False),
    "repetition_penalty": (0.0, False),
    "seed": (0.0, True),
    "data_seed": (0.0, True),
}
UPPER: dict[str, float] = {"top_p": 1.0, "seed": 2**32 - 1, "data_seed": 2**32 - 1}  # numpy's seed range
T = TypeVar("T")


def _coerce(name: str, value: Any, kinds: frozenset[str]) -> Any:
    """Check one value against a field's kinds; return it (possibly converted) or raise ValueError."""
    if "any" in kinds:
        return value
    if value is None:
        if "null" in kinds:
            return None
        raise ValueError("may not be null")
    if isinstance(value, bool):
        if "bool" in kinds or name == "scale_rewards":
            return value
        raise ValueError(f"expected {_describe(kinds)}, got the boolean {value}")
    if isinstance(value, int) and ("int" in kinds or "float" in kinds):
        return value  # TRL takes an int where it declares float (logging_steps: 20, not 20.0)
    if isinstance(value, float):
        if "float" in kinds:
            return value
        if "int" in kinds and value.is_integer():
            return int(value)
    if isinstance(value, str):
        if "str" in kinds:
            return value
        if "float" in kinds or "int" in kinds:
            try:
                number = float(value)
            except ValueError:
                pass
            else:
                if "int" in kinds and number.is_integer() and "float" not in kinds:
                    return int(number)
                if "float" in kinds:
                    return number
    if isinstance(value, dict) and "dict" in kinds:
        return value
    if isinstance(value, list) and "list" in kinds:
        return value
    if isinstance(value, (str, list)) and "list" in kinds and "str" in kinds:
        return value
    raise ValueError(f"expected {_describe(kinds)}, got {type(value).__name__} {value!r}")


def _describe(kinds: frozenset[str]) -> str:
    words = {"bool": "a boolean", "int": "an integer", "float": "a number", "str": "a string",
             "dict": "a mapping", "list": "a list", "null": "null"}
    return " or ".join(words[k] for k in sorted(kinds) if k in words)


def check_training_fields(values: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str, str]]]:
    """Validate GRPOConfig keys/values; return (coerced values, [(key, what, fix)])."""
    fields = grpo_config_fields()
    problems: list[tuple[str, str, str]] = []
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key in OWNED_ELSEWHERE:
            problems.append((key, "is set by another recipe section",
                             f"Set `{OWNED_ELSEWHERE[key]}` instead."))
            continue
        if fields and key not in fields:
            if key in MIGRATIONS:
                target, why = MIGRATIONS[key]
                problems.append((key, "is not a field of the installed TRL's GRPOConfig",
                                 f"`{key}` is a name from older guides: use `{target}` instead ({why})."))
            else:
                problems.append((key, "is not a GRPOConfig field", unknown_key_hint(key, fields, "training")))
            continue
        field = fields.get(key)
        if value is False and "no" in CHOICES.get(key, ()):
            value = "no"  # YAML 1.1 reads an unquoted `no` (e.g. `save_strategy=no`) as false
        try:
            value = _coerce(key, value, field.kinds) if field else value
        except ValueError as exc:
            problems.append((key, f"{exc}", f"TRL declares `{key}: {field.annotation}`." if field else ""))
            continue
        enum = accepted_values(field) if field is not None and key not in CHOICES else None
        if enum and isinstance(value, str) and value not in enum:
            guess = did_you_mean(value, enum)
            problems.append((key, f"{value!r} is not an accepted value",
                             (f"Did you mean {guess!r}? " if guess else "") + f"Use one of {', '.join(enum)}."))
            continue
        if key in CHOICES and value not in CHOICES[key]:
            allowed = ", ".join(repr(c) for c in CHOICES[key])
            problems.append((key, f"{value!r} is not an accepted value", f"Use one of {allowed}."))
            continue
        if key in BOUNDS and isinstance(value, (int, float)) and not isinstance(value, bool):
            low, inclusive = BOUNDS[key]
            bad = math.isnan(value) or (value < low if inclusive else value <= low)
            if math.isinf(value) and key != "max_grad_norm":  # inf gradient norm: no clipping, as TRL allows
                problems.append((key, f"{value} is not a finite number", "Give a finite value."))
                continue
            if bad:
                relation = ">=" if inclusive else ">"
                problems.append((key, f"{value} is out of range", f"It must be {relation} {low:g}."))
                continue
            if key in UPPER and value > UPPER[key]:
                problems.append((key, f"{value} is out of range", f"It must be <= {UPPER[key]:.10g}."))
                continue
        out[key] = value
    return out, problems


def _training_json_schema(schema: dict[str, Any]) -> None:
    schema["properties"] = {
        name: json_schema_for(field)
        for name, field in sorted(grpo_config_fields().items())
        if name not in OWNED_ELSEWHERE
    }
    schema["additionalProperties"] = False


class TrlValue(Generic[T]):
    """A typed read of one GRPOConfig value, as a TrainingSection attribute named like TRL's field: the recipe's
    value, else the installed TRL's default (`TrainingSection.get`), converted by `kind`; `fallback` where null."""

    def __init__(self, kind: Callable[[Any], T], fallback: T) -> None:
        self.kind, self.fallback, self.name = kind, fallback, ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> TrlValue[T]: ...
    @overload
    def __get__(self, obj: TrainingSection, owner: type) -> T: ...
    def __get__(self, obj: TrainingSection | None, owner: type) -> TrlValue[T] | T:
        if obj is None:
            return self
        value = obj.get(self.name)
        return self.fallback if value is None else self.kind(value)


def _enum_value(value: Any) -> str:
    """`no`, `steps`, ...: an enum member's value when TRL's default is an enum."""
    return str(getattr(value, "value", value))


class TrainingSection(Section):
    """TRL GRPOConfig fields (same names and meaning); see TRL's GRPOConfig documentation."""

    model_config = ConfigDict(extra="allow", json_schema_extra=_training_json_schema)

    @model_validator(mode="before")
    @classmethod
    def _check(cls, data: Any) -> Any:
        if data is None:
            return {}
        if not isinstance(data, dict):
            return data
        values, problems = check_training_fields({str(k): v for k, v in data.items()})
        if problems:
            raise PydanticCustomError("trl_fields", "{summary}",
                                      {"summary": "; ".join(f"{k}: {w}" for k, w, _ in problems),
                                       "problems": problems})
        return values

    def values(self) -> dict[str, Any]:
        """The GRPOConfig keyword arguments given in the recipe."""
        return dict(self.model_extra or {})

    def get(self, key: str, default: Any = None) -> Any:
        """A field's value: the recipe's, else the installed GRPOConfig's default."""
        extra = self.model_extra or {}
        if key in extra:
            return extra[key]
        field = grpo_config_fields().get(key)
        return field.default if field is not None else default

    # Typed accessors: the values grpo itself reads, each the recipe's or else the installed GRPOConfig's
    # default (read once, by `get`), so a typo fails type checking instead of returning None.
    max_steps: ClassVar[TrlValue[int]] = TrlValue(int, -1)
    """Optimizer steps to run (-1: run `num_train_epochs`)."""
    num_train_epochs: ClassVar[TrlValue[float]] = TrlValue(float, 1.0)
    max_completion_length: ClassVar[TrlValue[int]] = TrlValue(int, 256)
    """Tokens per completion; 256 where the recipe sets it to null (sampling outside TRL needs a bound)."""
    max_tool_calling_iterations: ClassVar[TrlValue[int | None]] = TrlValue(int, None)
    num_generations: ClassVar[TrlValue[int]] = TrlValue(int, 8)
    per_device_train_batch_size: ClassVar[TrlValue[int]] = TrlValue(int, 8)
    gradient_accumulation_steps: ClassVar[TrlValue[int]] = TrlValue(int, 1)
    steps_per_generation: ClassVar[TrlValue[int | None]] = TrlValue(int, None)
    generation_batch_size: ClassVar[TrlValue[int | None]] = TrlValue(int, None)
    temperature: ClassVar[TrlValue[float]] = TrlValue(float, 1.0)
    top_p: ClassVar[TrlValue[float]] = TrlValue(float, 1.0)
    beta: ClassVar[TrlValue[float]] = TrlValue(float, 0.0)
    """The KL coefficient (0: no reference model, no KL term)."""
    seed: ClassVar[TrlValue[int]] = TrlValue(int, 0)
    learning_rate: ClassVar[TrlValue[float]] = TrlValue(float, 0.0)
    max_grad_norm: ClassVar[TrlValue[float]] = TrlValue(float, 1.0)
    save_strategy: ClassVar[TrlValue[str]] = TrlValue(_enum_value, "steps")
    lr_scheduler_type: ClassVar[TrlValue[str]] = TrlValue(_enum_value, "linear")
    router_aux_loss_coef: ClassVar[TrlValue[float | None]] = TrlValue(float, None)
    use_liger_kernel: ClassVar[TrlValue[bool]] = TrlValue(bool, False)
    use_transformers_continuous_batching: ClassVar[TrlValue[bool]] = TrlValue(bool, False)
    use_transformers_paged: ClassVar[TrlValue[bool]] = TrlValue(bool, False)
    num_iterations: ClassVar[TrlValue[int]] = TrlValue(int, 1)
    eval_strategy: ClassVar[TrlValue[str]] = TrlValue(_enum_value, "no")
    do_eval: ClassVar[TrlValue[bool]] = TrlValue(bool, False)
    num_generations_eval: ClassVar[TrlValue[int | None]] = TrlValue(int, None)
    per_device_eval_batch_size: ClassVar[TrlValue[int]] = TrlValue(int, 8)
    push_to_hub: ClassVar[TrlValue[bool]] = TrlValue(bool, False)
    hub_model_id: ClassVar[TrlValue[str | None]] = TrlValue(str, None)
    optim: ClassVar[TrlValue[str]] = TrlValue(_enum_value, "adamw_torch")
    logging_steps: ClassVar[TrlValue[float]] = TrlValue(float, 10.0)
    """Steps between logs; below 1 a fraction of the run's steps (transformers' rule)."""
    logging_strategy: ClassVar[TrlValue[str]] = TrlValue(_enum_value, "steps")

    @property
    def lr_scheduler_kwargs(self) -> dict[str, Any] | str:
        """A mapping, or the JSON string TRL also accepts (checked where it is used)."""
        value = self.get("lr_scheduler_kwargs")
        return value if isinstance(value, dict | str) else {}

    @property
    def chat_template_kwargs(self) -> dict[str, Any]:
        value = self.get("chat_template_kwargs")
        return dict(value) if isinstance(value, dict) else {}

    def checkpointing(self) -> bool:
        """Whether activations are checkpointed, as transformers 5 decides: `activation_checkpointing` when set,
        else its alias `gradient_checkpointing` (TRL's default: true). So `activation_checkpointing: false`
        really turns it off."""
        explicit = (self.model_extra or {}).get("activation_checkpointing")
        return bool(explicit) if explicit is not None else bool(self.get("gradient_checkpointing"))

    def generation_batch(self, world_size: int) -> int:
        """Completions generated at once across all processes, as TRL derives it: `generation_batch_size`, else
        per-device batch x processes x `steps_per_generation` (default: `gradient_accumulation_steps`)."""
        steps = self.steps_per_generation or self.gradient_accumulation_steps
        return self.generation_batch_size or self.per_device_train_batch_size * world_size * steps
