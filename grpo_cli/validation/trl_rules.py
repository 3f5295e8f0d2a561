"""TRL 1.16's own rejections, checked from the recipe before any model loads.

`GRPOConfig.__post_init__` and `GRPOTrainer.__init__` raise for settings that the recipe alone
decides -- but only after the model has loaded, often on a GPU box. Each rule below mirrors one
raise site: where it is in TRL, TRL's condition, the recipe key a user edits, and the fix. The
batch arithmetic raises live in `batching.py`; docs/preflight.md lists the raise sites that are
deliberately not mirrored and why. tests/validation/test_trl_rules.py checks every rule against the real
GRPOConfig/GRPOTrainer, so a TRL release that changes a condition fails the table, not a user.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grpo_cli.errors import Problem
from grpo_cli.findings import Findings
from grpo_cli.planning.model_config import find_model_config

if TYPE_CHECKING:
    from grpo_cli.recipe.schema import Recipe
    from grpo_cli.validation.outcome import Preflight

CONFIG = "trl/trainer/grpo_config.py GRPOConfig.__post_init__"
TRAINER = "trl/trainer/grpo_trainer.py GRPOTrainer.__init__"
TRUNCATE_MODES = ("token_truncate", "sequence_truncate")
TOKEN_MODES = ("token_truncate", "token_mask")
SUMMING_LOSSES = ("bnpo", "dr_grpo", "dapo", "cispo")


@dataclass(frozen=True)
class RuleInput:
    """What the rules read: recipe values (TRL defaults filled in), LoRA targets, vLLM mode, model config."""

    training: Callable[[str], Any]
    lora_targets: list[str] | str | None
    vllm_mode: str = "off"
    model_config: dict[str, Any] | None = None

    def t(self, key: str) -> Any:
        return self.training(key)


@dataclass(frozen=True)
class TrlRule:
    """One TRL raise (or warning) site and its recipe-side check; `check` returns what is wrong, or None."""

    name: str
    site: str
    condition: str
    key: str
    fix: str
    check: Callable[[RuleInput], str | None]
    warn_only: bool = False  # TRL logs a warning and trains on

    def message(self, what: str) -> str:
        return f"{self.key}: {what}. {self.fix}"


def _hub_repo(r: RuleInput) -> str | None:
    if r.t("log_completions_hub_repo") is not None and not r.t("log_completions"):
        return "is set but log_completions is false, so TRL has nothing to upload and rejects it"
    return None


def _auto_batch(r: RuleInput) -> str | None:
    if r.t("auto_find_batch_size"):
        return ("is not supported by GRPO: halving the batch on out-of-memory would split the prompt groups "
                "of num_generations completions")
    return None


def _clip_max(r: RuleInput) -> Any:
    cap = r.t("vllm_importance_sampling_cap")  # deprecated alias TRL copies into clip_max
    return cap if cap is not None else r.t("vllm_importance_sampling_clip_max")


def _clip_order(r: RuleInput) -> str | None:
    low, high = r.t("vllm_importance_sampling_clip_min"), _clip_max(r)
    if low is not None and high is not None and low >= high:
        return f"{low} must be less than vllm_importance_sampling_clip_max ({high})"
    return None


def _truncate_bounds(r: RuleInput) -> str | None:
    mode = r.t("vllm_importance_sampling_mode")
    if (r.t("vllm_importance_sampling_correction") and mode in TRUNCATE_MODES
            and r.t("vllm_importance_sampling_clip_min") is None and _clip_max(r) is None):
        return f"{mode!r} truncates ratios but both vllm_importance_sampling_clip_min and _clip_max are null"
    return None


def _sync_beta(r: RuleInput) -> str | None:
    if r.t("sync_ref_model") and float(r.t("beta") or 0.0) == 0.0:
        return "is true but beta is 0, so there is no reference model to synchronise"
    return None


def _sync_lora(r: RuleInput) -> str | None:
    if r.t("sync_ref_model") and float(r.t("beta") or 0.0) != 0.0 and r.lora_targets is not None:
        return ("is not supported with LoRA: the reference is the base model with the adapter disabled, "
                "there is no separate reference model to synchronise")
    return None


def _lora_lm_head(r: RuleInput) -> str | None:
    if isinstance(r.lora_targets, list) and "lm_head" in r.lora_targets:
        return ("includes lm_head, but TRL computes log-probabilities from lm_head.weight directly, so an adapter "
                "there would never train (and cast_lm_head_to_fp32 rejects it too)")
    return None


def _liger_flce(r: RuleInput) -> str | None:
    cfg = r.t("liger_kernel_config") or {}
    if r.t("use_liger_kernel") and isinstance(cfg, dict) and cfg.get("fused_linear_cross_entropy"):
        return "sets fused_linear_cross_entropy, which replaces the model's forward that GRPO patches"
    return None


def _router_aux(r: RuleInput) -> str | None:
    coef = r.t("router_aux_loss_coef")
    cfg = r.model_config
    if not coef or cfg is None:
        return None
    inner = cfg.get("text_config")
    text = inner if isinstance(inner, dict) else cfg
    if "output_router_logits" not in text:
        return f"is {coef} but the model is not a mixture-of-experts model that returns router logits"
    return None


def _vespo_vllm_mode(r: RuleInput) -> str | None:
    mode = r.t("vllm_importance_sampling_mode")
    if (r.t("loss_type") == "vespo" and r.vllm_mode != "off" and r.t("vllm_importance_sampling_correction")
            and mode not in TOKEN_MODES):
        return f"is {mode!r}, but the vespo loss with vLLM's importance-sampling correction needs a token mode"
    return None


def _luspo_level(r: RuleInput) -> str | None:
    if r.t("loss_type") == "luspo" and r.t("importance_sampling_level") != "sequence":
        return "is not 'sequence', but the luspo loss is defined on sequence-level importance weights"
    return None


def _vespo_level(r: RuleInput) -> str | None:
    if r.t("loss_type") == "vespo" and r.t("importance_sampling_level") != "token":
        return "is not 'token'; vespo computes sequence-level weights itself"
    return None


def _sequence_summing(r: RuleInput) -> str | None:
    loss = r.t("loss_type")
    if r.t("importance_sampling_level") == "sequence" and loss in SUMMING_LOSSES:
        return f"is 'sequence' with loss_type {loss!r}, which sums per-token terms and so weights by length"
    return None


RULES: tuple[TrlRule, ...] = (
    TrlRule("log_completions_hub_repo", CONFIG, "log_completions_hub_repo is not None and not log_completions",
            "training.log_completions_hub_repo", "Set `training.log_completions: true`, or remove the repo.",
            _hub_repo),
    TrlRule("auto_find_batch_size", CONFIG, "auto_find_batch_size", "training.auto_find_batch_size",
            "Remove it and lower `training.per_device_train_batch_size` instead.", _auto_batch),
    TrlRule("is_clip_order", CONFIG, "vllm_importance_sampling_clip_min >= vllm_importance_sampling_clip_max",
            "training.vllm_importance_sampling_clip_min",
            "Make it smaller than `vllm_importance_sampling_clip_max` (default 3.0).", _clip_order),
    TrlRule("is_truncate_bounds", CONFIG, "correction and mode in *_truncate and clip_min is None and clip_max is "
            "None", "training.vllm_importance_sampling_mode",
            "Set `vllm_importance_sampling_clip_max` (e.g. 3.0) or `_clip_min`, or use a *_mask mode.",
            _truncate_bounds),
    TrlRule("sync_ref_model_beta", TRAINER, "args.sync_ref_model and beta == 0.0", "training.sync_ref_model",
            "Remove `sync_ref_model`, or set `training.beta` above 0 (e.g. 0.04).", _sync_beta),
    TrlRule("sync_ref_model_peft", TRAINER, "args.sync_ref_model and is_peft_model(model) (NotImplementedError)",
            "training.sync_ref_model", "Remove `sync_ref_model`, or fine-tune fully (drop `model.lora`).",
            _sync_lora),
    TrlRule("lora_lm_head", TRAINER, "is_peft_model(model) and the output embeddings are a PEFT tuner layer",
            "model.lora.target_modules", "Remove `lm_head` from `target_modules` (use `modules_to_save: "
            "[lm_head]` to train it fully).", _lora_lm_head),
    TrlRule("liger_fused_linear_cross_entropy", TRAINER, "use_liger_kernel and "
            "liger_kernel_config['fused_linear_cross_entropy']", "training.liger_kernel_config",
            "Set `fused_linear_cross_entropy: false` (TRL fuses the LM head itself).", _liger_flce),
    TrlRule("router_aux_loss_coef", TRAINER, "router_aux_loss_coef and the text config has no "
            "output_router_logits", "training.router_aux_loss_coef",
            "Remove it: only mixture-of-experts models have a load-balancing loss.", _router_aux),
    TrlRule("vespo_vllm_is_mode", TRAINER, "loss_type == 'vespo' and use_vllm and "
            "vllm_importance_sampling_correction and mode not in (token_truncate, token_mask)",
            "training.vllm_importance_sampling_mode",
            "Set it to `token_truncate` or `token_mask` (default is sequence_mask), or turn the correction off.",
            _vespo_vllm_mode),
    TrlRule("luspo_sequence_level", TRAINER, "loss_type == 'luspo' and importance_sampling_level != 'sequence' "
            "(logger.warning)", "training.importance_sampling_level",
            "Set `importance_sampling_level: sequence` to train the objective of the LUSPO paper.", _luspo_level,
            warn_only=True),
    TrlRule("vespo_token_level", TRAINER, "loss_type == 'vespo' and importance_sampling_level != 'token' "
            "(logger.warning)", "training.importance_sampling_level",
            "Remove it (the default is `token`).", _vespo_level, warn_only=True),
    TrlRule("sequence_level_summing_loss", TRAINER, "importance_sampling_level == 'sequence' and loss_type in "
            "(bnpo, dr_grpo, dapo, cispo) (logger.warning)", "training.importance_sampling_level",
            "For GSPO use `loss_type: grpo` with sequence-level importance sampling.", _sequence_summing,
            warn_only=True),
)


def rule_input(recipe: Recipe, model_config: dict[str, Any] | None = None) -> RuleInput:
    """The rules' view of a recipe; `model_config` is config.json (or a shipped shape) when known."""
    lora = recipe.model.lora
    return RuleInput(training=recipe.training.get, lora_targets=None if lora is None else lora.target_modules,
                     vllm_mode=recipe.launch.vllm.mode, model_config=model_config)


def check_trl(recipe: Recipe, pf: Preflight) -> Findings:
    """What TRL would reject (or warn about) after loading, decided from the recipe now."""
    config = None
    if recipe.training.router_aux_loss_coef:  # the one rule that reads the model's config
        config, _ = find_model_config(recipe)
    return check_trl_rules(rule_input(recipe, config))


def check_trl_rules(inp: RuleInput) -> Findings:
    """The problems TRL would raise for and the warnings TRL would log, for one recipe."""
    found = Findings()
    problems, warnings = found.problems, found.warnings
    for rule in RULES:
        what = rule.check(inp)
        if what is None:
            continue
        if rule.warn_only:
            warnings.append(f"{rule.message(what)} (TRL warns and trains on)")
        else:
            problems.append(Problem(rule.key, what + " (TRL rejects this after the model loads)", rule.fix))
    return found
