"""grpo's benchmarks: scripts that print a table, run as `python benchmarks/GROUP/NAME.py` (never imported by grpo_cli).

- `gpu/`: the GPU proof kit (scripts/gpu_check.sh runs `gpu/gpu_check.py`; its parts, cases, memory probe, report).
- `vs_trl/`: grpo against a hand-written TRL script (startup, per-step overhead, time to accuracy), the plain TRL
  scripts those compare with, and the probe that clocks both sides' `Trainer.train`.
- `micro/`: one measurement each (startup, rewards, threads, sampling, memory plan, machine ceilings, step split).
- `experiments/`: one feature or backend against another (async, dynamic sampling, vLLM on CPU, sharding on CPU,
  the tool and vision demos).

`record.py` is the one writer: with `--record` a script writes its table to a new dated file in
docs/performance/history/; without it, it only prints. A package so that a script in a group imports another part
as `benchmarks.GROUP.NAME` once it has put the repository root on sys.path. tests/measuring/test_benchmarks.py
smoke-runs every script on tiny settings.
"""
