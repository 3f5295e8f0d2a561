"""The warm sandbox behind the `code` reward: one process per completion, tests in sequence inside it.

Hostile completions are run through the real reward and the real fork server; what a user would
notice is asserted: the score, the reason recorded per completion, the host left alone, and a
server that keeps serving.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from grpo_cli.recipe.schema.rewards import RewardEntry
from grpo_cli.rewards import load_reward
from grpo_cli.rewards.builtins.code import code
from grpo_cli.rewards.parallel import ParallelReward
from grpo_cli.rewards.sandbox import run_tests
from grpo_cli.rewards.sandbox_client import SERVER_SCRIPT, shared_pool

ADD = "def add(a, b):\n    return a + b\n"
TESTS = ["assert add(2, 3) == 5", "assert add(-1, 1) == 0"]


def completion(program: str) -> str:
    return f"Here it is.\n```python\n{program}\n```"


def score(program: str, tests: list[str], **kwargs: Any) -> tuple[float | None, str]:
    """The reward and the `code_result` note it logs for one completion."""
    logged: dict[str, list[str]] = {}
    out = code([completion(program)], tests=[tests], log_extra=lambda k, v: logged.setdefault(k, v), **kwargs)
    return out[0], logged["code_result"][0]


def _children_of(pid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                kids.append(int(entry))
    return kids


def test_all_tests_of_a_completion_run_in_one_process_with_fresh_state() -> None:
    program = ADD + "calls = []\n"
    tests = ["calls.append(1)\nassert len(calls) == 1", "calls.append(2)\nassert calls == [2]", "assert add(1, 1) == 2"]
    result = run_tests(program, [{"script": t} for t in tests])
    assert [o.passed for o in result.outcomes] == [True, True, True] and result.processes == 1
    assert score(ADD, TESTS) == (1.0, "2/2 tests passed")


def test_a_crash_or_exit_in_one_test_still_scores_the_others() -> None:
    crash = "import os\nos.abort()"  # raise(SIGABRT) is refused, so glibc's abort ends in a real SIGSEGV
    tests = ["import os\nos._exit(0)", "assert add(1, 2) == 3", crash, "assert add(2, 2) == 4",
             "while True:\n    pass", "assert add(0, 0) == 0"]
    result = run_tests(ADD, [{"script": t} for t in tests], timeout=2.0)
    assert [o.passed for o in result.outcomes] == [False, True, False, True, False, True]
    reasons = [o.reason for o in result.outcomes]
    assert "exited with status 0" in (reasons[0] or "") and "killed by SIG" in (reasons[2] or "")
    assert reasons[4] == "timeout" and result.processes == 4  # a fresh process after each of the three
    assert score(ADD, tests, timeout=2.0)[0] == 0.5


def test_completion_that_kills_its_own_process_group() -> None:
    killer = ("import os, signal, posix, threading\n"
              "for kill in (lambda: os.killpg(0, signal.SIGKILL), lambda: posix.kill(0, signal.SIGKILL),\n"
              "             lambda: os.kill(-1, 0),\n"
              "             lambda: signal.pthread_kill(threading.main_thread().ident, signal.SIGKILL)):\n"
              "    try:\n        kill()\n    except OSError:\n        pass\n")
    assert score(ADD + killer, TESTS) == (1.0, "2/2 tests passed")  # every kill refused, the tests still run
    value, note = score(ADD, ["import os, signal\nos.killpg(0, signal.SIGKILL)", TESTS[0]])
    assert value == 0.5 and "PermissionError" in note
    assert score(ADD, TESTS)[0] == 1.0  # the server is fine


def test_completion_that_forks() -> None:
    forker = "import os, time\npid = os.fork()\nif pid == 0:\n    os.setsid()\n    time.sleep(60)\n"
    value, note = score(ADD + forker, TESTS)
    assert value == 0.0 and "PermissionError" in note
    bypass = "import posix\nposix.fork()"
    assert score(ADD, [bypass, TESTS[0]])[0] == 0.5
    servers = {s.pid for s in shared_pool().servers if s.pid is not None}
    # A fork that escaped would run our servers' command line (their own /dev/shm paths in it); another test
    # session's servers on the machine run the script with other paths and are not ours.
    ours = {Path(f"/proc/{pid}/cmdline").read_bytes() for pid in servers}
    assert all(SERVER_SCRIPT.encode() in line for line in ours)
    forks_of_server = set()
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(f"/proc/{entry}/cmdline").read_bytes() in ours:
                forks_of_server.add(int(entry))
        except OSError:
            continue
    assert servers and forks_of_server == servers


def test_completion_that_changes_directory_and_deletes_files(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("precious")
    vandal = (f"import os, shutil, glob\n"
              f"for step in (lambda: os.chdir({str(victim)!r}), lambda: os.chdir('..'),\n"
              f"             lambda: os.remove({str(victim / 'keep.txt')!r}), lambda: shutil.rmtree({str(victim)!r}),\n"
              f"             lambda: [os.unlink(p) for p in glob.glob({str(victim)!r} + '/*')],\n"
              f"             lambda: os.rmdir(os.getcwd())):\n"
              f"    try:\n        step()\n    except OSError:\n        pass\n")
    assert score(ADD + vandal, TESTS)[0] == 1.0
    strict = f"import os\nos.chdir({str(victim)!r})\nos.remove('keep.txt')"
    value, note = score(ADD, [strict, TESTS[0]])
    assert value == 0.5 and "PermissionError" in note
    assert (victim / "keep.txt").read_text() == "precious"


def test_completion_that_blocks_on_stdin() -> None:
    reader = "data = input()\n"
    value, note = score(ADD + reader, TESTS, timeout=30.0)
    assert value == 0.0 and "EOFError" in note  # stdin is empty: it ends at once, no 30 s wait
    raw = "import os, sys\nassert os.read(0, 1) == b'' and sys.stdin.read() == ''\n"
    assert score(ADD + raw, TESTS, timeout=30.0)[0] == 1.0
    stdio = completion("a = input()\nb = input()\nprint(a + b)")
    cases = [{"input": "x\ny\n", "output": "xy"}, {"input": "only one line\n", "output": "?"}]
    assert code([stdio], tests=[cases], timeout=30.0) == [0.5]


def test_reports_forged_or_flooded_by_the_program_fail_only_that_test() -> None:
    forge = "import os\nos.write(3, b'0' * 10**6)"
    result = run_tests(ADD, [{"script": forge}, {"script": "os.write(3, b'abc 1 pass 0\\n')"},
                             {"script": TESTS[0]}])
    assert [o.passed for o in result.outcomes] == [False, False, True]
    assert "tampered" in (result.outcomes[0].reason or "")


def test_warm_server_survives_a_crash_that_takes_it_down() -> None:
    """The server dies while a completion runs (killed from outside here, as a crash would): that
    completion scores 0 with the reason, and the next one runs on a restarted server."""
    pool = shared_pool()
    assert score(ADD, TESTS)[0] == 1.0
    servers = [s.pid for s in pool.servers]
    slow = ADD + "import time\ntime.sleep(20)\n"

    def kill_server_once_busy() -> None:
        for _ in range(400):
            for pid in [p for p in servers if p is not None]:
                if _children_of(pid):
                    os.kill(pid, 9)
                    return
            time.sleep(0.01)

    killer = threading.Thread(target=kill_server_once_busy)
    killer.start()
    value, note = score(slow, TESTS, parallel=1)
    killer.join()
    assert value == 0.0 and "sandbox server died (SIGKILL)" in note and "restarted" in note
    assert score(ADD, TESTS, parallel=1) == (1.0, "2/2 tests passed")
    assert sum(s.restarts for s in pool.servers) >= 1


def test_pool_is_parallel_by_default_bounded_and_reused() -> None:
    comps = [completion(ADD)] * 6
    assert code(comps, tests=[TESTS] * 6, parallel=2) == [1.0] * 6
    pool = shared_pool()
    pids = {s.pid for s in pool.servers if s.pid is not None}
    assert code(comps, tests=[TESTS] * 6, parallel=2) == [1.0] * 6  # a second "step"
    assert {s.pid for s in pool.servers if s.pid is not None} >= pids  # the same servers served it
    entry = RewardEntry(name="code", parallel=3)
    reward = load_reward(entry, Path("."))
    assert not isinstance(reward, ParallelReward) and reward.params["parallel"] == 3


def test_external_backend_that_cannot_be_reached_stops_with_a_clear_error() -> None:
    import pytest

    from grpo_cli.errors import GrpoError

    for backend in ("piston", "sandbox-fusion"):
        with pytest.raises(GrpoError, match="cannot reach the code sandbox at http://127.0.0.1:9"):
            code([completion(ADD)], tests=[TESTS], backend=backend, backend_url="http://127.0.0.1:9")
    with pytest.raises(ValueError, match="unknown code backend 'modal'"):
        code([completion(ADD)], tests=[TESTS], backend="modal")


def test_a_call_cut_off_by_the_reward_timeout_leaves_nothing_for_the_next() -> None:
    """The per-call `timeout` interrupts the reward mid-request: the late answer must not score the next call."""
    import pytest

    from grpo_cli.errors import RewardTimeoutError
    from grpo_cli.rewards.calling import run_with_timeout

    slow = ADD + "import time\ntime.sleep(2)\n"
    with pytest.raises(RewardTimeoutError):
        run_with_timeout(lambda: code([completion(slow)], tests=[TESTS], parallel=1), 0.5, "code")
    assert score(ADD, ["assert add(1, 1) == 3"], parallel=1)[0] == 0.0
    assert score(ADD, TESTS, parallel=1)[0] == 1.0
