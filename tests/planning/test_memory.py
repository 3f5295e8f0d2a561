"""The memory plan against hand computations from published architecture numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_cli.planning.memory import GIB, memory_plan
from grpo_cli.planning.shapes import ModelShape
from grpo_cli.recipe.loader import load_recipe
from tests.conftest import MINIMAL, RECIPES, run_cli

DEMO = RECIPES / "demo.yaml"

# Qwen2.5-0.5B(-Instruct) config.json values.
QWEN05 = {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
          "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True}
H, INTER, L, HEADS, KV, V = 896, 4864, 24, 14, 2, 151936
HD = H // HEADS  # 64
KV_DIM = KV * HD  # 128


def qwen05_params_by_hand() -> int:
    embeddings = V * H  # tied: the lm_head reuses them
    attention = (H * H + H) + 2 * (H * KV_DIM + KV_DIM) + H * H  # q (+bias), k and v (+bias, 2 kv heads), o
    mlp = 3 * H * INTER  # SwiGLU gate, up, down
    norms = 2 * H  # two RMSNorm weights per layer
    return embeddings + L * (attention + mlp + norms) + H  # + final norm


def test_qwen25_05b_parameter_count_matches_the_published_494m() -> None:
    shape = ModelShape.from_config(QWEN05)
    assert shape.params == qwen05_params_by_hand() == 494_032_768


def test_untied_head_and_llama_layout() -> None:
    assert ModelShape.from_config({**QWEN05, "tie_word_embeddings": False}).params == 494_032_768 + V * H
    llama32_1b = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
                  "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
                  "tie_word_embeddings": True}
    layer = 2048 * 2048 * 2 + 2 * 2048 * 512 + 3 * 2048 * 8192 + 2 * 2048  # q, o; k, v (8 x 64); MLP; norms
    assert ModelShape.from_config(llama32_1b).params == 128256 * 2048 + 16 * layer + 2048 == 1_235_814_400


def test_lora_trainable_params_are_r_times_in_plus_out() -> None:
    shape = ModelShape.from_config(QWEN05)
    # q, k, v, o, gate, up, down
    per_layer = 16 * ((H + H) + 2 * (H + KV_DIM) + (H + H) + 2 * (H + INTER) + (INTER + H))
    assert shape.lora_params(16, "all-linear") == (L * per_layer, []) == (8_798_208, [])
    assert shape.lora_params(16, ["q_proj", "v_proj", "c_attn"]) == (L * 16 * ((H + H) + (H + KV_DIM)), ["c_attn"])


def test_moe_and_unrecognised_configs_give_no_plan(write_recipe, minimal_dir) -> None:
    recipe = load_recipe(write_recipe(MINIMAL))
    plan, why = memory_plan(recipe, config={**QWEN05, "num_experts": 60}, gpu_memory_gb=None)
    assert plan is None and "mixture-of-experts" in why
    plan, why = memory_plan(recipe, config={"n_embd": 768}, gpu_memory_gb=None)
    assert plan is None and "hidden_size" in why


def _plan(write_recipe, overrides: list[str], gpu: float | None = None, world: int | None = None):
    recipe = load_recipe(write_recipe(MINIMAL), ["model.dtype=bfloat16", "training.max_completion_length=512",
                                                 "data.max_prompt_tokens=256", *overrides])
    plan, why = memory_plan(recipe, config=QWEN05, gpu_memory_gb=gpu, world_size=world)
    assert plan is not None, why
    return plan


def _b(plan, name: str) -> float:
    item = plan.item(name)
    assert item is not None, [i.name for i in plan.items]
    return item.bytes


P = 494_032_768


def test_full_finetune_single_gpu_keeps_adam_moments_in_bf16(write_recipe, minimal_dir) -> None:
    plan = _plan(write_recipe, [])
    assert plan.trainable_params == P and plan.world_size == 1
    assert _b(plan, "weights") == P * 2 and _b(plan, "gradients") == P * 2
    assert _b(plan, "optimizer (AdamW m, v)") == P * 4  # two bf16 moments
    assert plan.item("fp32 master weights") is None and plan.item("reference model") is None


def test_zero3_shards_everything_and_zero2_only_grads_and_optimizer(write_recipe, minimal_dir) -> None:
    z3 = _plan(write_recipe, ["launch.profile=zero3", "launch.num_processes=8"])
    assert z3.world_size == 8
    assert _b(z3, "weights") == P * 2 / 8 and _b(z3, "gradients") == P * 2 / 8
    assert _b(z3, "optimizer (AdamW m, v)") == P * 8 / 8 and _b(z3, "fp32 master weights") == P * 4 / 8
    z2 = _plan(write_recipe, ["launch.profile=zero2", "launch.num_processes=8"])
    assert _b(z2, "weights") == P * 2 and _b(z2, "gradients") == P * 2 / 8
    assert _b(z2, "optimizer (AdamW m, v)") == P * 8 / 8
    assert z3.total_bytes < z2.total_bytes


def test_lora_trains_fp32_adapters_and_needs_no_reference_copy(write_recipe, minimal_dir) -> None:
    plan = _plan(write_recipe, ["model.lora.r=16", "training.beta=0.04"])
    assert plan.trainable_params == 8_798_208
    assert _b(plan, "LoRA adapters") == 8_798_208 * 4 and _b(plan, "gradients") == 8_798_208 * 4
    assert _b(plan, "optimizer (AdamW m, v)") == 8_798_208 * 8
    assert plan.item("reference model") is None
    full = _plan(write_recipe, ["training.beta=0.04"])
    assert _b(full, "reference model") == P * 2


def test_cpu_lora_plan_counts_the_activations_malloc_keeps(write_recipe, minimal_dir) -> None:
    # Measured on SmolLM2 (benchmarks/micro/memory_plan.py): a LoRA step on CPU peaks one activation set above its live
    # tensors, because glibc keeps freed heap resident; a full fine-tune reuses those pages for its gradients.
    cpu = _plan(write_recipe, ["launch.profile=cpu", "model.dtype=float32", "model.lora.r=16",
                               "model.lora.dropout=0"])
    assert _b(cpu, "freed activations kept by malloc") == _b(cpu, "activations")
    dropout = _plan(write_recipe, ["launch.profile=cpu", "model.dtype=float32", "model.lora.r=16",
                                   "model.lora.dropout=0.05"])
    assert _b(dropout, "freed activations kept by malloc") == _b(cpu, "activations")  # not the dropout copies
    for others in (["launch.profile=cpu", "model.dtype=float32"], ["model.lora.r=16"]):  # full FT; LoRA on a GPU
        assert _plan(write_recipe, others).item("freed activations kept by malloc") is None


def test_activations_logits_and_kv_cache_by_hand(write_recipe, minimal_dir) -> None:
    plan = _plan(write_recipe, ["training.per_device_train_batch_size=4", "training.gradient_accumulation_steps=2",
                                "training.gradient_checkpointing=true"])
    tokens = 4 * (256 + 512)
    per_layer = (6 * H + 3 * KV_DIM + 4 * INTER) * 2 * tokens  # values kept per token per layer, bf16
    assert plan.activations_full == per_layer * L
    assert _b(plan, "activations") == plan.activations_checkpointed == H * 2 * tokens * L + per_layer
    # TRL's fused LM head on CUDA (measured on an H100, docs/performance.md "GPU"): one bf16 tile of (completion
    # tokens, capped at 4096) x (vocab, capped at 32768), the fp32 gradient of those tokens' hidden states, and a
    # full fine-tune's fp32 LM-head gradient with its bf16 copy
    assert _b(plan, "log-prob tiles") == (4 * 512) * 32768 * 2 + (4 * 512) * H * 4 + V * H * (4 + 2)
    lora = _plan(write_recipe, ["training.per_device_train_batch_size=4", "model.lora.r=16"])
    assert _b(lora, "log-prob tiles") == (4 * 512) * 32768 * 2 + (4 * 512) * H * 4  # the LM head is frozen
    # on the CPU, torch ops fold each tile: about 7 fp32 tiles of every position (benchmarks/micro/memory_plan.py)
    cpu = _plan(write_recipe, ["training.per_device_train_batch_size=4", "launch.profile=cpu",
                               "model.dtype=float32"])
    assert _b(cpu, "log-prob tiles") == 7 * (4 * (256 + 512)) * 32768 * 4
    assert _b(plan, "generation KV cache") == 2 * L * KV_DIM * 2 * (4 * 2) * (256 + 512)
    no_ckpt = _plan(write_recipe, ["training.per_device_train_batch_size=4", "training.gradient_checkpointing=false"])
    assert _b(no_ckpt, "activations") == per_layer * L > _b(plan, "activations")


def test_lora_merged_for_generation_counts_its_kept_copy_of_the_adapted_base(write_recipe, minimal_dir) -> None:
    # training/merged_generation.py keeps each adapted base weight while the adapter is merged for generation
    attention = H * H + 2 * H * KV_DIM + H * H  # q, k, v, o weights (biases are not copied)
    plan = _plan(write_recipe, ["model.lora.r=16", "model.lora.target_modules=[q_proj,k_proj,v_proj,o_proj]"])
    copy = plan.item("LoRA merge: kept base copy")
    assert copy is not None and copy.phase == "generation" and copy.bytes == attention * L * 2  # bf16
    every = _plan(write_recipe, ["model.lora.r=16"])  # all-linear: the MLP's three projections too
    assert _b(every, "LoRA merge: kept base copy") == (attention + 3 * H * INTER) * L * 2
    for unmerged in (["model.lora.r=16", "model.quantization=4bit"], ["model.lora.r=16", "model.lora.use_dora=true"],
                     ["launch.vllm.mode=colocate", "model.lora.r=16"], []):  # lossy, no plain delta, vLLM, full FT
        assert _plan(write_recipe, unmerged).item("LoRA merge: kept base copy") is None


def test_total_is_static_plus_the_larger_transient_phase(write_recipe, minimal_dir) -> None:
    plan = _plan(write_recipe, [])
    static = sum(i.bytes for i in plan.items if i.phase == "static")
    training = _b(plan, "activations") + _b(plan, "log-prob tiles")
    assert plan.total_bytes == static + max(training, _b(plan, "generation KV cache"))
    assert plan.render_rows()[-1][:2] == ("total per GPU", f"{plan.total_bytes / GIB:.2f}")


def test_colocated_vllm_share_and_the_warning_when_it_does_not_fit(write_recipe, minimal_dir) -> None:
    plan = _plan(write_recipe, ["launch.vllm.mode=colocate", "launch.vllm.gpu_memory_utilization=0.5"], gpu=80)
    assert _b(plan, "vLLM (colocate)") == 0.5 * 80 * GIB
    assert plan.item("generation KV cache") is None  # vLLM holds the KV cache inside its share
    assert plan.warning is None and plan.render_rows()[-1][2] == "of 80.0 GiB: fits"
    small = _plan(write_recipe, ["training.gradient_checkpointing=false", "training.per_device_train_batch_size=16"],
                  gpu=16)
    assert small.total_gb > 16
    assert small.warning is not None and "activations" in small.warning and "gradient_checkpointing" in small.warning


def test_config_is_read_from_a_local_dir_or_the_hub_cache_only(write_recipe, minimal_dir, tmp_path: Path,
                                                               monkeypatch) -> None:
    model_dir = minimal_dir / "policy"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(QWEN05))
    text = MINIMAL.replace("Qwen/Qwen2.5-0.5B-Instruct", "policy")
    plan, why = memory_plan(load_recipe(write_recipe(text, "local.yaml")), gpu_memory_gb=None)
    assert plan is not None and plan.params == P and plan.source == str(model_dir / "config.json")

    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    recipe = load_recipe(write_recipe(MINIMAL.replace("Qwen/Qwen2.5-0.5B-Instruct", "acme/tiny"), "hub.yaml"))
    plan, why = memory_plan(recipe, gpu_memory_gb=None)
    assert plan is None and "hf download acme/tiny config.json" in why
    snapshot = cache / "models--acme--tiny" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(QWEN05))
    (cache / "models--acme--tiny" / "refs").mkdir()
    (cache / "models--acme--tiny" / "refs" / "main").write_text("abc123")
    plan, why = memory_plan(recipe, gpu_memory_gb=None)
    assert plan is not None and plan.params == P and "hub cache" in plan.source


def test_memory_cli_prints_the_table_and_warns(write_recipe, minimal_dir) -> None:
    (minimal_dir / "policy").mkdir()
    (minimal_dir / "policy" / "config.json").write_text(json.dumps(QWEN05))
    path = write_recipe(MINIMAL.replace("Qwen/Qwen2.5-0.5B-Instruct", "policy"))
    result = run_cli("memory", path, "model.dtype=bfloat16", "--gpu-memory-gb", "2")
    assert result.exit_code == 0, result
    assert "optimizer (AdamW m, v)" in result.output and "total per GPU" in result.output
    assert "warning:" in result.output and "DOES NOT FIT" in result.output
    missing = run_cli("memory", write_recipe(MINIMAL.replace("Qwen/Qwen2.5-0.5B-Instruct", "acme/absent"), "x.yaml"))
    assert missing.exit_code == 0 and "no memory plan" in missing.output


@pytest.mark.parametrize(("dtype", "quant", "expected"), [("float32", None, 4.0), ("bfloat16", "4bit", None)])
def test_weight_bytes_follow_dtype_and_quantization(write_recipe, minimal_dir, dtype, quant, expected) -> None:
    overrides = [f"model.dtype={dtype}"] + ([f"model.quantization={quant}", "model.lora.r=8"] if quant else [])
    plan = _plan(write_recipe, overrides)
    shape = ModelShape.from_config(QWEN05)
    if expected:
        assert _b(plan, "weights") == P * expected
    else:  # projections at 0.5625 bytes (nf4 + fp32 scale per 64), embeddings and norms in bf16
        assert _b(plan, "weights") == shape.linear_params * 0.5625 + (P - shape.linear_params) * 2


def test_lora_dropout_copies_in_the_plan_match_what_autograd_keeps() -> None:
    """LoRA with dropout keeps a dropped-out copy of each adapted projection's input and a byte mask: the plan's
    term for it is held against the bytes a real peft model saves for backward (saved-tensor hooks)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(hidden_size=128, num_hidden_layers=2, intermediate_size=384, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=500, tie_word_embeddings=True)
    ids = torch.randint(0, 500, (4, 64))

    def saved_bytes(dropout: float) -> int:
        torch.manual_seed(0)
        model = get_peft_model(Qwen2ForCausalLM(config), LoraConfig(r=8, lora_dropout=dropout,
                                                                    target_modules="all-linear"))
        model.train()
        storages: dict[tuple[int, str], int] = {}

        def pack(t: torch.Tensor) -> torch.Tensor:
            storages[(t.untyped_storage().data_ptr(), str(t.dtype))] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model.base_model.model.model(input_ids=ids)
        return sum(storages.values())

    measured = (saved_bytes(0.05) - saved_bytes(0.0)) / (ids.numel() * config.num_hidden_layers)
    shape = ModelShape.from_config(config.to_dict())
    planned = shape.lora_dropout_bytes_per_token_layer("all-linear", 4.0)
    assert measured > 0, "dropout > 0 must keep more for backward than dropout 0"
    assert 0.8 < planned / measured < 1.2, (planned, measured)


def _memory_of(write_recipe, training: str, vllm: str = "'off'") -> object:
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
    default = _memory_of(write_recipe, "")
    off = _memory_of(write_recipe, ", activation_checkpointing: false")
    assert "checkpointing on" in default.item("activations").note
    assert "checkpointing off" in off.item("activations").note
    assert off.item("activations").bytes > 5 * default.item("activations").bytes


def test_memory_plan_releases_vllm_while_training_in_sleep_mode(write_recipe) -> None:
    awake = _memory_of(write_recipe, "", "colocate")
    asleep = _memory_of(write_recipe, "", "colocate, enable_sleep_mode: true")
    assert asleep.item("vLLM (colocate)").phase == "generation"
    assert asleep.total_gb < awake.total_gb


def test_memory_on_the_cpu_profile_is_headed_host_ram() -> None:
    result = run_cli("memory", DEMO)
    assert result.exit_code == 0, result
    assert "memory in host RAM: bundled:tiny-arith, profile cpu" in result.output
    assert "total in host RAM" in result.output and "per GPU" not in result.output
    gpu = run_cli("memory", DEMO, "launch.profile=single", "--gpu-memory-gb", "80")
    assert "memory per GPU" in gpu.output and "total per GPU" in gpu.output
