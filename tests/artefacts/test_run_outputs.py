"""What a demo run leaves to read: the task metric and best/, completions.jsonl and `grpo samples`, the model
card and `grpo push`, and `grpo eval --suite` on the bundled model and on the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import RECIPES, assert_paragraph, not_regular_files, run_cli

pytestmark = pytest.mark.slow

DEMO = RECIPES / "demo.yaml"
# Six quick full fine-tuning steps; the task metric (pass@1 of the accuracy reward on 16 held-out sums,
# 4 samples each) every 2 steps.
TRAIN = ["training.max_steps=6", "training.per_device_train_batch_size=16", "training.num_generations=4",
         "training.logging_steps=2", "eval.before_after=false",
         "eval.every_steps=2", "eval.max_samples=16", "eval.num_generations=4", "output.report_to=tensorboard",
         "output.completions_per_log=5"]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from grpo_cli import load_recipe, train

    out = tmp_path_factory.mktemp("outputs") / "run"
    result = train(load_recipe(DEMO, TRAIN), output_dir=out)
    assert result.status == "completed" and result.global_step == 6
    return out


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_best_checkpoint_holds_the_best_logged_task_metric(run: Path) -> None:
    key = "task/eval/accuracy"
    logged = [(r["step"], r[key]) for r in _records(run / "metrics.jsonl") if key in r]
    assert [s for s, _ in logged] == [0, 2, 4, 6]  # a baseline, then every 2 steps
    trained = [(s, v) for s, v in logged if s > 0]
    best_step, best_value = max(trained, key=lambda sv: (sv[1], -sv[0]))  # the first of equal values
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["best"] == {"step": best_step, "metric": key, "value": best_value, "path": "best"}
    assert (run / "best" / "model.safetensors").is_file() and (run / "best" / "tokenizer.json").is_file()

    # the trackers got the same values (TensorBoard prefixes training logs with train/)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(next(run.glob("runs/**/events.out.tfevents*"))))
    events.Reload()
    scalars = events.Scalars(f"train/{key}")
    assert [e.step for e in scalars] == [s for s, _ in logged]
    assert [e.value for e in scalars] == pytest.approx([v for _, v in logged])

    # best/ is the model of that step: scoring it again with the same seed gives the logged value
    from grpo_cli import load_recipe
    from grpo_cli.evaluation import EvalTask, evaluate_loaded
    from grpo_cli.evaluation.held_out import load_eval_rows
    from grpo_cli.models import load_source_model, load_tokenizer_for, resolve_model_source

    recipe = load_recipe(DEMO, TRAIN)
    source = resolve_model_source(str(run / "best"))
    tokenizer = load_tokenizer_for(source)
    model = load_source_model(source, dtype="float32")
    again = evaluate_loaded(EvalTask.for_recipe(recipe), model, tokenizer, load_eval_rows(recipe, tokenizer))
    assert again.pass_at(1) == pytest.approx(best_value, abs=1e-9)


def test_report_draws_the_task_metric_and_shows_samples(run: Path) -> None:
    result = run_cli("report", run)
    assert result.exit_code == 0, result.output
    md = (run / "report.md").read_text()
    assert "## Task metric" in md and "Best: task/eval/accuracy" in md
    assert "## Sample completions (step 6" in md


def test_completions_jsonl_and_grpo_samples(run: Path) -> None:
    rows = _records(run / "completions.jsonl")
    assert sorted({r["step"] for r in rows}) == [2, 4, 6]
    assert all(len([r for r in rows if r["step"] == s]) == 5 for s in (2, 4, 6))
    for r in rows:
        assert r["prompt"].endswith("=") and set(r["rewards"]) == {"accuracy"}
        assert r["reward"] == r["rewards"]["accuracy"] and isinstance(r["advantage"], float)

    result = run_cli("samples", run)
    assert result.exit_code == 0, result.output
    shown_prompts = [r["prompt"] for r in rows if r["step"] == 6]
    assert "step 6" in result.output and all(p in result.output for p in shown_prompts)
    assert "accuracy" in result.output and "adv." in result.output

    result = run_cli("samples", run, "--worst", "--reward", "accuracy", "-n", "3")
    assert result.exit_code == 0 and "worst by accuracy" in result.output and "3 shown" in result.output
    from grpo_cli.artefacts.samples import read_samples

    worst, _ = read_samples(run, order="worst", reward="accuracy", limit=100)
    best, _ = read_samples(run, order="best", limit=100)
    assert worst[0]["rewards"]["accuracy"] == min(r["rewards"]["accuracy"] for r in rows)
    assert best[0]["reward"] == max(r["reward"] for r in rows)

    bad = run_cli("samples", run, "--step", "3")
    assert bad.exit_code == 2 and "Steps with samples: 2, 4, 6" in bad.output and "Traceback" not in bad.output
    bad = run_cli("samples", run, "--reward", "format")
    assert bad.exit_code == 2 and "Rewards logged: accuracy" in bad.output


def test_suite_eval_of_the_run_then_card_and_push_staging(run: Path, tmp_path: Path) -> None:
    result = run_cli("eval", "--suite", "svamp", run, "--limit", "6", "--max-new-tokens", "4")
    assert result.exit_code == 0, result.output
    assert "svamp: 6 problems, greedy pass@1" in result.output and "95% CI" in result.output
    summary = json.loads((run / "eval-svamp.json").read_text())["summary"]
    assert summary["problems"] == 6 and summary["suite"] == "svamp"
    assert summary["ci95"][0] <= summary["accuracy"] <= summary["ci95"][1]

    from huggingface_hub import ModelCard

    result = run_cli("push", run, "someone/tiny-arith-grpo", "--dry-run")
    assert result.exit_code == 0, result.output
    files = result.output.split("would upload", 1)[1]
    for name in ("model.safetensors", "config.json", "tokenizer.json", "README.md", "report.png", "eval-svamp.json"):
        assert name in files, name
    for name in ("completions.jsonl", "best", "metrics.jsonl", "eval-svamp-completions.jsonl"):
        assert f" {name}," not in files and not files.rstrip().endswith(name), name
    card = ModelCard.load(run / "README.md")
    assert {"grpo", "trl"} <= set(card.data.tags) and card.data.library_name == "transformers"
    assert card.data.pipeline_tag == "text-generation"
    # --limit 6 is a smoke test: said so on the card and in the dry run, never a Hub result
    assert summary["suite_size"] == 1000 and summary["limit"] == 6
    assert not card.data.eval_results
    assert "| svamp | " in card.text and "6 of 1000 (smoke test)" in card.text and "greedy, k=1" in card.text
    assert "eval-svamp.json covers 6 of 1000 svamp problems" in " ".join(result.output.split())
    full = {**summary, "problems": summary["suite_size"]}  # what a run without --limit records
    (run / "eval-svamp.json").write_text(json.dumps({"summary": full}))
    assert run_cli("push", run, "someone/tiny-arith-grpo", "--dry-run").exit_code == 0
    card = ModelCard.load(run / "README.md")
    assert card.data.eval_results[0].dataset_name == "SVAMP"
    assert card.data.eval_results[0].metric_value == round(summary["accuracy"], 4)
    manifest = json.loads((run / "manifest.json").read_text())
    assert "| accuracy | 1.0 |" in card.text  # the reward and its weight
    assert f"best {manifest['best']['value']:.4f} at step {manifest['best']['step']}" in card.text
    assert "![training curves](report.png)" in card.text and "max_steps: 6" in card.text

    # The real upload path, stopped by offline mode: one clear paragraph, exit 2
    offline = run_cli("push", run, "someone/tiny-arith-grpo")
    assert offline.exit_code == 2 and "upload to someone/tiny-arith-grpo failed" in offline.output


def test_a_lora_run_publishes_no_local_path(tmp_path: Path) -> None:
    from grpo_cli import load_recipe, train
    from grpo_cli.artefacts.hub import stage_run

    out = tmp_path / "lora"
    result = train(load_recipe(DEMO, ["training.max_steps=2", "training.per_device_train_batch_size=16",
                                      "training.num_generations=4", "training.logging_steps=1",
                                      "eval.max_samples=8", "model.lora.r=4", "model.lora.alpha=8"]), output_dir=out)
    assert result.status == "completed"
    on_disk = json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert Path(on_disk).is_absolute()  # PEFT records where the base model sat; it stays for local use
    card = (out / "README.md").read_text()
    assert on_disk not in card and "a LoRA adapter for `bundled:tiny-arith`" in card
    assert "| prompts | 8 | 8 |" in card and "8 prompts from the `test` split" in card  # counts as integers

    staged = stage_run(out, "someone/tiny-lora")
    sent = json.loads(staged.replaced["adapter_config.json"])
    assert sent["base_model_name_or_path"] == "bundled:tiny-arith"
    assert all(str(tmp_path) not in content.decode() for content in staged.replaced.values())
    assert "manifest.json" in staged.replaced  # it held output_dir
    dry = run_cli("push", out, "someone/tiny-lora", "--dry-run")
    assert dry.exit_code == 0, dry.output
    text = " ".join(dry.output.split())
    assert "adapter_config.json names the base model by its path on this machine" in text
    assert "--base-model ORG/NAME" in text
    named = run_cli("push", out, "someone/tiny-lora", "--dry-run", "--base-model", "someone/tiny-arith")
    assert "it is sent as 'someone/tiny-arith'" in " ".join(named.output.split())
    assert "a LoRA adapter for `someone/tiny-arith`" in (out / "README.md").read_text()


def test_suite_eval_of_the_bundled_model_with_compare(tmp_path: Path) -> None:
    out = tmp_path / "eval"
    result = run_cli("eval", "--suite", "gsm8k", "--limit", "50", "--model", "bundled:tiny-arith",
                     "--compare", "bundled:tiny-arith", "--max-new-tokens", "8", "--out", out)
    assert result.exit_code == 0, result.output
    assert "gsm8k: 50 problems, greedy pass@1" in result.output and "+0.0pp" in result.output
    # GSM8K prompts do not fit the tiny model's 128 positions: the score is flagged as meaningless
    assert "exceeds the model's context of 128 positions" in " ".join(result.output.split())
    first, second = (json.loads(p.read_text())["summary"] for p in sorted(out.glob("*/eval-gsm8k.json")))
    assert first["problems"] == 50 and first["accuracy"] == second["accuracy"]  # greedy: the same answers
    assert len((next(out.glob("*/eval-gsm8k-completions.jsonl"))).read_text().splitlines()) == 50


def test_a_suite_named_in_the_recipe(tmp_path: Path) -> None:
    result = run_cli("eval", DEMO, "eval.suite=svamp", "--limit", "3", "--max-new-tokens", "4", "--out", tmp_path)
    assert result.exit_code == 0, result.output
    # the demo recipe's eval section samples 8 completions at T=1: the suite follows it and reports pass@8
    assert "svamp: 3 problems, 8 samples at T=1.0" in result.output and "pass@8" in result.output
    summary = json.loads((tmp_path / "eval-svamp.json").read_text())["summary"]
    assert summary["problems"] == 3 and summary["k"] == 8 and summary["pass@8"] >= summary["accuracy"]


def test_suite_errors_are_one_paragraph() -> None:
    bad = run_cli("eval", "--suite", "gsm9k", "--model", "bundled:tiny-arith")
    assert bad.exit_code == 2 and "use one of gsm8k, math500, svamp" in bad.output.lower()
    bad = run_cli("eval", "--suite", "gsm8k")
    assert bad.exit_code == 2 and "--model" in bad.output


def test_early_stop_on_a_suite_that_does_not_improve(tmp_path: Path) -> None:
    """The tiny model never solves GSM8K: accuracy stays 0, so patience 1 stops at the second evaluation.
    A failed output.push_to_hub upload leaves the completed run and its card as they are."""
    from grpo_cli import load_recipe, train

    overrides = [*TRAIN[:4], "training.max_steps=8", "eval.every_steps=2", "eval.suite=gsm8k", "eval.max_samples=2",
                 "eval.max_new_tokens=4", "eval.early_stopping_patience=1", "output.report_to=none",
                 "output.push_to_hub=someone/tiny-arith-grpo"]  # offline in tests: the upload must fail softly
    result = train(load_recipe(DEMO, overrides), output_dir=tmp_path / "run")
    assert result.status == "completed" and result.global_step == 4
    assert "early stop: task/gsm8k/accuracy has not improved for 1 evaluations" in result.message
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["best"]["step"] == 2 and manifest["best"]["value"] == 0.0
    assert manifest["status"] == "completed" and (tmp_path / "run" / "README.md").is_file()


def test_a_resumed_run_keeps_the_best_of_before(tmp_path: Path) -> None:
    """best/ survives a resume: the run continues the comparison instead of starting it again."""
    from grpo_cli import load_recipe, train

    out = tmp_path / "run"
    first = [*TRAIN[:4], "training.max_steps=2", "training.save_strategy=steps", "training.save_steps=2",
             "eval.every_steps=1", "eval.max_samples=8", "eval.num_generations=2", "output.report_to=none"]
    assert train(load_recipe(DEMO, first), output_dir=out).status == "completed"
    before = json.loads((out / "manifest.json").read_text())["best"]
    second = [o if o != "training.max_steps=2" else "training.max_steps=4" for o in first]
    assert train(load_recipe(DEMO, second), output_dir=out, resume=True).global_step == 4
    key = "task/eval/accuracy"
    logged = [(r["step"], r[key]) for r in _records(out / "metrics.jsonl") if key in r]
    assert [s for s, _ in logged] == [0, 1, 2, 3, 4]  # no second baseline after the resume
    best_step, best_value = max((sv for sv in logged if sv[0] > 0), key=lambda sv: (sv[1], -sv[0]))
    after = json.loads((out / "manifest.json").read_text())["best"]
    assert (after["step"], after["value"]) == (best_step, best_value)
    assert after["value"] >= before["value"]
    assert json.loads((out / "best" / "grpo_best.json").read_text()) == after



HOSTILE = {"A\x1b[2JB": "A\\x1b[2JB", "\x1b]0;T\x07": "\\x1b]0;T\\x07", "\x1b]8;;u\x1b\\L": "\\x1b]8;;u\\x1b\\L",
           "[/]": "[/]", "[red]x[/red]": "[red]x[/red]", "\rc\bb": "\\x0dc\\x08b", "\u202eevil": "\\u202eevil",
           "s\ud800": "s\\ud800"}
"""What a model may write, and how `grpo samples` shows it."""


def test_samples_show_terminal_escapes_from_completions_instead_of_obeying_them(tmp_path: Path) -> None:
    """A completion's ESC[2J, an OSC title or OSC 8 link, a carriage return or `[/]` once went to the terminal
    raw (or crashed rich's markup parser): each is shown as its escape, and nothing is interpreted."""
    rows = [{"step": 1, "prompt": f"p{i}", "completion": text, "reward": 1.0, "advantage": 0.5,
             "rewards": {"acc\x1b[31m": 1.0}} for i, text in enumerate(HOSTILE)]
    (tmp_path / "completions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = run_cli("samples", tmp_path)
    assert result.exit_code == 0, result
    for raw in ("\x1b", "\r", "\b", "\x07", "\u202e"):
        assert raw not in result.output, repr(raw)
    for shown in [*HOSTILE.values(), "acc\\x1b[31m"]:
        assert shown in result.output, shown
    assert_paragraph(run_cli("samples", tmp_path, "--reward", "\x1b[2J"), "--reward", "'\\x1b[2J'")


def test_samples_of_a_device_or_pipe_say_it_is_not_a_regular_file(tmp_path: Path) -> None:
    """/dev/urandom or a named pipe as completions.jsonl was called missing (and read, would never end)."""
    for run in not_regular_files(tmp_path, "completions.jsonl"):
        assert_paragraph(run_cli("samples", run), "RUN_DIR", "completions.jsonl is not a regular file",
                         "grpo train writes it as a file")


def _pushable(tmp_path: Path) -> Path:
    import shutil

    from grpo_cli.paths import ASSETS_DIR

    return Path(shutil.copytree(ASSETS_DIR / "tiny-arith", tmp_path / "model"))


@pytest.mark.parametrize("name, content, needles", [
    ("config.json", "junk{{", ["RUN_DIR", "config.json is not valid JSON (line 1, column 1", "re-saving the model"]),
    ("config.json", "[1, 2]", ["config.json holds a JSON list, not an object"]),
    ("tokenizer.json", "", ["RUN_DIR", "tokenizer.json is empty", "re-saving the model"]),
    ("generation_config.json", "\x00\x01binary", ["generation_config.json is a binary file"]),
    ("config.json", "{}", ["config.json has no `model_type`"]),
    ("tokenizer.json", '{"version": "1.0"}', ["tokenizer.json has no `model`"]),
    ("model-f16.gguf", "GGUF\x03\x00", ["cannot read the GGUF file", "truncated"]),
    ("grpo_gguf.json", "{junk", ["grpo_gguf.json is not valid JSON", "or delete grpo_gguf.json"]),
])
def test_push_dry_run_refuses_a_junk_model_file(tmp_path: Path, name: str, content: str, needles: list[str]) -> None:
    """`push --dry-run` once listed a junk config.json or an empty tokenizer.json as uploadable: a model nobody
    can load. It is refused before the card is written."""
    model = _pushable(tmp_path)
    (model / name).write_text(content)
    assert_paragraph(run_cli("push", model, "me/model", "--dry-run"), *needles)
    assert not (model / "README.md").exists()


def test_push_of_a_device_or_pipe_as_weights_says_it_is_not_a_regular_file(tmp_path: Path) -> None:
    import os

    model = _pushable(tmp_path)
    (model / "model.safetensors").unlink()
    os.mkfifo(model / "model.safetensors")
    assert_paragraph(run_cli("push", model, "me/model", "--dry-run"), "RUN_DIR",
                     "model.safetensors is not a regular file")
    (model / "model.safetensors").unlink()
    (model / "model.safetensors").symlink_to("/dev/urandom")
    assert_paragraph(run_cli("push", model, "me/model", "--dry-run"), "model.safetensors is not a regular file")
    assert not (model / "README.md").exists()


def test_samples_of_hand_edited_lines_are_shown_or_named_never_a_traceback(tmp_path: Path) -> None:
    """`rewards` as a list (not a table) once raised AttributeError; a text step was reported as 'no samples
    yet', which reads like a run still starting."""
    path = tmp_path / "completions.jsonl"
    path.write_text(json.dumps({"step": 1, "prompt": "p", "completion": "c", "reward": 1, "rewards": [1, 2]}) + "\n")
    shown = run_cli("samples", tmp_path)
    assert shown.exit_code == 0 and "step 1" in shown.output, shown
    path.write_text(json.dumps({"step": "one", "prompt": "p", "completion": "c"}) + "\n")
    assert_paragraph(run_cli("samples", tmp_path), "RUN_DIR", "is damaged", "whole-number step", "'one'")
