"""The probe completions of `grpo check-rewards`: they follow the recipe's answer style and the format its system
prompt declares, and say so when no format is declared."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.conftest import run_cli


def test_probes_follow_the_recipe_answer_style() -> None:
    from grpo_cli.checking.probes import ProbeStyle, make_probes, wrong_answer
    from grpo_cli.rewards.builtins.answers import accuracy

    assert wrong_answer("41") == "42" and wrong_answer("x") == "0"
    for style in (ProbeStyle(tags=True), ProbeStyle(tags=False, answer_format="gsm8k"),
                  ProbeStyle(tags=False, answer_format="boxed")):
        probes = dict(make_probes({"answer": "41"}, style, "41", budget_chars=200))
        assert probes["reference"] != probes["wrong"]
        fmt = "answer_tag" if style.tags else style.answer_format
        scores = accuracy([probes["reference"], probes["wrong"], probes["empty"]], answer=["41"] * 3,
                          answer_format=fmt)
        assert scores == [1.0, 0.0, 0.0], (style, probes)
        assert len(probes["overlong"]) > 200


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
