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

With `strategy: oversample` step 1 gets ceil(k x the batch's groups) prompts at once (the batch's own, then further
ones drawn as step 2 draws them) in one call of TRL's method, and step 2 never runs.

TRL's own metrics (reward, frac_reward_zero_std, ...) still describe everything generated; grpo adds
`dynamic_sampling/*` once per generation batch. A step whose extra rounds run past `SAY_EVERY_S` says so on the
console, round by round, and batches that end with every group dropped (only zero-advantage filler trained) are
a health warning (`health.jsonl`, guard `dynamic_sampling`). `tests/training/test_dynamic_sampling.py` pins the hook to
the installed TRL (signatures, attributes, output keys), so a TRL change fails loudly.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_cli.errors import GrpoError
from grpo_cli.planning.sampling_choice import chosen_metric
from grpo_cli.recipe.schema import Recipe
from grpo_cli.training.group_rows import join_rows, select_rows

HOOKS = ("_generate_and_score_completions", "_calculate_rewards")
ATTRIBUTES = ("num_generations", "reward_func_names", "reward_weights", "_metrics", "train_dataset", "accelerator",
              "_tokenizer", "model", "args")
PREFIX = "dynamic_sampling/"
SAY_EVERY_S = 10.0
"""A step's extra rounds are printed once its generation has run this long, and then at most this often."""
EMPTY_BATCHES = 2
"""Consecutive batches with every group dropped before the warning."""

if TYPE_CHECKING:
    from rich.console import Console


def hook_problems(trainer: Any) -> list[str]:
    """What this trainer lacks of what dynamic sampling uses (empty for the TRL grpo was built against)."""
    return [name for name in (*HOOKS, *ATTRIBUTES) if not hasattr(trainer, name)]


