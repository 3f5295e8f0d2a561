"""User reward functions (module and file forms, sync and async, bound params) and reward models."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from grpo_cli.errors import GrpoError
from grpo_cli.recipe.schema import RewardEntry
from grpo_cli.rewards import build_reward_funcs, load_reward
from grpo_cli.rewards.loaders import AsyncBoundReward
from grpo_cli.rewards.reward_model import RewardModelScorer
from tests.conftest import assert_paragraph, run_cli

USER_REWARDS = '''
import asyncio


def brevity(completions, **kwargs):
    """Shorter is better."""
    return [1.0 / (1 + len(c)) for c in completions]


def scaled(completions, answer, *, scale=1.0, **kwargs):
    return [scale * float(str(a) in c) for c, a in zip(completions, answer)]


async def judge(completions, prompts, **kwargs):
    await asyncio.sleep(0)
    return [float(p in c) for p, c in zip(prompts, completions)]


def no_kwargs(completions):
    return [0.0] * len(completions)


class _Scorer:
    def __call__(self, completions):
        return [1.0] * len(completions)


made_at_runtime = _Scorer()
'''


def _call(func: Any, **columns: Any) -> list[float | None]:
    """Call as TRL does: keywords only, every column, trainer_state; await async rewards."""
    from grpo_cli.rewards.calling import call_reward

    n = len(columns["completions"])
    columns.setdefault("prompts", ["p"] * n)
    return call_reward(func, completion_ids=[[0]] * n, trainer_state=None, **columns)


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    (tmp_path / "my_rewards.py").write_text(USER_REWARDS, encoding="utf-8")
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "scoring.py").write_text(USER_REWARDS, encoding="utf-8")
    return tmp_path


def test_file_function_keeps_its_name_for_trl_metrics(user_dir: Path) -> None:
    from trl.trainer.utils import get_callable_name

    func = load_reward(RewardEntry(function="my_rewards.py:brevity"), user_dir)
    assert get_callable_name(func) == "brevity"  # TRL logs rewards/brevity/mean
    assert _call(func, completions=["ab", "abcd"]) == [1 / 3, 1 / 5]


def test_module_function_with_params_bound_and_a_custom_label(user_dir: Path) -> None:
    from trl.trainer.utils import get_callable_name

    entry = RewardEntry(name="hit", function="mypkg.scoring:scaled", params={"scale": 2.0})
    func = load_reward(entry, user_dir)
    assert get_callable_name(func) == "hit"
    assert _call(func, completions=["it is 4", "no"], answer=["4", "4"]) == [2.0, 0.0]


def test_params_win_over_a_dataset_column_of_the_same_name(user_dir: Path) -> None:
    func = load_reward(RewardEntry(function="my_rewards.py:scaled", params={"answer": ["x", "x"]}), user_dir)
    assert _call(func, completions=["x", "4"], answer=["4", "4"]) == [1.0, 0.0]


def test_async_function_is_awaited_by_trl(user_dir: Path) -> None:
    from trl.trainer.utils import is_async_callable

    func = load_reward(RewardEntry(function="my_rewards.py:judge"), user_dir)
    assert isinstance(func, AsyncBoundReward) and is_async_callable(func)
    assert _call(func, completions=["say hi", "bye"], prompts=["hi", "hi"]) == [1.0, 0.0]


@pytest.mark.parametrize(("function", "says"), [
    ("missing.py:f", "not found"),
    ("my_rewards.py:brevty", "Did you mean `brevity`"),
    ("no_such_pkg.mod:f", "cannot be found"),
    ("mypkg.scoring:nothing", "has no function 'nothing'"),
    ("my_rewards.py:no_kwargs", "**kwargs"),
])
def test_validate_finds_bad_references_without_importing(user_dir: Path, function: str, says: str) -> None:
    from grpo_cli.rewards import inspect_reward

    with pytest.raises(GrpoError) as err:
        inspect_reward(RewardEntry(function=function), user_dir, 0)
    assert "rewards[0].function" in err.value.render() and says in err.value.render()


@pytest.mark.parametrize(("function", "says"), [
    ("missing.py:f", "not found"),
    ("my_rewards.py:brevty", "Did you mean `brevity`"),
    ("no_such_pkg.mod:f", "cannot import module"),
    ("mypkg.scoring:nothing", "has no callable 'nothing'"),
    ("my_rewards.py:made_at_runtime", "**kwargs"),  # an object: its signature is only known once imported
])
def test_loading_bad_references_names_the_reward_and_the_fix(user_dir: Path, function: str, says: str) -> None:
    with pytest.raises(GrpoError) as err:
        load_reward(RewardEntry(function=function), user_dir, 0)
    assert "rewards[0]" in err.value.render() and says in err.value.render()


def test_file_that_fails_to_import_is_a_user_error(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("raise RuntimeError('needs an API key')\n\ndef f(**kw):\n    return []\n")
    with pytest.raises(GrpoError, match="importing .*broken.py failed: RuntimeError: needs an API key"):
        load_reward(RewardEntry(function="broken.py:f"), tmp_path, 0)


def test_unknown_param_of_a_user_function_is_refused(user_dir: Path) -> None:
    with pytest.raises(GrpoError, match=r"rewards\[0\].params.scal.*not a parameter"):
        load_reward(RewardEntry(function="my_rewards.py:scaled", params={"scal": 2}), user_dir, 0)


def test_check_rewards_reports_a_bad_reference_as_bad_input(write_recipe: Any, minimal_dir: Path) -> None:
    path = write_recipe("""
        model: {name_or_path: Qwen/Qwen2.5-0.5B-Instruct}
        data: {files: data.jsonl, prompt: {column: question}}
        rewards:
          - function: nowhere.py:score
    """)
    result = run_cli("check-rewards", path)
    assert result.exit_code == 2, result
    assert "rewards[0].function" in result.output and "nowhere.py" in result.output
    assert "Traceback" not in result.output


# --------------------------------------------------------------------------- reward models


def _byte_tokenizer() -> Any:
    """A byte-level tokenizer (no merges) with a chat template, built offline."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{c: i + 3 for i, c in enumerate(alphabet)}}
    tok = Tokenizer(models.BPE(vocab, [], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    fast.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                          "{% if add_generation_prompt %}assistant: {% endif %}")
    return fast


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sequence-classification reward model (num_labels=1) and a causal policy sharing one tokenizer."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen2ForSequenceClassification

    root = tmp_path_factory.mktemp("models")
    tok = _byte_tokenizer()
    config = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                  num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=1024,
                  pad_token_id=0, eos_token_id=1, bos_token_id=1)
    torch.manual_seed(0)
    Qwen2ForSequenceClassification(Qwen2Config(**config, num_labels=1)).save_pretrained(root / "rm")
    Qwen2ForCausalLM(Qwen2Config(**config, tie_word_embeddings=True)).save_pretrained(root / "policy")
    for name in ("rm", "policy"):
        tok.save_pretrained(root / name)
    rows = [{"question": f"{a}+{b}", "answer": str(a + b)} for a in range(4) for b in range(3)]
    (root / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return root


def _rm_recipe(root: Path) -> Path:
    """Chat prompts, accuracy plus the tiny reward model at half weight."""
    path = root / "rm-recipe.yaml"
    path.write_text(textwrap.dedent("""
        model: {name_or_path: policy, dtype: float32}
        data:
          files: data.jsonl
          prompt: {template: "{question}=", chat: true}
        rewards:
          - name: accuracy
            params: {answer_format: first_number}
          - model: rm
            weight: 0.5
        training:
          num_generations: 4
          per_device_train_batch_size: 8
          max_completion_length: 4
        launch: {profile: cpu}
        eval: {before_after: false}
    """).lstrip(), encoding="utf-8")
    return path


def test_reward_model_loads_as_the_path_trl_expects(tiny_models: Path) -> None:
    from grpo_cli.recipe.loader import load_recipe

    recipe = load_recipe(_rm_recipe(tiny_models))
    funcs = build_reward_funcs(recipe)
    assert funcs[1] == str(tiny_models / "rm")  # TRL loads it with AutoModelForSequenceClassification
    assert recipe.rewards[1].label == "rm"  # = TRL's name for it: the last part of the path


def test_reward_model_scores_like_trl_in_check_rewards(tiny_models: Path) -> None:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    result = run_cli("check-rewards", _rm_recipe(tiny_models), "--samples", "2", "--json")
    report = json.JSONDecoder().raw_decode(result.output[result.output.index("{"):])[0]
    rm = next(r for r in report["rewards"] if r["name"] == "rm")
    assert rm["errors"] == 0 and rm["none"] == 0 and rm["std"] > 0
    # An untrained reward model prefers some junk probes to the right answer: check-rewards says so.
    assert result.exit_code == 1 and report["violations"]
    assert {(v["reward"], v["kind"]) for v in report["violations"]} == {("rm", "hackable")}
    first = report["samples"][0]
    assert first["total"] == pytest.approx(first["scores"]["accuracy"] + 0.5 * first["scores"]["rm"])
    # The same number as a hand-made forward pass over the chat-formatted prompt + completion.
    tok = AutoTokenizer.from_pretrained(tiny_models / "rm")
    model = AutoModelForSequenceClassification.from_pretrained(tiny_models / "rm", num_labels=1)
    scorer = RewardModelScorer(str(tiny_models / "rm"), "rm")
    prompt = [{"role": "user", "content": "0+0="}]
    text = scorer.texts([prompt], [[{"role": "assistant", "content": first["completion"]}]])[0]
    assert text == f"user: 0+0=\nassistant: {first['completion']}\n"
    with torch.inference_mode():
        expected = model(**tok(text, return_tensors="pt", add_special_tokens=False)).logits[0, 0].item()
    assert first["scores"]["rm"] == pytest.approx(expected, abs=1e-5)


def test_missing_reward_model_dir_is_bad_input(tiny_models: Path, tmp_path: Path) -> None:
    recipe = _rm_recipe(tiny_models).read_text().replace("model: rm", "model: ./no-such-rm")
    path = tiny_models / "missing-rm.yaml"
    path.write_text(recipe, encoding="utf-8")
    result = run_cli("check-rewards", path)
    assert result.exit_code == 2, result
    assert "rewards[1].model" in result.output and "no-such-rm" in result.output


@pytest.mark.slow
def test_training_uses_the_reward_model_as_a_second_reward(tiny_models: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = run_cli("train", _rm_recipe(tiny_models), "training.max_steps=1", "training.logging_steps=1",
                     "-o", out)
    assert result.exit_code == 0, result
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    logged = next(r for r in records if "reward" in r)
    assert "rewards/rm/mean" in logged and "rewards/accuracy/mean" in logged


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


def test_reward_file_that_is_not_utf8(demo_copy: Path) -> None:
    (demo_copy.parent / "latin1.py").write_bytes(b"def f(completions, **kwargs):\n    return ['caf\xe9']\n")
    assert_paragraph(run_cli("validate", demo_copy, "rewards=[{function: latin1.py:f}]"), "rewards[0].function",
                     "latin1.py", "UTF-8", "line 2")


def test_binary_reward_file(demo_copy: Path) -> None:
    (demo_copy.parent / "bin.py").write_bytes(b"\x00\x9f\x92\x96" * 64)
    assert_paragraph(run_cli("validate", demo_copy, "rewards=[{function: bin.py:f}]"), "rewards[0].function", "bin.py",
                     "binary")


def test_reward_file_that_is_a_directory(demo_copy: Path) -> None:
    (demo_copy.parent / "rwdir.py").mkdir()
    assert_paragraph(run_cli("validate", demo_copy, "rewards=[{function: rwdir.py:f}]"), "rewards[0].function",
                     "rwdir.py", "directory")
