"""Run a training command in this process and record what its `Trainer.train` call cost (benchmarks only).

    python benchmarks/vs_trl/train_probe.py OUT.json -m grpo_cli train recipes/demo.yaml ...
    python benchmarks/vs_trl/train_probe.py OUT.json benchmarks/vs_trl/trl_plain_demo.py --max-steps 150 ...

Both runners of the wrapper-overhead benchmark go through this same probe, so whatever it costs, it costs
both alike. It writes {"wall": s, "cpu": s, "steps": n, "user": s, "sys": s, "faults": n} for the train() call: wall
seconds, CPU seconds of the whole process (every thread: a helper thread the wrapper starts is counted too),
optimizer steps, and the CPU split into user and kernel time with the minor page faults behind the latter; and
"clock": [[step, wall s, CPU s], ...] at the end of every optimizer step, so a checkpoint's step gives the time it
took to reach it (benchmarks/vs_trl/time_to_accuracy.py); and "started" (epoch seconds) and "cpu_before" (the process's
CPU seconds) when train() began, so a caller that noted when it launched the process can add what came before the
first step: imports, model load, vLLM's engine start.
CPU seconds per step are the steadier figure on a shared machine: waiting for a core does not count.
"""

from __future__ import annotations

import json
import resource
import runpy
import sys
import time
from pathlib import Path
from typing import Any


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if sys.argv[1:2] in (["-h"], ["--help"]) else 2)
    out, target = Path(sys.argv[1]), sys.argv[2:]
    import transformers

    original = transformers.Trainer.train

    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        wall, cpu, usage = time.perf_counter(), time.process_time(), resource.getrusage(resource.RUSAGE_SELF)
        started = time.time()
        clock: list[list[float]] = []

        class Clock(transformers.TrainerCallback):
            def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                clock.append([state.global_step, time.perf_counter() - wall, time.process_time() - cpu])

        self.add_callback(Clock())
        try:
            return original(self, *args, **kwargs)
        finally:
            after = resource.getrusage(resource.RUSAGE_SELF)
            record = {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu,
                      "steps": int(self.state.global_step), "user": after.ru_utime - usage.ru_utime,
                      "sys": after.ru_stime - usage.ru_stime, "faults": after.ru_minflt - usage.ru_minflt,
                      "clock": clock, "started": started, "cpu_before": cpu}
            out.write_text(json.dumps(record), encoding="utf-8")

    transformers.Trainer.train = timed
    if target[0] == "-m":
        sys.argv = [target[1], *target[2:]]
        runpy.run_module(target[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = target
        runpy.run_path(target[0], run_name="__main__")


if __name__ == "__main__":
    main()
