"""What public GRPO configs needed and recipes could not say: callbacks by reference, derived columns, a chat
template override, row filters and tracker settings, each without a shim file."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from grpo_cli.recipe.loader import load_recipe
from tests.conftest import RECIPES, assert_paragraph, run_cli

DEMO = RECIPES / "demo.yaml"
FAST = ["training.max_steps=2", "training.per_device_train_batch_size=8", "training.num_generations=4",
        "training.logging_steps=1", "eval.before_after=false"]

CALLBACKS = '''
import json
from pathlib import Path

from transformers import TrainerCallback


class StepLog(TrainerCallback):
    """Writes each finished step and the save events to a file (a stand-in for a benchmark-on-save hook)."""

    def __init__(self, path: str, tag: str = "step"):
        self.path = Path(path)
        self.tag = tag

    def on_step_end(self, args, state, control, **kwargs):
        with self.path.open("a") as f:
            f.write(json.dumps({"tag": self.tag, "step": state.global_step}) + "\\n")

    def on_save(self, args, state, control, **kwargs):
        with self.path.open("a") as f:
            f.write(json.dumps({"tag": "save", "step": state.global_step}) + "\\n")


class NotACallback:
    pass
'''


def test_a_callback_by_reference_runs_during_training(tmp_path: Path) -> None:
    (tmp_path / "cbs.py").write_text(CALLBACKS, encoding="utf-8")
    log = tmp_path / "steps.jsonl"
    entry = f"callbacks=[{{callback: {tmp_path / 'cbs.py'}:StepLog, params: {{path: {log}, tag: mine}}}}]"
    result = run_cli("train", DEMO, *FAST, entry, "training.save_strategy=steps", "training.save_steps=2",
                     "-o", tmp_path / "out")
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["step"] for e in events if e["tag"] == "mine"] == [1, 2]
    assert {"tag": "save", "step": 2} in events


def test_callback_references_are_checked_by_validate(tmp_path: Path) -> None:
    (tmp_path / "cbs.py").write_text(CALLBACKS, encoding="utf-8")
    cbs = tmp_path / "cbs.py"
    bad = run_cli("validate", DEMO, f"callbacks=[{cbs}:StepLo]")
    assert_paragraph(bad, "callbacks[0].callback", "StepLog")
    bad = run_cli("validate", DEMO, f"callbacks=[{{callback: {cbs}:StepLog, params: {{pth: x}}}}]")
    assert_paragraph(bad, "callbacks[0].params.pth")
    bad = run_cli("validate", DEMO, "callbacks=[nowhere_at_all.mod:Cb]")
    assert_paragraph(bad, "cannot be found")
    ok = run_cli("validate", DEMO, f"callbacks=[{{callback: {cbs}:StepLog, params: {{path: x}}}}]")
    assert ok.exit_code == 0, ok.output


def test_malformed_code_references_name_the_key_and_both_forms() -> None:
    """Callbacks, tools and reward functions share one reference check; the short string form works for the first
    two, and each error says what the reference should name."""
    for override, key, name in (("callbacks=[no_colon_here]", "callbacks[0]", "Class"),
                                ("tools=[no_colon_here]", "tools[0]", "name"),
                                ("rewards=[{function: no_colon_here}]", "rewards[0]", "func")):
        bad = run_cli("validate", DEMO, override)
        assert bad.exit_code == 2 and key in bad.output, bad.output
        assert f"`package.module:{name}` or `path/to/file.py:{name}`" in " ".join(bad.output.split()), bad.output


def test_a_class_that_is_not_a_callback_is_a_clear_error(tmp_path: Path) -> None:
    from grpo_cli.errors import GrpoError
    from grpo_cli.training.user_callbacks import load_callbacks

    (tmp_path / "cbs.py").write_text(CALLBACKS, encoding="utf-8")
    recipe = load_recipe(DEMO, [f"callbacks=[{tmp_path / 'cbs.py'}:NotACallback]"])
    try:
        load_callbacks(recipe)
        raise AssertionError("accepted")
    except GrpoError as exc:
        assert "not a transformers TrainerCallback" in exc.render()


# ------------------------------------------------------------------ derived columns and filters

ROWS = [
    {"q": "What is 2+2?", "info": {"test_cases": [{"input": "", "output": "4\n"}], "language": "python"},
     "difficulty": "easy", "solution": "The answer is #### 4"},
    {"q": "What is 3+3?", "info": {"test_cases": [{"input": "", "output": "6\n"}], "language": "cpp"},
     "difficulty": "hard", "solution": "no final answer here"},
    {"q": "What is 5+5?", "info": {"test_cases": [{"input": "", "output": "10\n"}], "language": "python"},
     "difficulty": "medium", "solution": "#### 10"},
]


def _data_recipe(tmp_path: Path, data_extra: str) -> Path:
    (tmp_path / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in ROWS) + "\n", encoding="utf-8")
    path = tmp_path / "recipe.yaml"
    path.write_text(textwrap.dedent("""
        model: {name_or_path: bundled:tiny-arith}
        data:
          files: rows.jsonl
          shuffle: false
          prompt: {template: "{q}="}
          answer: {column: solution, extract: gsm8k}
        %s
        rewards: [{name: accuracy}]
        training: {num_generations: 2, per_device_train_batch_size: 2, max_completion_length: 32}
        launch: {profile: cpu}
        """) % textwrap.indent(textwrap.dedent(data_extra).strip(), "  "), encoding="utf-8")
    return path


def test_columns_are_renamed_dug_out_of_dicts_and_set_constant(tmp_path: Path) -> None:
    from grpo_cli.data import prepare_data

    path = _data_recipe(tmp_path, """
        columns:
          tests: info.test_cases
          language: info.language
          first_output: info.test_cases.0.output
          source: {value: public}
          level: difficulty
        """)
    assert run_cli("validate", path).exit_code == 0
    rows = prepare_data(load_recipe(path)).train
    assert rows[0]["tests"] == ROWS[0]["info"]["test_cases"]
    assert rows["language"] == ["python", "cpp", "python"]
    assert rows["first_output"] == ["4\n", "6\n", "10\n"]
    assert rows["source"] == ["public"] * 3 and rows["level"] == ["easy", "hard", "medium"]
    bad = run_cli("validate", _data_recipe(tmp_path, "columns: {tests: nfo.test_cases}"))
    assert_paragraph(bad, "data.columns.tests", "'nfo'")


def test_row_filters_keep_rows_meeting_every_condition(tmp_path: Path) -> None:
    from grpo_cli.data import prepare_data

    path = _data_recipe(tmp_path, """
        filter:
          - {column: difficulty, one_of: [easy, hard]}
          - {answer_parses: true}
        """)
    data = prepare_data(load_recipe(path))
    assert data.train["prompt"] == ["What is 2+2?="]  # medium dropped by one_of; row 2 has no #### answer
    assert data.stats["train_dropped_by_filter"] == 2
    assert data.stats["train_filter_detail"] == {"difficulty one_of ['easy', 'hard']": 1, "answer_parses": 1}
    bad = run_cli("validate", _data_recipe(tmp_path, "filter: [{column: dificulty, equals: easy}]"))
    assert_paragraph(bad, "data.filter[0].column")
    bad = run_cli("validate", _data_recipe(tmp_path, "filter: [{column: difficulty}]"))
    assert_paragraph(bad, "exactly one test")


# ------------------------------------------------------------------ chat template and trackers

TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def test_a_recipe_chat_template_is_rendered_by_validate_and_used_by_the_tokenizer(tmp_path: Path) -> None:
    from grpo_cli.models import load_tokenizer

    (tmp_path / "t.jinja").write_text(TEMPLATE, encoding="utf-8")
    args = ["data.prompt.chat=true", "data.prompt.system_prompt=Be brief.",
            f"model.chat_template={tmp_path / 't.jinja'}"]
    result = run_cli("validate", DEMO, *args, "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)["plan"]["chat template"]
    assert "<|system|>Be brief.\\n<|user|>" in shown and shown.endswith("<|assistant|>'")
    tok = load_tokenizer(load_recipe(DEMO, args))
    text = tok.apply_chat_template([{"role": "user", "content": "1+1"}], add_generation_prompt=True, tokenize=False)
    assert text == "<|user|>1+1\n<|assistant|>"
    broken = run_cli("validate", DEMO, *args[:2], "model.chat_template='{% for m in messages %}'")
    assert_paragraph(broken, "model.chat_template")


def test_a_trained_model_is_saved_with_the_recipe_chat_template(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_cli("train", DEMO, *FAST, "data.prompt.chat=true", f"model.chat_template={json.dumps(TEMPLATE)}",
                     "-o", out)
    assert result.exit_code == 0, result.output
    saved = (out / "chat_template.jinja").read_text() if (out / "chat_template.jinja").is_file() else json.loads(
        (out / "tokenizer_config.json").read_text())["chat_template"]
    assert saved == TEMPLATE


def test_tracker_settings_reach_the_trackers(tmp_path: Path) -> None:
    from grpo_cli.training.config import grpo_config_kwargs, tracking_environment

    recipe = load_recipe(DEMO, ["output.run_name=exp-7", "output.trackio_project=grpo-demo",
                                "output.wandb={entity: lab, project: math, tags: [a, b]}",
                                f"output.tensorboard_dir={tmp_path / 'tb'}"])
    kw = grpo_config_kwargs(recipe, tmp_path, "float32", "cpu")
    assert kw["run_name"] == "exp-7" and kw["project"] == "grpo-demo"
    env = tracking_environment(recipe)
    assert env == {"WANDB_ENTITY": "lab", "WANDB_PROJECT": "math", "WANDB_TAGS": "a,b",
                   "TENSORBOARD_LOGGING_DIR": str(tmp_path / "tb")}
    bad = run_cli("validate", DEMO, "training.run_name=x")
    assert_paragraph(bad, "output.run_name")


def test_each_saved_checkpoint_is_evaluated_on_the_named_suites(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_cli("train", DEMO, *FAST, "training.save_strategy=steps", "training.save_steps=1",
                     "eval.on_save=[svamp]", "eval.max_samples=2", "eval.max_new_tokens=4", "-o", out)
    assert result.exit_code == 0, result.output
    for step in (1, 2):
        scores = json.loads((out / f"checkpoint-{step}" / "suites.json").read_text())
        assert scores["step"] == step and scores["suites"]["svamp"]["problems"] == 2
        assert 0.0 <= scores["suites"]["svamp"]["accuracy"] <= 1.0
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged if "suite/svamp/accuracy" in r] == [1, 2]


def test_an_absolute_holdout_count_holds_out_that_many_rows(tmp_path: Path) -> None:
    from grpo_cli.data import prepare_data

    data = prepare_data(load_recipe(DEMO, ["data.eval_split=null", "data.eval_holdout=7"]))
    assert len(data.eval) == 7
    too_many = run_cli("validate", DEMO, "data.eval_split=null", "data.eval_holdout=100000")
    assert_paragraph(too_many, "data.eval_holdout")
    fraction = run_cli("validate", DEMO, "data.eval_split=null", "data.eval_holdout=2.5")
    assert_paragraph(fraction, "neither a fraction")


def test_cosine_counts_characters_as_open_r1_does() -> None:
    from grpo_cli.rewards.builtins import BUILTINS

    cosine = BUILTINS["cosine"]
    completions = ["<answer>4</answer>"]  # 18 characters, but 500 tokens in completion_ids
    by_tokens = cosine(completions, answer=["4"], completion_ids=[[0] * 500], max_len=1000)
    by_chars = cosine(completions, answer=["4"], completion_ids=[[0] * 500], max_len=1000, length_unit="characters")
    assert by_tokens == [0.75] and by_chars[0] > 0.99
    bad = run_cli("validate", DEMO, "rewards=[{name: cosine, params: {length_unit: words}}]")
    assert_paragraph(bad, "length_unit")


def test_the_code_reward_runs_apps_call_based_tests() -> None:
    """TACO/APPS call-based rows: {"fn_name", "inputs": [[args]], "outputs": [[result]]}, plain or LeetCode-style."""
    from grpo_cli.rewards.builtins.code import code

    tests = {"fn_name": "add", "inputs": [[1, 2], [5, 5]], "outputs": [[3], [10]]}
    plain = "```python\ndef add(a, b):\n    return a + b\n```"
    leetcode = "```python\nclass Solution:\n    def add(self, a, b):\n        return a + b\n```"
    wrong = "```python\ndef add(a, b):\n    return a - b\n```"
    trivial = "```python\nprint(42)\n```"
    assert code([plain, leetcode, wrong, trivial], tests=[tests] * 4, parallel=1) == [1.0, 1.0, 0.0, 0.0]


def test_suites_grpo_does_not_ship_come_from_a_local_file_or_say_why(tmp_path: Path) -> None:
    rows = [{"problem": f"What is {i} + {i}?", "answer": str(2 * i), "id": f"p{i}"} for i in range(3)]
    (tmp_path / "aime24.jsonl").write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    missing = run_cli("validate", DEMO, "eval.suite=aime24")
    assert_paragraph(missing, "suite_files")
    from grpo_cli.errors import GrpoError
    from grpo_cli.evaluation.suites import get_suite

    try:
        get_suite("gpqa_diamond")
        raise AssertionError("accepted")
    except GrpoError as exc:
        assert "not shipped" in exc.render() and "lighteval" in exc.render()
    files = f"eval.suite_files={{aime24: {tmp_path / 'aime24.jsonl'}}}"
    result = run_cli("eval", DEMO, files, "--suite", "aime24", "-n", "2", "--max-new-tokens", "4",
                     "-o", tmp_path / "ev")
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "ev" / "eval-aime24.json").read_text())["summary"]
    assert summary["problems"] == 2 and summary["suite"] == "aime24"


def test_offloading_only_the_reference_model_says_what_does_the_job(tmp_path: Path) -> None:
    """TRL 1.16 has no such option (GRPOConfig has none): a recipe or an imported config asking for it is told the
    alternatives (beta 0, LoRA, ZeRO-3 with parameter offload), not just "unknown key"."""
    for key in ("training.offload_ref_model=true", "training.ref_model_offload=true"):
        result = run_cli("validate", DEMO, key)
        assert result.exit_code == 2, result.output
        flat = " ".join(result.output.split())
        assert "no option to offload only the reference model" in flat and "`training.beta: 0`" in flat
        assert "`model.lora`" in flat and "offload_param_device" in flat
    config = tmp_path / "grpo.yaml"
    config.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\ndataset_name: trl-lib/DeepMath-103K\n"
                      "reward_funcs: [accuracy_reward]\noffload_ref_model: true\n", encoding="utf-8")
    out = tmp_path / "recipe.yaml"
    imported = run_cli("import", "trl", config, "-o", out)
    assert imported.exit_code == 0, imported.output
    header = out.read_text(encoding="utf-8").split("\nmodel:", 1)[0]
    assert "offload_ref_model: TRL 1.16's GRPOConfig has no option to offload only the reference model" in header


def test_lighteval_suites_say_why_they_cannot_run_and_point_at_suite_files() -> None:
    """lighteval 0.13.0 installs from PyPI but needs the network when it loads its tasks (docs/migration.md)."""
    evaluated = run_cli("eval", DEMO, "--suite", "lighteval:gsm8k")
    assert evaluated.exit_code == 2, evaluated.output
    flat = " ".join(evaluated.output.split())
    assert "grpo does not run lighteval suites" in flat and "tinyBenchmarks.pkl" in flat
    assert "`eval.suite_files: {gsm8k: FILE}`" in flat and "Traceback" not in flat
    for key in ("eval.suite=lighteval:aime24", "eval.on_save=[lighteval:aime24]"):
        validated = run_cli("validate", DEMO, key)
        assert validated.exit_code == 2, validated.output
        assert "grpo does not run lighteval suites" in " ".join(validated.output.split())
