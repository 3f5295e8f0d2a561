"""Rows of TRL's scored generation batch (`_generate_and_score_completions`' output): select, zero and join them.

The output is a dict of tensors whose first dimension is the completion (a prompt's group is `num_generations`
consecutive rows). Rows from different generation rounds are padded to different widths, so joining pads each
key as TRL does: prompts on the left, completions and per-token values on the right. A key grpo does not know is
an error, not a silent drop: a TRL that adds one must be looked at (the pinning test reads the same table).
"""

from __future__ import annotations

from typing import Any

from grpo_cli.errors import GrpoError

# key -> (side, pad value; None: the tokenizer's pad id). `num_items_in_batch` is recomputed, not joined.
PADDING: dict[str, tuple[str, float | None]] = {
    "prompt_ids": ("left", None),
    "prompt_mask": ("left", 0),
    "completion_ids": ("right", None),
    "completion_mask": ("right", 0),
    "advantages": ("none", 0),
    "old_per_token_logps": ("right", 0.0),
    "sampling_per_token_logps": ("right", 0.0),
    "ref_per_token_logps": ("right", 0.0),
    "importance_sampling_ratio": ("right", 1.0),
    "tool_mask": ("right", 1),
}
RECOMPUTED = ("num_items_in_batch",)


def select_rows(batch: dict[str, Any], rows: Any) -> dict[str, Any]:
    """The batch restricted to `rows` (a LongTensor of row indices); scalars and unknown keys fail loudly."""
    out: dict[str, Any] = {}
    for key, value in batch.items():
        if key in RECOMPUTED:
            continue
        if key not in PADDING:
            raise GrpoError(f"TRL's scored batch has the key {key!r}, which grpo's dynamic sampling does not know "
                            "how to keep", where="sampling.dynamic",
                            fix="Remove `sampling.dynamic` for this recipe, or pin the TRL version grpo was tested "
                                "with (1.16).")
        out[key] = value.index_select(0, rows.to(value.device))
    return out


def join_rows(parts: list[dict[str, Any]], pad_id: int) -> dict[str, Any]:
    """One batch from several `select_rows` results, each key padded to the widest part."""
    import torch

    keys = [k for k in parts[0] if all(k in p for p in parts)]
    out: dict[str, Any] = {}
    for key in keys:
        side, value = PADDING[key]
        tensors = [p[key] for p in parts]
        if side != "none" and tensors[0].dim() == 2:
            width = max(t.size(1) for t in tensors)
            fill = pad_id if value is None else value
            padded = []
            for t in tensors:
                extra = width - t.size(1)
                if extra:
                    block = torch.full((t.size(0), extra), fill, dtype=t.dtype, device=t.device)
                    t = torch.cat([block, t] if side == "left" else [t, block], dim=1)
                padded.append(t)
            tensors = padded
        out[key] = torch.cat(tensors, dim=0)
    mask = out["completion_mask"] if "tool_mask" not in out else out["completion_mask"] * out["tool_mask"]
    out["num_items_in_batch"] = mask.sum()
    return out
