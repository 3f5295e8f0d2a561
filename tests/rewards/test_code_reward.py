"""The `code` reward on real rows: a dict column reaches it as a structure, a per-row language column, a reward
that pays a trivial program flagged, and its remote backends (a URL that is no address, a sandbox that never
answers, one that cannot be reached in training)."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest

from grpo_cli.recipe.loader import load_recipe
from tests.conftest import assert_paragraph, run_cli

PISTON_ROWS = ('{"prompt": "Write add(a, b).", "tests": ["assert add(1, 2) == 3"], '
             '"solution": "```python\\ndef add(a, b):\\n    return a + b\\n```"}\n')


def _piston_recipe(tmp_path: Path, url: str, wait: float = 30.0) -> Path:
    (tmp_path / "data.jsonl").write_text(PISTON_ROWS * 2, encoding="utf-8")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text('model: {name_or_path: "bundled:tiny-arith"}\n'
                      "data: {files: data.jsonl, prompt: {column: prompt, chat: false}}\n"
                      # one scoring worker: with one per free core, each would open its own first connection
                      f"rewards: [{{name: code, parallel: 1, params: {{backend: piston, backend_url: '{url}', "
                      "timeout: 0.5, "
                      f"backend_wait: {wait}}}}}]\n"
                      "training: {num_generations: 2, per_device_train_batch_size: 2, max_steps: 1}\n"
                      "launch: {profile: cpu}\n", encoding="utf-8")
    return recipe


@pytest.mark.parametrize("url", ["not a url", "localhost:2000", "http://", "http://host:port"])
def test_a_backend_url_that_is_no_address_fails_validate(tmp_path: Path, url: str) -> None:
    assert_paragraph(run_cli("validate", _piston_recipe(tmp_path, url)), "rewards[0].params.backend_url",
                     "is not an http(s) address")


def test_a_negative_backend_wait_fails_validate(tmp_path: Path) -> None:
    assert_paragraph(run_cli("validate", _piston_recipe(tmp_path, "http://localhost:2000", wait=-1)),
                     "rewards[0].params.backend_wait", "is negative")


@pytest.mark.slow
def test_a_sandbox_that_never_answers_is_a_violation_not_a_pass(tmp_path: Path) -> None:
    """A server that takes the connection and never answers: one wait (timeout + backend_wait), then every later
    call fails at once (no second connection), and check-rewards reports the reward instead of "all rewards pass"."""
    import socket

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)  # the kernel accepts connections; nobody reads or answers
        started = time.monotonic()
        result = run_cli("check-rewards", _piston_recipe(tmp_path, f"http://127.0.0.1:{silent.getsockname()[1]}",
                                                         wait=1.0))
        elapsed = time.monotonic() - started
        silent.setblocking(False)
        connections = []
        while True:  # every connection the reward opened waits in the backlog, answered or not
            try:
                connections.append(silent.accept()[0])
            except BlockingIOError:
                break
        for conn in connections:
            conn.close()
    assert result.exit_code == 1, result
    flat = " ".join(result.output.split())
    assert "accepted a request but sent no answer within 1.5 s" in flat and "all rewards pass" not in flat
    assert "rewards[0].params.backend_url" in flat
    assert len(connections) == 1, len(connections)  # one wait, not one per test and call
    assert elapsed < 120


def test_an_unreachable_sandbox_in_training_names_the_recipe_key_and_the_url(tmp_path: Path) -> None:
    """The rewards as the trainer gets them (tiny models write no code block, so a real run never calls out)."""
    from grpo_cli.errors import GrpoError
    from grpo_cli.recipe.loader import load_recipe
    from grpo_cli.rewards.build import build_reward_funcs

    recipe = load_recipe(_piston_recipe(tmp_path, "http://127.0.0.1:9"), ["rewards=[{name: format}, {name: code, "
                         "params: {backend: piston, backend_url: 'http://127.0.0.1:9'}}]"])
    reward = build_reward_funcs(recipe)[1]
    with pytest.raises(GrpoError) as err:
        reward(prompts=["Write add."], completions=["```python\ndef add(a, b):\n    return a + b\n```"],
               tests=[["assert add(1, 2) == 3"]])
    text = err.value.render()
    assert text.startswith("rewards[1].params.backend_url: cannot reach the code sandbox at http://127.0.0.1:9"), text


CODE_ROWS = [
    {"problem": "Read two integers and print their sum.",
     "test_cases": {"inputs": ["1 2\n", "5 7\n"], "outputs": ["3\n", "12\n"]},
     "gold_standard_solution": "a, b = map(int, input().split())\nprint(a + b)\n", "language": "python"},
    {"problem": "Read an integer and print its double.",
     "test_cases": {"inputs": ["4\n", "21\n"], "outputs": ["8\n", "42\n"]},
     "gold_standard_solution": "print(2 * int(input()))\n", "language": "python"},
]


def _code_recipe(tmp_path: Path, rewards: str, extra: str = "") -> Path:
    (tmp_path / "code.jsonl").write_text("\n".join(json.dumps(r) for r in CODE_ROWS) + "\n", encoding="utf-8")
    path = tmp_path / "recipe.yaml"
    entries = "".join(f"  {line}\n" for line in textwrap.dedent(rewards).strip().splitlines())
    path.write_text("model: {name_or_path: bundled:tiny-arith}\n"
                    "data:\n  files: code.jsonl\n  prompt: {column: problem}\n"
                    "  answer: {column: test_cases, extract: none, into: tests}\n  shuffle: false\n"
                    f"rewards:\n{entries}"
                    "training: {num_generations: 2, per_device_train_batch_size: 2, max_completion_length: 256}\n"
                    f"launch: {{profile: cpu}}\n{extra}", encoding="utf-8")
    return path


BROKEN_CODE_REWARD = '''
from grpo_cli.rewards.builtins.code import code


def tests_as_text(completions, tests, **kwargs):
    """The old mistake, on purpose: the test cases become a script that checks nothing."""
    return code(completions, tests=[f"_cases = {t!r}" for t in tests], parallel=1)
'''


def test_a_dict_column_reaches_the_code_reward_as_a_structure(tmp_path: Path) -> None:
    """The repr of {"inputs": [...]} used to run as the test script: print(42) scored 1, a right program 0."""
    from grpo_cli.data import prepare_data
    from grpo_cli.rewards.builtins.code import code

    recipe = load_recipe(_code_recipe(tmp_path, "- name: code"))
    rows = prepare_data(recipe).train
    assert rows[0]["tests"] == CODE_ROWS[0]["test_cases"]
    right = [f"```python\n{r['gold_standard_solution']}```" for r in CODE_ROWS]
    trivial = ["```python\nprint(42)\n```"] * 2
    tests = rows["tests"]
    assert code(right, tests=tests, parallel=1) == [1.0, 1.0]
    assert code(trivial, tests=tests, parallel=1) == [0.0, 0.5]  # 42 is the right output of one test of row 2
    # The same structure written out with str() (a CSV cell, say) is data too, never a script.
    assert code(trivial, tests=[str(t) for t in tests], parallel=1) == [0.0, 0.5]


def test_check_rewards_flags_a_reward_that_pays_a_trivial_program_over_the_reference(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text(BROKEN_CODE_REWARD, encoding="utf-8")
    path = _code_recipe(tmp_path, "- {function: broken.py:tests_as_text}\n- name: code")
    result = run_cli("check-rewards", path, "--samples", "2", "--json")
    assert result.exit_code == 1, result.output
    report = json.loads(result.output[result.output.index("{"):])
    flagged = {(v["reward"], v["kind"], tuple(v["probes"])) for v in report["violations"]}
    assert ("tests_as_text", "hackable", ("trivial",)) in flagged
    assert not any(v["reward"] == "code" for v in report["violations"]), report["violations"]
    assert "above the reference solution" in json.dumps(report["violations"])


def test_code_format_reads_a_per_row_language_column(tmp_path: Path) -> None:
    from grpo_cli.rewards.builtins import BUILTINS

    def answer(lang: str) -> str:
        return f"<think>\nplan\n</think>\n<answer>\n```{lang}\nx\n```\n</answer>"

    completions = [answer("python"), answer("cpp"), answer("python")]
    scores = BUILTINS["code_format"](completions, language=["python", "cpp", "cpp"])
    assert scores == [1.0, 1.0, 0.0]
    rows = [dict(CODE_ROWS[0], language="python"), dict(CODE_ROWS[1], language="cpp")]
    (tmp_path / "code.jsonl").write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    path = _code_recipe(tmp_path, "- name: code_format\n- name: code")
    (tmp_path / "code.jsonl").write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")  # per-row
    result = run_cli("check-rewards", path, "--samples", "2", "--json")
    report = json.loads(result.output[result.output.index("{"):])
    assert not [v for v in report["violations"] if v["kind"] == "exception"], report["violations"]
