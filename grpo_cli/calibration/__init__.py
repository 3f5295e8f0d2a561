"""`grpo calibrate`: the base model's pass rate on every training prompt, and the rows worth training on.

GRPO learns only from prompts whose completions get different rewards. `calibrate(CalibrateRequest(...))` samples
k completions per training prompt (transformers or vLLM, batched, resumable), scores them with the recipe's
outcome reward, and writes `calibration.jsonl` (read by `data.pass_rate`), the filtered rows and the override.
Heavy libraries load only when sampling runs.
"""

from __future__ import annotations

from grpo_cli.calibration.run import calibrate, default_out
from grpo_cli.calibration.settings import CalibrateRequest, CalibrationSettings
from grpo_cli.calibration.summary import Calibrated

__all__ = ["CalibrateRequest", "Calibrated", "CalibrationSettings", "calibrate", "default_out"]
