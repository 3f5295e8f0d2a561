"""The fast transformers generation path: the LoRA adapter merged while generating, a static cache, the same samples.

Generation runs the real bundled model with a real LoRA adapter (its B matrices drawn, so the adapter changes the
logits); the training tests run real `grpo train` steps with TRL's default path and with grpo's, and compare what
the steps saw. The callback tests also pin the hooks: if the installed TRL stops calling `model.generate` on the
trainer's model, or stops passing `cache_implementation`/`generation_kwargs` through, they fail.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from grpo_cli.errors import GrpoError
from grpo_cli.paths import ASSETS_DIR
from grpo_cli.planning.fast_generation import generation_path
from grpo_cli.recipe import load_recipe
from grpo_cli.training.compiled_decode import allow_compile
from grpo_cli.training.merged_generation import OFF_ENV, merge_for_generation
from tests.conftest import assert_paragraph, run_cli

ROOT = Path(__file__).resolve().parents[2]
MODEL = ASSETS_DIR / "tiny-arith"


def _lora_model(dtype: torch.dtype = torch.float32, dora: bool = False):  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(MODEL, dtype=dtype)
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules="all-linear",
                                            use_dora=dora))
    for name, param in model.named_parameters():  # a trained adapter, not the zero-initialised one
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.05)
    return model.train()


def _batch() -> dict[str, torch.Tensor]:
    tok = AutoTokenizer.from_pretrained(MODEL)
    tok.padding_side = "left"
    enc = tok([p for p in ("3+5=", "12+19=", "7+0=") for _ in range(4)], return_tensors="pt", padding=True)
    return {"input_ids": enc.input_ids, "attention_mask": enc.attention_mask}


def _sample(model, batch, **config):  # type: ignore[no-untyped-def]
    config = GenerationConfig(max_new_tokens=6, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=0,
                              return_dict_in_generate=True, output_logits=True, **config)
    torch.manual_seed(1)
    with torch.no_grad():
        out = model.generate(**batch, generation_config=config)
    logprobs = torch.stack(out.logits, dim=1).float().log_softmax(-1)
    new = out.sequences[:, batch["input_ids"].shape[1]:]
    return out.sequences, logprobs.gather(-1, new.unsqueeze(-1)).squeeze(-1)


def _state(model) -> dict[str, torch.Tensor]:  # type: ignore[no-untyped-def]
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _loss_and_grads(model, batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:  # type: ignore[no-untyped-def]
    model.zero_grad()
    loss = model(**batch, labels=batch["input_ids"]).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_merged_generation_samples_the_same_tokens_and_restores_the_base_bit_for_bit() -> None:
    model, batch = _lora_model(), _batch()
    tokens, logprobs = _sample(model, batch)
    before = _state(model)
    loss, grads = _loss_and_grads(model, batch)
    merged = merge_for_generation(model)
    assert merged is not None and len(merged.layers) == 2 * 7  # 2 layers x q, k, v, o, gate, up, down
    tokens_merged, logprobs_merged = _sample(model, batch)
    assert merged.rounds == 1 and merged.skipped is None
    assert torch.equal(tokens, tokens_merged)
    assert torch.allclose(logprobs, logprobs_merged, atol=1e-5), (logprobs - logprobs_merged).abs().max()
    after = _state(model)
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    layer = model.base_model.model.model.layers[0].self_attn
    assert type(layer.q_proj).__name__ == "Linear" and hasattr(layer.q_proj, "lora_A")  # the LoRA layer is back
    loss_after, grads_after = _loss_and_grads(model, batch)  # the training step sees exactly the same model
    assert torch.equal(loss, loss_after) and grads.keys() == grads_after.keys()
    assert all(torch.equal(grads[k], grads_after[k]) for k in grads)


def test_a_bfloat16_base_is_restored_from_the_copy_where_subtracting_would_drift() -> None:
    model, batch = _lora_model(torch.bfloat16), _batch()
    before = _state(model)
    merged = merge_for_generation(model)
    assert merged is not None
    for _ in range(3):
        _sample(model, batch)
    assert merged.rounds == 3
    assert all(torch.equal(before[k], v) for k, v in _state(model).items())
    drift = model.base_model.model.model.layers[0].self_attn.q_proj  # what peft's merge + unmerge would leave
    weight = drift.base_layer.weight.detach().clone()
    drift.merge()
    drift.unmerge()
    assert not torch.equal(weight, drift.base_layer.weight)


def test_a_merge_that_fails_part_way_leaves_the_model_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    model, batch = _lora_model(), _batch()
    before = _state(model)
    merged = merge_for_generation(model)
    assert merged is not None
    tokens, _ = _sample(model, batch)
    _, _, broken = merged.layers[5]  # layers 0-4 are merged and swapped when this one fails (e.g. out of memory)

    def fail(adapter: str) -> torch.Tensor:
        raise RuntimeError("out of memory")

    monkeypatch.setattr(broken, "get_delta_weight", fail)
    with pytest.raises(RuntimeError, match="out of memory"):
        _sample(model, batch)
    assert all(torch.equal(before[k], v) for k, v in _state(model).items())
    assert all(getattr(parent, name) is lora for parent, name, lora in merged.layers)  # every LoRA layer back
    monkeypatch.undo()
    assert torch.equal(_sample(model, batch)[0], tokens)


def test_left_unmerged_where_merging_is_not_a_plain_delta_or_the_adapter_is_off(
        monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    assert merge_for_generation(_lora_model(dora=True)) is None
    model, batch = _lora_model(), _batch()
    merged = merge_for_generation(model)
    assert merged is not None
    with model.disable_adapter():  # e.g. a reference pass: the base alone must generate
        _sample(model, batch)
        _sample(model, batch)
    assert merged.rounds == 0 and merged.skipped and "disabled" in merged.skipped
    assert capfd.readouterr().err.count("generating through the LoRA layers, unmerged: an adapter is disabled") == 1
    monkeypatch.setenv(OFF_ENV, "0")
    plain = _lora_model()
    generate = plain.generate
    assert merge_for_generation(plain) is None and plain.generate == generate


def test_the_plan_follows_the_switch_and_a_value_that_is_not_one_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 46 sweep: with GRPO_MERGED_GENERATION=0 `grpo validate` still planned "adapter merged while
    generating" (and the memory plan its kept copy) while the run did not merge; `=garbage` left it on silently."""
    recipe = str(ROOT / "recipes" / "demo.yaml")
    monkeypatch.setenv(OFF_ENV, "0")
    text = " ".join(run_cli("validate", recipe, "model.lora={r: 4}").output.split())
    assert "adapter not merged ($GRPO_MERGED_GENERATION=0)" in text and "adapter merged while" not in text
    monkeypatch.setenv(OFF_ENV, "of")
    for verb in ("validate", "train"):
        assert_paragraph(run_cli(verb, recipe, "model.lora={r: 4}", "training.max_steps=1"),
                         "$GRPO_MERGED_GENERATION is 'of', which is not a switch", "GRPO_MERGED_GENERATION=0")
    with pytest.raises(GrpoError, match="not a switch"):  # the run's own check reads the same switch
        merge_for_generation(_lora_model())


