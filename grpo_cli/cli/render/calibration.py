"""Rendering of `grpo calibrate`: the pass-rate histogram, the share of prompts with no signal, what to apply."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from grpo_cli.cli.render.tables import print_table

if TYPE_CHECKING:
    from grpo_cli.calibration import Calibrated

BAR = 40  # characters of the longest bar


def render_calibration(console: Console, result: Calibrated, recipe: str) -> None:
    """The histogram (one row per number of passing completions), the no-signal share and the override."""
    st, n = result.settings, result.prompts
    table = Table(title=f"pass rate of {n} training prompts: {st.k} completions each, T={st.temperature:g}, "
                        f"reward {st.reward!r} (pass: >= {st.threshold:g})", title_justify="left")
    for name, justify in (("passes", "right"), ("pass rate", "right"), ("prompts", "right"), ("share", "right"),
                          ("", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    top = max(result.histogram, default=0) or 1
    for passes, count in enumerate(result.histogram):
        share = count / n if n else 0.0
        table.add_row(f"{passes}/{st.k}", f"{passes / st.k:.2f}", str(count), f"{share:.0%}",
                      "#" * round(BAR * count / top))
    print_table(console, table)
    console.print(f"no signal: {result.no_signal:.0%} of prompts ({result.never} never passed, {result.always} "
                  "always passed): their groups would have zero reward std", markup=False, soft_wrap=True)
    if result.zero_std_share is not None:
        console.print(f"expected zero-std share in training (groups of {result.group}): "
                      f"{result.zero_std_share:.0%}", markup=False, soft_wrap=True)
    console.print(f"kept by {result.range}: {result.kept} of {n} prompts", markup=False, soft_wrap=True)
    console.print("wrote " + ", ".join(str(p) for p in result.files), markup=False, soft_wrap=True)
    command = shlex.join(["grpo", "train", recipe, *result.override])
    console.print(f"train on them: {command}", markup=False, soft_wrap=True)
