"""`python -m grpo_cli.launching.accelerate_launch ARGS`: accelerate's `launch`, quiet when interrupted.

`grpo train` forwards Ctrl-C (or SIGTERM) to the launcher's process group. torch elastic's agent inside
`accelerate launch` turns the signal into a SignalException, stops the workers (each saves a checkpoint and
says so) and re-raises it, so Python printed a 25-line traceback for an ordinary interruption, two on a double
Ctrl-C. This entry point takes the same arguments as `accelerate launch` and exits with 128 + the signal
number instead. Likewise when a worker stopped on bad input (exit code 2, its paragraph already printed):
exit 2 without the agent's ChildFailedError traceback. Every other error is left as accelerate reports it.
"""

from __future__ import annotations

import signal
import sys

from grpo_cli.errors import GrpoError

BAD_INPUT = GrpoError.exit_code


def main() -> int:
    from accelerate.commands.launch import main as accelerate_main
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    try:
        accelerate_main()
    except SignalException as exc:
        for sig in (signal.SIGINT, signal.SIGTERM):  # a later Ctrl-C must not raise again while we exit
            signal.signal(sig, signal.SIG_IGN)
        return 128 + int(exc.sigval)
    except ChildFailedError as exc:
        if BAD_INPUT in {failure.exitcode for failure in exc.failures.values()}:
            return BAD_INPUT  # a worker said what is wrong; the others were stopped because of it
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
