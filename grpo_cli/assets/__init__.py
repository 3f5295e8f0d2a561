"""Files shipped inside the package: the tiny offline model, its data and the accelerate configs.

Recipes name them as `bundled:<relative path>` (e.g. `bundled:tiny-arith`); grpo_cli.paths resolves that.
"""