def test_compiled_decode_beside_vllm_says_vllm_generates() -> None:
    """Issue 46 sweep: `compiled_decode: true` beside vLLM warned "TRL's dynamic cache is used: vLLM generates"
    (vLLM keeps its own cache); the warning now says the key is for transformers generation only."""
    recipe = str(ROOT / "recipes" / "demo.yaml")
    result = run_cli("validate", recipe, "sampling.compiled_decode=true", "launch.vllm.mode=colocate")
    text = " ".join(result.output.split())
    assert "applies to generation with transformers, but vLLM generates here" in text
    assert "dynamic cache is used" not in text


def test_a_static_cache_samples_the_same_tokens() -> None:
    model, batch = _lora_model(), _batch()
    tokens, logprobs = _sample(model, batch)
    static_tokens, static_logprobs = _sample(model, batch, cache_implementation="static", max_cache_len=32)
    assert torch.equal(tokens, static_tokens)
    assert torch.allclose(logprobs, static_logprobs, atol=1e-5)


def test_trl_generates_through_the_hooks_grpo_uses() -> None:
    """TRL 1.16's transformers path: `unwrapped_model.generate(..., generation_config=self.generation_config)`,
    that config built with `disable_compile=True` from the GRPOConfig's cache_implementation and generation_kwargs."""
    from trl import GRPOTrainer

    single_turn = inspect.getsource(GRPOTrainer._generate_single_turn)
    assert "unwrapped_model.generate(" in single_turn and "generation_config=self.generation_config" in single_turn
    init = inspect.getsource(GRPOTrainer.__init__)
    assert "disable_compile=True" in init and '"cache_implementation": args.cache_implementation' in init
    assert "generation_kwargs.update(args.generation_kwargs)" in init