class DynamicSampler:
    """The wrapper's state: the chosen reward, the extra prompts' order, and the last call's rewards."""

    def __init__(self, trainer: Any, metric: str, min_std: float, max_rounds: int, seed: int,
                 console: Console | None = None, oversample: float | None = None) -> None:
        import torch

        self.trainer, self.metric, self.min_std = trainer, metric, min_std
        self.oversample = oversample
        """k of `strategy: oversample` (one round of ceil(k x the batch's groups)), None for refill rounds."""
        self.max_rounds = 1 if oversample else max_rounds
        self.group = int(trainer.num_generations)
        self.generator = torch.Generator().manual_seed(seed + 7919)  # its own stream: TRL's sampler is untouched
        self.order: list[int] = []
        self.last_rewards: Any = None
        self.console = console
        self.say_every_s = SAY_EVERY_S
        self.said = 0.0
        self.empty = 0
        """Consecutive batches that ended with every group dropped."""

    def attach(self) -> None:
        missing = hook_problems(self.trainer)
        if missing:
            raise GrpoError(f"the installed TRL's GRPOTrainer has no {', '.join(missing)}, which dynamic sampling "
                            "hooks into", where="sampling.dynamic",
                            fix="Install the TRL version grpo supports (trl 1.16) or remove `sampling.dynamic`.")
        args, processes = self.trainer.args, self.trainer.accelerator.num_processes
        if processes > 1 and (args.per_device_train_batch_size * args.steps_per_generation) % self.group:
            raise GrpoError(f"on {processes} processes dynamic sampling keeps whole groups on each process, but a "
                            f"process's generation batch ({args.per_device_train_batch_size} x "
                            f"{args.steps_per_generation} completions) is not a multiple of num_generations "
                            f"({self.group})", where="sampling.dynamic",
                            fix="Make training.per_device_train_batch_size times steps_per_generation a multiple of "
                                "training.num_generations.")
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
        """Generate, drop flat groups, refill from further prompts; the joined batch of the original size.

        On several processes every call of TRL's method is collective (the rewards are gathered), so each round
        runs on every process with as many prompts on each: the keep-mask over all processes' groups and whether
        another round follows are decided on the main process from the gathered rewards and broadcast (`agree`).
        """
        ranks, rank = self.trainer.accelerator.num_processes, self.trainer.accelerator.process_index
        target = len(inputs) // self.group  # groups per process
        kept: list[tuple[dict[str, Any], list[int]]] = []
        dropped: list[tuple[dict[str, Any], list[int]]] = []
        batch, rounds, generated, have, dropped_total = self.first_batch(inputs, target), 0, 0, [0] * ranks, 0
        self.said = time.monotonic()  # the first round-by-round line comes after say_every_s
        while True:
            if rounds:
                self.say_round(rounds + 1, sum(have), target * ranks)
            out = score(batch)
            rounds += 1
            each = len(batch) // self.group
            generated += each * ranks
            flat, another = self.agree(have, target, rounds)
            mine = flat[rank * each:(rank + 1) * each]
            kept.append((out, [i for i, f in enumerate(mine) if not f]))
            dropped.append((out, [i for i, f in enumerate(mine) if f]))
            dropped_total += sum(flat)
            have = [h + each - sum(flat[r * each:(r + 1) * each]) for r, h in enumerate(have)]
            if not another:
                break
            missing = target - min(have)
            rate = max(sum(have) / generated, 1.0 / target)
            batch = self.more_prompts(min(target, math.ceil(missing / rate)), inputs[0].keys())
        untouched = batch is inputs and rounds == 1 and min(have) == target  # nothing dropped: TRL's own batch
        batch_out = kept[0][0] if untouched else self.join(kept, dropped, target)
        filler = sum(max(target - h, 0) for h in have)
        self.log(dropped_groups=dropped_total, rounds=rounds, generated_groups=generated,
                 zero_std_trained=filler / (target * ranks))
        self.watch(sum(have), rounds)
        return batch_out

    def first_batch(self, inputs: list[dict[str, Any]], target: int) -> list[dict[str, Any]]:
        """The first round's prompts: TRL's batch, with `oversample` followed by the further prompts that make it
        ceil(k x target) groups (as many on every process, so the one call stays collective)."""
        if not self.oversample:
            return inputs
        extra = math.ceil(self.oversample * target - 1e-9) - target
        return inputs + self.more_prompts(extra, inputs[0].keys()) if extra > 0 else inputs

    def agree(self, have: list[int], target: int, rounds: int) -> tuple[list[bool], bool]:
        """The flat-group mask over every process's groups of the last call, and whether another round follows:
        decided from the gathered rewards on the main process and broadcast, so every process does the same."""
        import torch

        _, flat_groups = self.split_groups()
        flat = [False] * (len(self.last_rewards) // self.group)
        for g in flat_groups:
            flat[g] = True
        each = len(flat) // len(have)
        now = [h + each - sum(flat[r * each:(r + 1) * each]) for r, h in enumerate(have)]
        another = min(now) < target and rounds < self.max_rounds
        if len(have) == 1:
            return flat, another
        from accelerate.utils import broadcast

        decided = broadcast(torch.tensor([*flat, another], dtype=torch.long,
                                         device=self.trainer.accelerator.device), from_process=0).tolist()
        return [bool(f) for f in decided[:-1]], bool(decided[-1])

    def step(self) -> int:
        """The optimizer step this generation batch is for (TRL generates before the step counts)."""
        return int(getattr(getattr(self.trainer, "state", None), "global_step", 0)) + 1

    def say_round(self, round_: int, have: int, target: int) -> None:
        """Round `round_` is about to start: printed when the step has run long, so a round loop is never silent
        (by the main process, with every process's groups counted)."""
        now = time.monotonic()
        if self.console is None or not self.trainer.accelerator.is_main_process or now - self.said < self.say_every_s:
            return
        self.said = now
        self.console.print(f"  dynamic sampling, step {self.step()}: round {round_} of {self.max_rounds}, {have} of "
                           f"{target} groups kept so far (a group's {self.metric} std must exceed {self.min_std:g})",
                           markup=False, soft_wrap=True)

    def watch(self, have: int, rounds: int) -> None:
        """Warn once per streak when batches keep ending with every group dropped: those steps train on
        zero-advantage filler alone and change nothing."""
        self.empty = self.empty + 1 if have == 0 else 0
        if self.empty != EMPTY_BATCHES:
            return
        from grpo_cli.training.health_guards import HealthEvents  # loads transformers, which this module does not

        out = Path(getattr(self.trainer.args, "output_dir", "."))
        message = (f"every group of the last {EMPTY_BATCHES} generation batches was dropped after {rounds} rounds "
                   f"each: the std of {self.metric!r} never exceeded sampling.dynamic.min_std {self.min_std:g}, so "
                   "those steps trained on zero-advantage filler alone and changed nothing (dynamic_sampling/"
                   "zero_std_trained 1.0). Try: lower sampling.dynamic.min_std (0 drops only groups whose completions "
                   "all scored the same), check that the reward varies (grpo check-rewards), or use prompts the "
                   "model sometimes solves (grpo calibrate).")
        HealthEvents(out, self.console).record(step=self.step(), guard="dynamic_sampling", action="warn",
                                               metric=PREFIX + "zero_std_trained", observed=1.0, settings=None,
                                               message=message, main=self.trainer.accelerator.is_main_process)

    def join(self, kept: list[tuple[dict[str, Any], list[int]]], dropped: list[tuple[dict[str, Any], list[int]]],
             target: int) -> dict[str, Any]:
        """This process's first `target` kept groups, then dropped ones with zero advantage."""
        parts, left = [], target
        for out, groups in kept:
            take = groups[:left]
            left -= len(take)
            if take:
                parts.append(select_rows(out, self.rows(take)))
        for out, groups in dropped:
            take = groups[:left]
            left -= len(take)
            if take:
                part = select_rows(out, self.rows(take))
                part["advantages"] = part["advantages"] * 0.0
                parts.append(part)
        joined = join_rows(parts, self.trainer._tokenizer.pad_token_id)
        if self.trainer.accelerator.num_processes > 1:  # TRL's count spans every process's batch
            joined["num_items_in_batch"] = self.trainer.accelerator.gather(joined["num_items_in_batch"]).sum()
        return joined

    def rows(self, groups: list[int]) -> Any:
        import torch

        return torch.tensor([g * self.group + j for g in groups for j in range(self.group)], dtype=torch.long)

    def more_prompts(self, groups: int, keys: Any) -> list[dict[str, Any]]:
        """`groups` further training rows, each repeated num_generations times, in this sampler's seeded order.

        Every process draws the same permutation and takes every n-th row of it from its own offset (the
        permutation cut to a multiple of n), so the processes' refill prompts differ and follow from the seed.
        """
        import torch

        dataset = self.trainer.train_dataset
        ranks, rank = self.trainer.accelerator.num_processes, self.trainer.accelerator.process_index
        rows: list[dict[str, Any]] = []
        for _ in range(groups):
            if not self.order:
                order = torch.randperm(len(dataset), generator=self.generator).tolist()
                self.order = order[:len(order) - len(order) % ranks][rank::ranks] if ranks > 1 else order
            row = dataset[self.order.pop()]
            picked = {k: row[k] for k in keys if k in row}
            rows += [dict(picked) for _ in range(self.group)]
        return rows

    def log(self, **values: float) -> None:
        buffer = self.trainer._metrics["train"]
        for name, value in values.items():
            buffer[PREFIX + name].append(float(value))


def attach_dynamic_sampling(trainer: Any, recipe: Recipe, console: Console | None = None) -> DynamicSampler | None:
    """Wrap the trainer when the recipe asks for `sampling.dynamic`; None (nothing touched) otherwise."""
    settings = recipe.sampling.dynamic
    if settings is None:
        return None

    metric = chosen_metric(recipe) or "reward"
    sampler = DynamicSampler(trainer, metric, settings.min_std, settings.max_rounds, recipe.training.seed, console,
                             oversample=settings.factor)
    sampler.attach()
    return sampler
