"""`launch.vllm.mode: async`: what `grpo validate` says and refuses, and the TRL 1.16 hooks grpo uses to run TRL's
AsyncGRPOTrainer on the CPU, pinned against the installed TRL (a TRL that moves one fails here, loudly).

Training with it against a real vLLM server is in tests/vllm/test_vllm_server.py (it needs vLLM's CPU build).
"""

from __future__ import annotations

import inspect
import json

import pytest

from grpo_cli.paths import ASSETS_DIR
from tests.conftest import RECIPES, run_cli

DEMO = RECIPES / "demo.yaml"
ASYNC = "launch.vllm.mode=async"


def _plan(*overrides: str) -> tuple[int, dict]:
    result = run_cli("validate", DEMO, ASYNC, *overrides, "--json")
    return result.exit_code, (json.loads(result.output[result.output.index("{"):]) if result.exit_code == 0 else
                              {"output": result.output})


def test_validate_names_the_staleness_bound_and_the_importance_sampling_clip() -> None:
    code, out = _plan("launch.vllm.max_staleness=2", "training.epsilon_high=0.28")
    assert code == 0, out
    plan = json.dumps(out)
    assert "AsyncGRPOTrainer" in plan
    assert "at most 2 weight sync(s) after it was sampled" in plan
    assert "clipped to [0.8, 1.28]" in plan
    assert "64 completions = 8 prompts x 8 generations" in plan  # the batch arithmetic is still checked


@pytest.mark.parametrize(("override", "where", "says"), [
    ("training.beta=0.04", "training.beta", "always trains as beta=0"),
    ("training.loss_type=grpo", "training.loss_type", "always trains as loss_type='dapo'"),
    ("training.mask_truncated_completions=true", "training.mask_truncated_completions", "would ignore it"),
    ("rewards[0].weight=2", "rewards[].weight", "sums rewards with weight 1"),
    ("eval.every_steps=5", "eval.every_steps", "packed-attention model"),
    ("health.zero_std.action=stop", "health.zero_std.action", "does not log frac_reward_zero_std"),
])
def test_validate_refuses_what_the_async_trainer_would_ignore(override: str, where: str, says: str) -> None:
    result = run_cli("validate", DEMO, ASYNC, override)
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert where in text and says in text and "launch.vllm.mode: server" in text


def test_the_same_keys_in_server_mode_stay_valid() -> None:
    assert run_cli("validate", DEMO, "launch.vllm.mode=server", "training.beta=0.04").exit_code == 0


def test_tree_attention_on_cpu_equals_each_samples_own_causal_attention() -> None:
    """TRL packs completions that share a prompt into a prefix tree; attention goes through `packing._flash_attn()`
    (a CUDA kernel). With grpo's CPU hook each sample must see exactly its own causal attention."""
    import torch
    from trl.experimental.async_grpo import packing

    from grpo_cli.training.async_cpu import patch_trl_for_cpu

    patch_trl_for_cpu()
    assert packing._flash_attn().flash_attn_varlen_func is not None
    samples = [[5, 6, 7, 8, 9], [5, 6, 7, 3], [5, 6, 1, 2, 4, 4]]  # shared prefix 5 6 (7), then forks
    row = packing.TreeRow()
    for i, ids in enumerate(samples):
        row.add({"input_ids": torch.tensor(ids), "completion_mask": torch.ones(len(ids), dtype=torch.long),
                 "old_log_probs": torch.zeros(len(ids)), "advantage": 0.0, "group_id": 0, "i": i})
    packed = row.pack()
    heads, kv_heads, dim = 4, 2, 8
    gen = torch.Generator().manual_seed(0)
    table_k, table_v, table_q = (torch.randn(10, 16, kv_heads if n != "q" else heads, dim, generator=gen)
                                 for n in ("k", "v", "q"))

    def qkv(ids: list[int], positions: list[int]) -> tuple[torch.Tensor, ...]:  # (1, heads, len, dim), as HF passes
        return tuple(t[ids, positions].transpose(0, 1)[None] for t in (table_q, table_k, table_v))

    q, k, v = qkv(packed["input_ids"].tolist(), packed["position_ids"].tolist())
    layer = torch.nn.Module()  # what transformers reads the compute dtype from: a float32 linear layer
    layer.config, layer.proj = object(), torch.nn.Linear(2, 2)
    tree, _ = packing.tree_attention(
        layer, q, k, v, None, tree_kv_index=packed["tree_kv_index"], tree_cu_seqlens_q=packed["tree_cu_seqlens_q"],
        tree_cu_seqlens_k=packed["tree_cu_seqlens_k"], tree_max_seqlen_q=int(packed["tree_max_seqlens"][0]),
        tree_max_seqlen_k=int(packed["tree_max_seqlens"][1]))
    for ids, nodes in zip(samples, row.sample_nodes, strict=True):
        sq, sk, sv = qkv(ids, list(range(len(ids))))
        own = torch.nn.functional.scaled_dot_product_attention(sq, sk, sv, is_causal=True, enable_gqa=True)
        where = torch.tensor([packed_position(row, n) for n in nodes])
        assert torch.allclose(tree[0, where], own[0].transpose(0, 1), atol=1e-5)


def packed_position(row: object, node: int) -> int:
    """Where `pack` put a trie node: its DFS pre-order, recomputed as `pack` lays it out."""
    order: list[int] = []
    stack = list(reversed(row.roots.values()))  # type: ignore[attr-defined]
    while stack:
        n = stack.pop()
        order.append(n)
        stack.extend(reversed(row.children[n].values()))  # type: ignore[attr-defined]
    return order.index(node)


def test_trls_hooks_are_where_grpo_replaces_them() -> None:
    """The names grpo swaps or fills are still what TRL's async trainer calls."""
    from trl.experimental.async_grpo import AsyncGRPOTrainer, async_grpo_trainer, packing
    from trl.experimental.async_grpo.async_grpo_trainer import WeightTransferProtocol

    from grpo_cli.training.async_cpu import CpuWeightTransfer

    assert "_flash_attn().flash_attn_varlen_func(" in inspect.getsource(packing.tree_attention)
    assert "get_peak_flops_per_device(self.accelerator" in inspect.getsource(AsyncGRPOTrainer.__init__)
    assert callable(async_grpo_trainer.get_peak_flops_per_device)
    assert "weight_transfer" in inspect.signature(AsyncGRPOTrainer.__init__).parameters
    protocol = {n for n in vars(WeightTransferProtocol) if not n.startswith("_")}
    assert protocol == {"init_weight_transfer", "pause", "send_weights", "resume", "destroy"}
    assert all(callable(getattr(CpuWeightTransfer, n)) for n in protocol)


def test_plain_prompts_render_as_the_synchronous_trainer_tokenizes_them() -> None:
    from transformers import AutoTokenizer
    from trl.chat_template_utils import parse_response

    from grpo_cli.training.async_grpo import async_tokenizer

    base = AutoTokenizer.from_pretrained(ASSETS_DIR / "tiny-arith")
    tok = async_tokenizer(base, plain=True, first_prompt="11+10=")
    assert base.chat_template != tok.chat_template  # the run's own tokenizer (saved with the model) is untouched
    for prompt in ("11+10=", "3+4="):
        rendered = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                           return_dict=False)
        assert list(rendered) == base(prompt)["input_ids"]
    answer = base("21", add_special_tokens=False)["input_ids"] + [base.eos_token_id]
    assert parse_response(tok, answer, prefix=rendered)["content"] == "21"
