"""DAPO's dynamic sampling over TRL's GRPOTrainer: keep only groups whose chosen reward varies, refill the batch.

The hook is the narrowest one that sees whole groups with their rewards: `_generate_and_score_completions`
(generation batch in, scored and padded tensors out), wrapped on the instance as `step_timing` does, plus
`_calculate_rewards` to read the per-function rewards of each call. In training mode the wrapper:

1. calls TRL's method on the batch it was given, reads the chosen reward of every completion and drops each group
   (`num_generations` consecutive rows) whose population std is <= `min_std`;
2. while groups are missing and rounds are left, draws further prompts from the training split (its own seeded
   order, each repeated `num_generations` times, as TRL's sampler does) and calls TRL's method on them;
3. joins the kept groups (trimmed to the batch's size); a batch still short is filled with dropped groups whose
   advantages are set to 0, so the batch keeps the size TRL splits into micro-batches.

TRL's own metrics (reward, frac_reward_zero_std, ...) still describe everything generated; grpo adds
`dynamic_sampling/*` once per generation batch. `tests/test_dynamic_sampling.py` pins the hook to the installed
TRL (signatures, attributes, output keys), so a TRL change fails loudly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from grpo_cli.errors import GrpoError
from grpo_cli.recipe.schema import Recipe
from grpo_cli.training.group_rows import join_rows, select_rows
from grpo_cli.validation.sampling_checks import chosen_metric

HOOKS = ("_generate_and_score_completions", "_calculate_rewards")
ATTRIBUTES = ("num_generations", "reward_func_names", "reward_weights", "_metrics", "train_dataset", "accelerator",
              "_tokenizer", "model", "args")
PREFIX = "dynamic_sampling/"


def hook_problems(trainer: Any) -> list[str]:
    """What this trainer lacks of what dynamic sampling uses (empty for the TRL grpo was built against)."""
    return [name for name in (*HOOKS, *ATTRIBUTES) if not hasattr(trainer, name)]


class DynamicSampler:
    """The wrapper's state: the chosen reward, the extra prompts' order, and the last call's rewards."""

    def __init__(self, trainer: Any, metric: str, min_std: float, max_rounds: int, seed: int) -> None:
        import torch

        self.trainer, self.metric, self.min_std, self.max_rounds = trainer, metric, min_std, max_rounds
        self.group = int(trainer.num_generations)
        self.generator = torch.Generator().manual_seed(seed + 7919)  # its own stream: TRL's sampler is untouched
        self.order: list[int] = []
        self.last_rewards: Any = None

    def attach(self) -> None:
        missing = hook_problems(self.trainer)
        if missing:
            raise GrpoError(f"the installed TRL's GRPOTrainer has no {', '.join(missing)}, which dynamic sampling "
                            "hooks into", where="sampling.dynamic",
                            fix="Install the TRL version grpo supports (trl 1.16) or remove `sampling.dynamic`.")
        if self.trainer.accelerator.num_processes > 1:
            raise GrpoError("dynamic sampling runs on one process only", where="sampling.dynamic",
                            fix="Use launch.profile cpu or single_gpu, or remove `sampling.dynamic`.")
        names = list(self.trainer.reward_func_names)
        if self.metric != "reward" and self.metric not in names:
            raise GrpoError(f"{self.metric!r} is not among the trainer's rewards ({', '.join(names)})",
                            where="sampling.dynamic.metric", fix="Name one of them, or `reward` for the total.")
        original_rewards: Callable[..., Any] = self.trainer._calculate_rewards
        original_score: Callable[..., Any] = self.trainer._generate_and_score_completions

        def calculate_rewards(*args: Any, **kwargs: Any) -> Any:
            self.last_rewards = original_rewards(*args, **kwargs)
            return self.last_rewards

        def generate_and_score(inputs: list[dict[str, Any]]) -> dict[str, Any]:
            if not self.trainer.model.training:
                return original_score(inputs)
            return self.fill(inputs, original_score)

        self.trainer._calculate_rewards = calculate_rewards
        self.trainer._generate_and_score_completions = generate_and_score

    def chosen(self) -> Any:
        """The chosen reward of each completion of the last call, shape (groups, num_generations)."""
        rewards = self.last_rewards
        if self.metric == "reward":
            weights = self.trainer.reward_weights.to(rewards.device)
            values = (rewards * weights.unsqueeze(0)).nansum(dim=1)
        else:
            values = rewards[:, list(self.trainer.reward_func_names).index(self.metric)]
        return values.view(-1, self.group)

    def split_groups(self) -> tuple[list[int], list[int]]:
        """(kept, dropped) group indices of the last call: dropped when the std is <= min_std or undefined."""
        import torch

        values = self.chosen().float()
        std = torch.sqrt(torch.nanmean((values - torch.nanmean(values, dim=1, keepdim=True)) ** 2, dim=1))
        flat = torch.isnan(std) | (std <= self.min_std + 1e-7)
        kept = [i for i, f in enumerate(flat.tolist()) if not f]
        dropped = [i for i, f in enumerate(flat.tolist()) if f]
        return kept, dropped

    def fill(self, inputs: list[dict[str, Any]], score: Callable[..., Any]) -> dict[str, Any]:
        """Generate, drop flat groups, refill from further prompts; the joined batch of the original size."""
        target = len(inputs) // self.group
        kept: list[tuple[dict[str, Any], list[int]]] = []
        dropped: list[tuple[dict[str, Any], list[int]]] = []
        batch, rounds, generated, have = inputs, 0, 0, 0
        while True:
            out = score(batch)
            rounds += 1
            generated += len(batch) // self.group
            keep, drop = self.split_groups()
            kept.append((out, keep))
            dropped.append((out, drop))
            have += len(keep)
            if have >= target or rounds >= self.max_rounds:
                break
            missing = target - have
            rate = max(have / generated, 1.0 / target)
            batch = self.more_prompts(min(target, math.ceil(missing / rate)), inputs[0].keys())
        if rounds == 1 and have == target:  # nothing dropped: TRL's own batch, untouched
            batch_out, filler = kept[0][0], 0
        else:
            batch_out, filler = self.join(kept, dropped, target)
        self.log(dropped_groups=sum(len(d) for _, d in dropped), rounds=rounds, generated_groups=generated,
                 zero_std_trained=filler / target)
        return batch_out

    def join(self, kept: list[tuple[dict[str, Any], list[int]]], dropped: list[tuple[dict[str, Any], list[int]]],
             target: int) -> tuple[dict[str, Any], int]:
        """The first `target` kept groups, then dropped ones with zero advantage; and how many of those."""
        parts, left = [], target
        for out, groups in kept:
            take = groups[:left]
            left -= len(take)
            if take:
                parts.append(select_rows(out, self.rows(take)))
        filler = left
        for out, groups in dropped:
            take = groups[:left]
            left -= len(take)
            if take:
                part = select_rows(out, self.rows(take))
                part["advantages"] = part["advantages"] * 0.0
                parts.append(part)
        return join_rows(parts, self.trainer._tokenizer.pad_token_id), filler

    def rows(self, groups: list[int]) -> Any:
        import torch

        return torch.tensor([g * self.group + j for g in groups for j in range(self.group)], dtype=torch.long)

    def more_prompts(self, groups: int, keys: Any) -> list[dict[str, Any]]:
        """`groups` further training rows, each repeated num_generations times, in this sampler's seeded order."""
        import torch

        dataset = self.trainer.train_dataset
        rows: list[dict[str, Any]] = []
        for _ in range(groups):
            if not self.order:
                self.order = torch.randperm(len(dataset), generator=self.generator).tolist()
            row = dataset[self.order.pop()]
            picked = {k: row[k] for k in keys if k in row}
            rows += [dict(picked) for _ in range(self.group)]
        return rows

    def log(self, **values: float) -> None:
        buffer = self.trainer._metrics["train"]
        for name, value in values.items():
            buffer[PREFIX + name].append(float(value))


def attach_dynamic_sampling(trainer: Any, recipe: Recipe) -> DynamicSampler | None:
    """Wrap the trainer when the recipe asks for `sampling.dynamic`; None (nothing touched) otherwise."""
    settings = recipe.sampling.dynamic
    if settings is None:
        return None

    metric = chosen_metric(recipe) or "reward"
    sampler = DynamicSampler(trainer, metric, settings.min_std, settings.max_rounds, recipe.training.seed)
    sampler.attach()
    return sampler
