"""A completion must not be able to forge its own test results from inside the warm sandbox.

Each test is a real cheat a reviewer ran against the `code` reward: a wrong program that tries
to reach the runner's own machinery. The score the reward gives is what a user would notice.
"""

from __future__ import annotations

from grpo_cli.rewards.builtins.code import CodeTest, code, run_test

ADD = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return 0\n"
TESTS = ["assert add(2, 3) == 5", "assert add(-1, 1) == 1"]  # the second fails even for the right add


def score(program: str) -> float | None:
    return code([f"```python\n{program}\n```"], tests=[TESTS])[0]


def test_replacing_builtin_exec_does_not_skip_the_tests() -> None:
    hack = WRONG + "import builtins\nbuiltins.exec = lambda *a, **k: None\n"
    assert [score(ADD), score(WRONG), score(hack)] == [0.5, 0.0, 0.0]


def test_walking_up_to_the_runners_nonce_cannot_forge_a_report() -> None:
    hack = WRONG + (
        "import os, sys\n"
        "f = sys._getframe()\n"
        "while f is not None and 'nonce' not in f.f_locals:\n"
        "    f = f.f_back\n"
        "n, start = f.f_locals['nonce'], f.f_locals['first']\n"
        "for i in range(start, 2):\n"
        "    os.write(3, f'{n} {i} pass 0\\n'.encode())\n"
        "os._exit(0)\n")
    via_traceback = hack.replace("f = sys._getframe()\n",
                                 "try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    f = e.__traceback__.tb_frame\n")
    assert score(hack) == 0.0 and score(via_traceback) == 0.0


def test_program_cannot_read_the_sentinel_on_the_one_program_per_test_path() -> None:
    hack = WRONG + (
        "import linecache, os, sys\n"
        "lines = linecache.cache.get('solution.py', (0, 0, []))[2]\n"
        "done = [l for l in lines if l.startswith('print(') and 'grpo-tests-passed' in l]\n"
        "if done:\n"
        "    print(eval(done[-1][6:-2]))\n"
        "    sys.stdout.flush()\n"
        "    os._exit(0)\n")
    test = CodeTest(script=TESTS[0])
    assert run_test(ADD, test, timeout=5.0, memory_mb=512) is True
    assert run_test(hack, test, timeout=5.0, memory_mb=512) is False


def test_ordinary_introspection_still_works() -> None:
    program = ADD + (
        "import dataclasses, inspect, logging, typing, collections, enum, traceback\n"
        "@dataclasses.dataclass\nclass P:\n    x: int\n"
        "T = typing.TypeVar('T')\nPt = collections.namedtuple('Pt', 'x y')\nColor = enum.Enum('Color', 'RED')\n"
        "logging.basicConfig()\nlogging.getLogger('x').warning('still logs')\n"
        "assert list(inspect.signature(add).parameters) == ['a', 'b'] and P(1).x == 1 and Pt(1, 2).y == 2\n")
    tests = ["assert add(2, 3) == 5", "def f():\n    raise KeyError(1)\nf()"]
    assert code([f"```python\n{program}\n```"], tests=[tests])[0] == 0.5


def test_a_signal_handler_is_given_no_frame_to_walk_up_from() -> None:
    hack = WRONG + (
        "import os, signal\n"
        "def handler(signum, f):\n"
        "    while f is not None and 'nonce' not in f.f_locals:\n"
        "        f = f.f_back\n"
        "    if f is not None:\n"
        "        for i in range(f.f_locals['first'], 2):\n"
        "            os.write(3, f\"{f.f_locals['nonce']} {i} pass 0\\n\".encode())\n"
        "        os._exit(0)\n"
        "signal.signal(signal.SIGALRM, handler)\n"
        "signal.setitimer(signal.ITIMER_REAL, 0.01)\n"
        "while True:\n"
        "    pass\n")
    assert code([f"```python\n{hack}\n```"], tests=[TESTS], timeout=1.0)[0] == 0.0
    timer = ADD + ("import signal\nhits = []\nsignal.signal(signal.SIGALRM, lambda s, f: hits.append((s, f)))\n"
                   "signal.setitimer(signal.ITIMER_REAL, 0.01)\nwhile not hits:\n    pass\n")
    assert code([f"```python\n{timer}\n```"], tests=[["assert hits == [(14, None)]"]])[0] == 1.0


def test_reading_the_process_memory_for_the_nonce_is_refused() -> None:
    # Live 16-hex-digit str objects (refcount, type str, length 16, CPython 3.11 layout): the request's nonce.
    hack = WRONG + (
        "import os, re, struct\n"
        "pattern = re.compile(rb'[\\x01-\\x7f]\\x00{7}' + re.escape(struct.pack('<Q', id(str)))\n"
        "                     + rb'\\x10\\x00{7}.{16}\\x00{8}([0-9a-f]{16})\\x00', re.S)\n"
        "found = set()\n"
        "mem = open('/proc/self/mem', 'rb', buffering=0)\n"
        "for line in open('/proc/self/maps'):\n"
        "    if 'rw' not in line.split()[1]:\n"
        "        continue\n"
        "    a, b = (int(x, 16) for x in line.split()[0].split('-'))\n"
        "    try:\n"
        "        mem.seek(a)\n"
        "        found.update(pattern.findall(mem.read(b - a)))\n"
        "    except (OSError, ValueError, OverflowError):\n"
        "        pass\n"
        "if len(found) == 1:\n"
        "    n = found.pop().decode()\n"
        "    for i in range(2):\n"
        "        os.write(3, f'{n} {i} pass 0\\n'.encode())\n"
        "    os._exit(0)\n")
    via_dir_fd = hack.replace("open('/proc/self/mem', 'rb', buffering=0)",
                              "os.fdopen(os.open('mem', os.O_RDONLY, dir_fd=os.open('/proc/self', os.O_RDONLY)), 'rb')")
    assert score(hack) == 0.0 and score(via_dir_fd) == 0.0
