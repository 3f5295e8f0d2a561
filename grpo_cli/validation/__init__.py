"""What `grpo validate` checks before any model loads, and the plan it prints.

- checks.py: `preflight(recipe)` -> `Preflight` (outcome.py: problems, warnings, plan lines, and the run plan
  `pf.run` they are read from): `CHECKS`, the one ordered list of checks, each `check(recipe, pf) -> Findings` in
  the module of its concern (model_checks, data_checks, training_checks, eval_checks, trl_rules, training_keys,
  callbacks, template_override, vision, sampling, ...).
- plan_checks.py: the plan's lines of the launch decisions (processes, threads, memory, generation), read from
  the run plan that `grpo_cli.planning` decided once.
- trl_rules.py: TRL 1.16's raise sites that the recipe decides, one declarative rule each.
- environment.py: TRL's version windows and the optional packages a recipe needs (read from metadata).
- doctor.py: `grpo doctor`: installed packages, torch build and GPUs against those windows.
The decisions themselves (batching, topology, threads, memory, generation choice, vLLM support) are in
`grpo_cli.planning`. Nothing here imports torch except when a GPU count is really needed (and `grpo doctor`'s
device probe).
"""

from __future__ import annotations

from grpo_cli.validation.checks import preflight
from grpo_cli.validation.outcome import Preflight

__all__ = ["Preflight", "preflight"]
