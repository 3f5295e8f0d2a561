"""Make a resumed run see the same prompts as the run it continues, in every epoch.

TRL's RepeatSampler draws each epoch's order from one torch.Generator seeded once, so epoch k
uses the k-th permutation. transformers restores the global RNG states on resume and skips the
batches already trained, but it cannot restore that generator: a run resumed in epoch k >= 1
starts again from the first permutation and trains on other prompts than the uninterrupted run.
`set_epoch` (which the Trainer calls before every epoch) re-derives the generator's state from
the seed and the epoch, so the order no longer depends on how many epochs this process has seen.
An uninterrupted run draws exactly the permutations it drew before.
"""

from __future__ import annotations

from typing import Any


def _epoch_seeded_sampler_class() -> type:
    import torch
    from trl.trainer.utils import RepeatSampler

    class EpochSeededRepeatSampler(RepeatSampler):
        """RepeatSampler whose order for epoch k is a function of (seed, k) alone."""

        def set_epoch(self, epoch: int) -> None:
            if not self.shuffle or self.seed is None:
                return
            self.generator.manual_seed(self.seed)
            for _ in range(epoch):  # replay the draws of the earlier epochs (cheap: one randperm each)
                torch.randperm(self.num_samples, generator=self.generator)

    return EpochSeededRepeatSampler


def resumable(trainer_cls: type) -> type:
    """A subclass of TRL's GRPOTrainer whose training sampler resumes in the right place."""
    sampler_cls = _epoch_seeded_sampler_class()

    class ResumableGRPOTrainer(trainer_cls):  # type: ignore[misc, valid-type]
        def _get_train_sampler(self, dataset: Any = None) -> Any:
            sampler = super()._get_train_sampler(dataset)
            if type(sampler).__name__ != "RepeatSampler":
                return sampler  # a TRL version with another sampler: leave it alone
            return sampler_cls(data_source=sampler.data_source, mini_repeat_count=sampler.mini_repeat_count,
                               batch_size=sampler.batch_size, repeat_count=sampler.repeat_count,
                               shuffle=sampler.shuffle, seed=sampler.seed)

    ResumableGRPOTrainer.__name__ = trainer_cls.__name__
    ResumableGRPOTrainer.__qualname__ = trainer_cls.__qualname__
    return ResumableGRPOTrainer