def test_the_path_is_chosen_per_device_and_refused_where_it_cannot_apply(tmp_path: Path) -> None:
    smollm2 = ROOT / "recipes" / "smollm2-word-arith.yaml"
    recipe = load_recipe(smollm2, overrides=["launch.vllm.mode=off"])
    on_gpu, on_cpu = generation_path(recipe, cuda=True), generation_path(recipe, cuda=False)
    assert on_gpu.merge and on_gpu.static and on_gpu.compiled
    assert on_cpu.merge and not on_cpu.static and "CPU" in on_cpu.static_why
    assert "dropout" not in on_cpu.merge_why  # the recipe's adapter has none; with some, the plan says it is skipped
    dropped = load_recipe(smollm2, overrides=["launch.vllm.mode=off", "model.lora.dropout=0.05"])
    assert "without LoRA's dropout 0.05" in generation_path(dropped, cuda=False).merge_why
    assert generation_path(load_recipe(smollm2, overrides=["launch.vllm.mode=colocate"]), cuda=True).vllm
    forced = load_recipe(smollm2, overrides=["launch.vllm.mode=off", "sampling.compiled_decode=false"])
    assert not generation_path(forced, cuda=True).static
    own = load_recipe(smollm2, overrides=["launch.vllm.mode=off", "training.cache_implementation=offloaded"])
    assert not generation_path(own, cuda=True).static  # the recipe's own cache is TRL's to run, untouched
    assert "own cache_implementation: offloaded" in generation_path(own, cuda=True).static_why
    tools = load_recipe(ROOT / "recipes" / "tools-demo.yaml", overrides=["sampling.compiled_decode=true"])
    assert "tool calls" in generation_path(tools, cuda=True).static_why
    quantized = load_recipe(ROOT / "recipes" / "gsm8k.yaml", overrides=["model.quantization=4bit"])
    path = generation_path(quantized, cuda=True)
    assert not path.merge and "lossy" in path.merge_why and not path.static

    assert allow_compile(SimpleNamespace(generation_config=GenerationConfig()), on_cpu) is None


def test_a_decode_that_fails_to_compile_is_generated_uncompiled_and_says_why(capfd: pytest.CaptureFixture[str]) -> None:
    from transformers import CompileConfig

    recipe = load_recipe(ROOT / "recipes" / "smollm2-word-arith.yaml", overrides=["launch.vllm.mode=off"])
    model, batch = _lora_model(), _batch()
    config = GenerationConfig(max_new_tokens=6, do_sample=True, top_k=0, pad_token_id=0, cache_implementation="static",
                              max_cache_len=32, disable_compile=True)  # as TRL 1.16 builds it
    torch.manual_seed(1)
    with torch.no_grad():
        reference = model.generate(**batch, generation_config=config)
    trainer = SimpleNamespace(model=model, generation_config=config)  # what allow_compile reads of TRL's trainer
    fallback = allow_compile(trainer, generation_path(recipe, cuda=True))
    assert fallback is not None and config.disable_compile is False
    config.compile_config = CompileConfig(backend="no-such-backend")  # a machine where compiling fails
    config.compile_config._compile_all_devices = True
    for _ in range(2):  # the failing round and a later one: both the uncompiled samples
        torch.manual_seed(1)
        with torch.no_grad():
            assert torch.equal(model.generate(**batch, generation_config=config), reference)
    assert config.disable_compile is True and fallback.failed and "no-such-backend" in fallback.failed
    assert capfd.readouterr().err.count("compiled decode failed here") == 1


