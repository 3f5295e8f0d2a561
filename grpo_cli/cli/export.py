"""`grpo export DIR --gguf`: a merged model as one GGUF file for llama.cpp and Ollama, verified by reading it back."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from grpo_cli.cli.base import console, say_first


def export(
    model_dir: Annotated[Path, typer.Argument(help="A merged model (grpo merge --out) or a full fine-tune's output "
                                              "dir.", show_default=False)],
    gguf: Annotated[bool, typer.Option("--gguf", help="Write a GGUF file (the one format so far).")] = False,
    kind: Annotated[str, typer.Option("--type", help="f16 or q8_0.")] = "f16",
    out: Annotated[Path | None, typer.Option("--out", "-o", help="The file to write (default DIR/<name>-<type>"
                                             ".gguf).", show_default=False)] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing --out file.")] = False,
) -> None:
    """Write a Llama or Qwen2 model as GGUF (f16 or q8_0), checked: read back, its logits must match."""
    from grpo_cli.errors import GrpoError

    if not gguf:
        raise GrpoError("no format given", where="command line", fix=f"Add --gguf: grpo export {model_dir} --gguf")
    say_first(f"grpo export {model_dir} --gguf --type {kind}")
    from grpo_cli.artefacts.export_gguf import export_gguf
    from grpo_cli.cli.render import render_export

    render_export(console, export_gguf(model_dir, out, kind=kind, force=force))
