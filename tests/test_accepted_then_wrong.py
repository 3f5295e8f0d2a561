"""Recipes that `validate` used to accept and that then trained the wrong thing, failed late, or were judged
wrongly by `check-rewards`: each is now right, an error, or a verdict."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest

from grpo_cli.recipe.loader import load_recipe
from tests.conftest import run_cli

# Two stdin/stdout problems as code datasets carry them: the tests a dict column, the solution a program.
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


BROKEN_CODE_REWARD = '''
from grpo_cli.rewards.builtins.code import code


def tests_as_text(completions, tests, **kwargs):
    """The old mistake, on purpose: the test cases become a script that checks nothing."""
    return code(completions, tests=[f"_cases = {t!r}" for t in tests], parallel=1)
'''


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


# ------------------------------------------------------------------ training keys checked at validate time


def _validate(write_recipe, training: str, *extra: str) -> str:
    path = write_recipe(f"""
        model: {{name_or_path: bundled:tiny-arith}}
        data: {{files: bundled:tiny-arith-data/train.jsonl, prompt: {{template: "{{question}}="}}}}
        rewards: [{{name: accuracy}}]
        training: {{num_generations: 4, per_device_train_batch_size: 4, max_completion_length: 32, {training}}}
        launch: {{profile: cpu}}
        """)
    result = run_cli("validate", path, *extra)
    return f"{result.exit_code}|{' '.join(result.output.split())}"


def test_a_scheduler_kwarg_typo_is_caught_before_the_model_loads(write_recipe) -> None:
    out = _validate(write_recipe, "lr_scheduler_type: cosine_with_min_lr, lr_scheduler_kwargs: {min_lr_rat: 0.1}")
    assert out.startswith("2|"), out
    assert "lr_scheduler_kwargs.min_lr_rat" in out and "min_lr_rate" in out
    ok = _validate(write_recipe, "lr_scheduler_type: cosine_with_min_lr, lr_scheduler_kwargs: {min_lr_rate: 0.1}")
    assert ok.startswith("0|"), ok
    missing = _validate(write_recipe, "lr_scheduler_type: cosine_with_min_lr")
    assert missing.startswith("2|") and "min_lr or min_lr_rate" in missing


@pytest.mark.parametrize(("kind", "kwargs", "accepted"), [
    ("cosine_with_min_lr", {"min_lr_rat": 0.1}, False),
    ("cosine_with_min_lr", {"min_lr_rate": 0.1}, True),
    ("cosine", {"num_cycles": 1.0}, True),
    ("polynomial", {"power": 2.0, "lr_end": 1e-9}, True),
    ("linear", {"num_cycles": 1.0}, False),
    ("warmup_stable_decay", {"num_decay_steps": 2}, True),
    ("warmup_stable_decay", {"num_decay_step": 2}, False),
])
def test_the_scheduler_check_agrees_with_transformers(kind: str, kwargs: dict, accepted: bool) -> None:
    """What validate accepts, transformers' get_scheduler builds; what it rejects, transformers raises for."""
    import torch
    from transformers import get_scheduler

    from grpo_cli.recipe.schema.training import TrainingSection
    from grpo_cli.validation.training_keys import scheduler_problems

    problems = scheduler_problems(TrainingSection.model_validate(
        {"lr_scheduler_type": kind, "lr_scheduler_kwargs": kwargs})).problems
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    try:
        get_scheduler(kind, optimizer, num_warmup_steps=1, num_training_steps=10, scheduler_specific_kwargs=kwargs)
        built = True
    except (TypeError, ValueError):
        built = False
    assert built is accepted and (not problems) is accepted, problems


def test_every_scheduler_signature_read_from_source_matches_the_imported_function() -> None:
    """validate reads each scheduler's parameters from transformers' source without importing torch; the
    functions transformers really calls must have exactly those parameters."""
    import inspect

    from transformers.optimization import TYPE_TO_SCHEDULER_FUNCTION

    from grpo_cli.validation.training_keys import scheduler_signature

    for kind, func in TYPE_TO_SCHEDULER_FUNCTION.items():
        read = scheduler_signature(kind.value)
        assert read is not None, kind
        params = {n: p.default is not p.empty for n, p in inspect.signature(func).parameters.items()
                  if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
        takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in inspect.signature(func).parameters.values())
        assert read == (params, takes_kwargs), kind


