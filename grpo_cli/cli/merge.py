"""`grpo merge`: fold a LoRA adapter into its base and save a verified standalone model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from grpo_cli.cli.base import console, say_first


def merge(
    adapter_dir: Annotated[str, typer.Argument(help="LoRA adapter dir, grpo output dir or checkpoint holding one.",
                                               show_default=False)],
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory for the standalone model.",
                                      show_default=False)],
    base: Annotated[str | None, typer.Option("--base", help="Base model (default: from adapter_config.json).",
                                             show_default=False)] = None,
    dtype: Annotated[str, typer.Option("--dtype", help="auto (the base's saved dtype), float32, bfloat16 or "
                                       "float16.")] = "auto",
    force: Annotated[bool, typer.Option("--force", help="Replace a non-empty --out.")] = False,
    max_shard_size: Annotated[str, typer.Option("--max-shard-size", help="Split safetensors files above this "
                                                "size.")] = "5GB",
) -> None:
    """Fold a LoRA adapter into its base and save a standalone model (checked: logits must match)."""
    say_first(f"grpo merge {adapter_dir} --out {out}")
    from grpo_cli.artefacts.merge import merge_adapter
    from grpo_cli.cli.render import render_merge

    result = merge_adapter(adapter_dir, out, base=base, dtype=dtype, force=force, max_shard_size=max_shard_size,
                           console=console)
    render_merge(console, result)