CALLBACK = """
import json
from transformers import TrainerCallback

class Seen(TrainerCallback):
    def __init__(self, out):
        self.out = out

    def on_train_end(self, args, state, control, model=None, **kwargs):
        merged = getattr(model.generate, "__self__", None)
        with open(self.out, "w") as fh:
            json.dump({"rounds": getattr(merged, "rounds", 0), "cache": args.cache_implementation,
                       "generation_kwargs": args.generation_kwargs}, fh)
"""


def _train(tmp_path: Path, name: str, *overrides: str, merged: bool) -> tuple[dict[str, object], list[dict]]:
    (tmp_path / "seen.py").write_text(CALLBACK)
    out = tmp_path / f"{name}.json"
    env = {**os.environ, OFF_ENV: "1" if merged else "0"}
    done = subprocess.run(
        [sys.executable, "-m", "grpo_cli", "train", str(ROOT / "recipes" / "demo.yaml"), "training.max_steps=2",
         "training.logging_steps=1", "eval.before_after=false", "model.lora={r: 8, alpha: 16, dropout: 0.0}",
         "data.max_prompt_tokens=8", f"output.dir={tmp_path / name}", *overrides,
         f"callbacks=[{{callback: '{tmp_path / 'seen.py'}:Seen', params: {{out: '{out}'}}}}]", "--force"],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    return json.loads(out.read_text()), [r for r in rows if "loss" in r]


@pytest.mark.slow
def test_grpo_train_on_the_fast_path_sees_what_trls_default_path_sees(tmp_path: Path) -> None:
    default, default_rows = _train(tmp_path, "trl", merged=False)
    fast, fast_rows = _train(tmp_path, "fast", "sampling.compiled_decode=true", merged=True)
    assert default == {"rounds": 0, "cache": None, "generation_kwargs": None}
    assert fast == {"rounds": 2, "cache": "static", "generation_kwargs": {"max_cache_len": 8 + 4}}
    assert len(default_rows) == len(fast_rows) == 2
    for trl_row, fast_row in zip(default_rows, fast_rows, strict=True):  # the same samples, rewards and update
        for key in ("reward", "completions/mean_length", "loss", "grad_norm"):
            assert fast_row[key] == pytest.approx(trl_row[key], rel=1e-4, abs=1e-6), key


def test_decode_with_the_merged_adapter_compiles_once_into_one_graph() -> None:
    """What CUDA compiles, traced on the CPU (dynamo with its eager backend): the merged model's decode step is one
    graph without breaks, and later rounds, after the adapter changed in place, reuse it (no recompile)."""
    from torch._dynamo.utils import counters
    from transformers import CompileConfig

    model, twin, batch = _lora_model(), _lora_model(), _batch()  # twin: unmerged, eager, the same weights
    merged = merge_for_generation(model)
    assert merged is not None
    compile_config = CompileConfig(backend="eager", fullgraph=True, mode=None)
    compile_config._compile_all_devices = True  # transformers compiles on GPUs only unless told
    torch._dynamo.reset()
    counters.clear()
    for _ in range(2):
        tokens, _ = _sample(model, batch, cache_implementation="static", max_cache_len=32,
                            compile_config=compile_config, disable_compile=False)
        assert torch.equal(tokens, _sample(twin, batch)[0])
        with torch.no_grad():  # an optimizer step: the adapter changes in place
            for one in (model, twin):
                for name, param in one.named_parameters():
                    if "lora_B" in name:
                        param.add_(0.02)
    assert merged.rounds == 2 and counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