def test_push_to_hub_needs_a_token_and_says_it_uploads_twice(write_recipe, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no saved login
    out = _validate(write_recipe, "push_to_hub: true, hub_model_id: me/run")
    assert out.startswith("2|") and "training.push_to_hub" in out and "token" in out, out
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    out = _validate(write_recipe, "push_to_hub: true, hub_model_id: me/run", "output.push_to_hub=me/final")
    assert out.startswith("0|"), out
    assert "me/run" in out and "me/final" in out and "again" in out


def test_do_eval_alone_is_not_silently_ignored(write_recipe) -> None:
    out = _validate(write_recipe, "do_eval: true")
    assert out.startswith("2|") and "training.do_eval" in out and "eval_strategy" in out, out
    assert _validate(write_recipe, "do_eval: false").startswith("0|")


# ------------------------------------------------------------------ the memory plan


def _plan(write_recipe, training: str, vllm: str = "'off'") -> object:
    from grpo_cli.planning.memory import memory_plan

    path = write_recipe(f"""
        model: {{name_or_path: Qwen/Qwen2.5-0.5B-Instruct}}
        data: {{files: bundled:tiny-arith-data/train.jsonl, prompt: {{template: "{{question}}="}},
                max_prompt_tokens: 256}}
        rewards: [{{name: accuracy}}]
        training: {{num_generations: 8, per_device_train_batch_size: 8, max_completion_length: 2048{training}}}
        launch: {{profile: single, vllm: {{mode: {vllm}}}}}
        """)
    plan, why = memory_plan(load_recipe(path), gpu_memory_gb=80.0, world_size=1)
    assert plan is not None, why
    return plan


def test_memory_plan_follows_activation_checkpointing_false(write_recipe) -> None:
    default = _plan(write_recipe, "")
    off = _plan(write_recipe, ", activation_checkpointing: false")
    assert "checkpointing on" in default.item("activations").note
    assert "checkpointing off" in off.item("activations").note
    assert off.item("activations").bytes > 5 * default.item("activations").bytes


def test_memory_plan_releases_vllm_while_training_in_sleep_mode(write_recipe) -> None:
    awake = _plan(write_recipe, "", "colocate")
    asleep = _plan(write_recipe, "", "colocate, enable_sleep_mode: true")
    assert asleep.item("vLLM (colocate)").phase == "generation"
    assert asleep.total_gb < awake.total_gb


# ------------------------------------------------------------------ references and tools


def test_trl_documented_reward_reference_is_accepted(write_recipe, tmp_path: Path) -> None:
    (tmp_path / "data.jsonl").write_text("\n".join(json.dumps({"question": f"{i}+{i}", "solution": str(2 * i)})
                                                   for i in range(6)), encoding="utf-8")
    path = write_recipe("""
        model: {name_or_path: bundled:tiny-arith}
        data: {files: data.jsonl, prompt: {column: question}}
        rewards: [{function: "trl.rewards:accuracy_reward"}]
        training: {num_generations: 2, per_device_train_batch_size: 2, max_completion_length: 32}
        launch: {profile: cpu}
        """)
    result = run_cli("validate", path)
    assert result.exit_code == 0, result.output


SIGALRM_TOOL = '''
import signal
import time


def timed_square(x: int) -> int:
    """Square a number under its own alarm, as TRL's agent example times its code.

    Args:
        x: the number
    """
    def expired(signum, frame):
        raise TimeoutError("own alarm")

    signal.signal(signal.SIGALRM, expired)
    signal.alarm(5)
    try:
        return x * x
    finally:
        signal.alarm(0)


def sleeper(seconds: float) -> str:
    """Sleep.

    Args:
        seconds: how long
    """
    time.sleep(seconds)
    return "done"
'''


def test_a_tool_using_sigalrm_works_under_the_default_timeout(tmp_path: Path) -> None:
    from grpo_cli.tools import ToolTimeout, load_toolset

    (tmp_path / "tools.py").write_text(SIGALRM_TOOL, encoding="utf-8")
    (tmp_path / "data.jsonl").write_text('{"question": "1"}\n', encoding="utf-8")
    (tmp_path / "recipe.yaml").write_text(textwrap.dedent("""
        model: {name_or_path: bundled:tiny-tool}
        data: {files: data.jsonl, prompt: {column: question, chat: true}}
        rewards: [{name: format}]
        tools: [tools.py:timed_square, {function: tools.py:sleeper, timeout: 0.3}]
        launch: {profile: cpu}
        """), encoding="utf-8")
    square, sleeper = load_toolset(load_recipe(tmp_path / "recipe.yaml")).tools
    assert square(x=7) == 49 and square.tool_stats.failures == 0
    started = time.perf_counter()
    with pytest.raises(ToolTimeout):
        sleeper(seconds=20)  # the timeout still interrupts a blocking call on the main thread
    assert time.perf_counter() - started < 10
    assert sleeper(seconds=0) == "done"


# ------------------------------------------------------------------ probes in the recipe's format

REASONING_PROMPT = """Respond in the following format:
<reasoning>
...
</reasoning>
<answer>
...
</answer>
"""

FORMAT_REWARDS = r'''
import re


def strict_layout(completions, **kwargs):
    pattern = r"^<reasoning>\n.*?\n</reasoning>\n<answer>\n.*?\n</answer>\n$"
    return [1.0 if re.match(pattern, c[0]["content"], re.DOTALL) else 0.0 for c in completions]


def right_number(completions, answer, **kwargs):
    found = [c[0]["content"].split("<answer>")[-1].split("</answer>")[0].strip() for c in completions]
    return [2.0 if f == a else 0.0 for f, a in zip(found, answer)]
'''


def test_probes_follow_the_format_the_system_prompt_declares(minimal_dir: Path) -> None:
    (minimal_dir / "fmt.py").write_text(FORMAT_REWARDS, encoding="utf-8")
    recipe = minimal_dir / "recipe.yaml"
    recipe.write_text(textwrap.dedent(f"""
        model: {{name_or_path: bundled:tiny-tool}}
        data:
          files: data.jsonl
          prompt: {{column: question, chat: true, system_prompt: {json.dumps(REASONING_PROMPT)}}}
          answer: {{extract: gsm8k}}
        rewards:
          - {{function: fmt.py:strict_layout}}
          - {{function: fmt.py:right_number}}
          - {{name: repetition_penalty}}
        training: {{num_generations: 4, per_device_train_batch_size: 8}}
        launch: {{profile: cpu}}
        """), encoding="utf-8")
    result = run_cli("check-rewards", recipe, "--samples", "2", "--json")
    report = json.loads(result.output[result.output.index("{"):])
    assert "<reasoning>" in report["probe_format"] and "system prompt" in report["probe_format"]
    assert not [v for v in report["violations"] if v["reward"] in ("strict_layout", "right_number")], \
        report["violations"]
    ref = next(s for s in report["samples"] if s["probe"] == "reference")
    assert ref["scores"]["strict_layout"] == 1.0 and ref["scores"]["right_number"] == 2.0


def test_probes_say_when_no_format_is_declared(minimal_dir: Path) -> None:
    (minimal_dir / "fmt.py").write_text(FORMAT_REWARDS, encoding="utf-8")
    recipe = minimal_dir / "recipe.yaml"
    recipe.write_text(textwrap.dedent("""
        model: {name_or_path: bundled:tiny-tool}
        data: {files: data.jsonl, prompt: {column: question, chat: true}, answer: {extract: gsm8k}}
        rewards: [{function: fmt.py:strict_layout}]
        training: {num_generations: 4, per_device_train_batch_size: 8}
        launch: {profile: cpu}
        """), encoding="utf-8")
    result = run_cli("check-rewards", recipe, "--samples", "2")
    assert "declares no answer format" in " ".join(result.output.split())
