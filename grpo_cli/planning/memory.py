"""A per-GPU memory plan from the model's config.json, before any weight is loaded.

The usual GRPO out-of-memory comes after minutes of loading, from something the recipe
already decides: AdamW state of a full fine-tune, activations without checkpointing, or the
log-probabilities over a large vocabulary. This plan estimates each
line from the architecture numbers in config.json and the recipe, so `grpo memory` can say
which one to cut.

Assumptions (per GPU; docs/distributed.md has the full list): dtype `auto` is bfloat16 on GPU;
single/ddp keep gradients and AdamW moments in the weights' dtype, zero2/zero3/fsdp add an fp32
master copy and fp32 moments (16 bytes per bf16 param); LoRA adapters are fp32, r x (in + out)
per adapted projection; ZeRO-3/FSDP shard weights, gradients and optimizer state, ZeRO-2 only the
last two; a decoder layer keeps about 6h + 3 kv_dim + 4 I values per token for backward (only h
with gradient checkpointing, plus one recomputed layer), and LoRA with dropout > 0 adds a dropped-out copy
of each adapted projection's input plus its one-byte mask; TRL's fused LM head keeps about 7 fp32
tiles of at most 4096 tokens x 32768 vocabulary columns on CPU, and one tile in the compute dtype on
CUDA plus the LM head's fp32 gradient when it trains (measured: benchmarks/micro/memory_plan.py on CPU,
scripts/gpu_check.sh on an H100); the generation KV cache and the training pass are never alive
together, so total = static + max(generation, training); 1 GiB of CUDA context.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from grpo_cli.errors import GrpoError
from grpo_cli.hardware import gpu_memory_gib
from grpo_cli.models.vision import vision_params
from grpo_cli.planning.fast_generation import merge_rule
from grpo_cli.planning.image_tokens import image_prompt_tokens
from grpo_cli.planning.model_config import find_model_config
from grpo_cli.planning.shapes import ModelShape
from grpo_cli.planning.topology import resolve_num_processes

if TYPE_CHECKING:
    from grpo_cli.recipe.schema import Recipe

GIB = 1024**3
DTYPE_BYTES = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}
QUANT_BYTES = {"4bit": 0.5625, "8bit": 1.0}
DEFAULT_PROMPT_TOKENS = 512
OVERHEAD_BYTES = 1.0 * GIB
# TRL 1.16's fused LM head (trl/kernels/chunked_logprob.py TOKEN_CHUNK_SIZE, trl/trainer/utils.py
# _CHUNKED_LOGPROB_CHUNK_SIZE) projects at most this many tokens x vocabulary columns at a time.
TOKEN_TILE, VOCAB_TILE = 4096, 32768
# fp32 tiles alive at the peak of the backward pass, measured on CPU by benchmarks/micro/memory_plan.py
# (docs/performance.md); assumed no larger for the Triton kernel on CUDA, which is not measured here.
LOGPROB_TILES_ALIVE = 7


@dataclass
class MemoryItem:
    """One line of the plan; phase says when it is alive (static, generation, or training pass)."""

    name: str
    bytes: float
    note: str = ""
    phase: Literal["static", "generation", "training"] = "static"

    @property
    def gib(self) -> float:
        return self.bytes / GIB


@dataclass
class MemoryPlan:
    """Estimated memory per GPU; total = static + max(generation, training pass)."""

    items: list[MemoryItem]
    params: int
    trainable_params: int
    world_size: int
    dtype: str
    source: str
    gpu_memory_gb: float | None = None
    activations_full: float = 0.0
    activations_checkpointed: float = 0.0
    notes: list[str] = field(default_factory=list)
    host: bool = False
    """Held on the CPU (profile cpu): the bytes are host RAM, and there is no GPU to divide them by."""

    @property
    def per(self) -> str:
        """What the numbers are per: a GPU, or the host's RAM for the cpu profile."""
        return "in host RAM" if self.host else "per GPU"

    def item(self, name: str) -> MemoryItem | None:
        return next((i for i in self.items if i.name == name), None)

    def _phase(self, phase: str) -> float:
        return sum(i.bytes for i in self.items if i.phase == phase)

    @property
    def total_bytes(self) -> float:
        return self._phase("static") + max(self._phase("generation"), self._phase("training"))

    @property
    def total_gb(self) -> float:
        return self.total_bytes / GIB

    @property
    def warning(self) -> str | None:
        """A sentence when the plan does not fit the GPU, naming the largest items to cut."""
        if self.gpu_memory_gb is None or self.total_gb <= self.gpu_memory_gb:
            return None
        biggest = sorted(self.items, key=lambda i: i.bytes, reverse=True)[:3]
        return (f"the plan needs about {self.total_gb:.1f} GiB per GPU but the GPU has {self.gpu_memory_gb:.1f} GiB; "
                f"largest items: {', '.join(f'{i.name} {i.gib:.1f} GiB' for i in biggest)}. Cut them with "
                "gradient_checkpointing, a smaller per_device_train_batch_size or max_completion_length, "
                "LoRA, or a sharded profile (zero3/fsdp) over more GPUs.")

    def render_rows(self) -> list[tuple[str, str, str]]:
        """(item, GiB, note) rows for a table, ending with the total."""
        rows = [(i.name, f"{i.gib:.2f}", i.note) for i in self.items]
        fits = ""
        if self.gpu_memory_gb is not None:
            fits = f"of {self.gpu_memory_gb:.1f} GiB: " + ("fits" if self.warning is None else "DOES NOT FIT")
        rows.append((f"total {self.per}", f"{self.total_gb:.2f}", fits or "static + max(generation, training pass)"))
        return rows


def _count(n: int) -> str:
    """123k / 494M / 7.6B: readable at every model size."""
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:,.{1 if n < div * 10 else 0}f}{unit}"
    return str(n)


def _world_size(recipe: Recipe, gpu_count: int) -> tuple[int, str]:
    if recipe.launch.num_processes is not None or not recipe.launch.spec.multi_process:
        return recipe.launch.world_size, ""
    try:
        return resolve_num_processes(recipe, gpus=gpu_count), ""
    except GrpoError:
        return 1, "launch.num_processes is not set and no GPU is visible: sharding computed for 1 process"


def memory_plan(recipe: Recipe, *, gpu_memory_gb: float | None | Literal["auto"] = "auto",
                world_size: int | None = None, config: dict[str, Any] | None = None) -> tuple[MemoryPlan | None, str]:
    """(plan, "") or (None, why no plan): the model config must be local or in the HF cache."""
    source = "given config"
    if config is None:
        config, source = find_model_config(recipe)
        if config is None:
            return None, source
    try:
        shape = ModelShape.from_config(config)
    except ValueError as exc:
        return None, f"cannot plan memory for this model: {exc}"
    notes: list[str] = []
    smi = gpu_memory_gib() if gpu_memory_gb == "auto" or world_size is None else []
    if gpu_memory_gb == "auto":
        gpu_memory_gb = min(smi) if smi else None
    if world_size is None:
        world_size, note = _world_size(recipe, len(smi))
        if note:
            notes.append(note)
    plan = _plan(recipe, shape, world_size, gpu_memory_gb, source, notes)
    vision = vision_params(config)
    if vision:  # the text shape above counts the language model only
        m = recipe.model
        dtype = m.dtype if m.dtype != "auto" else ("float32" if recipe.launch.spec.cpu_only else "bfloat16")
        shard = world_size if recipe.launch.spec.shards_weights else 1
        plan.items.insert(1, MemoryItem("vision encoder weights", vision * DTYPE_BYTES[dtype] / shard,
                                        f"~{_count(vision)} params from vision_config ({dtype}), approximate"))
        plan.params += vision
    return plan, ""


def _plan(recipe: Recipe, shape: ModelShape, world: int, gpu_gb: float | None, source: str,
          notes: list[str]) -> MemoryPlan:
    """Weights and optimizer state (static), then max(training pass, generation), per GPU."""
    profile = recipe.launch.spec
    m = recipe.model
    dtype = m.dtype if m.dtype != "auto" else ("float32" if profile.cpu_only else "bfloat16")
    items, trainable = _static_items(recipe, shape, world, dtype, notes)
    training, full, ckpt = _training_items(recipe, shape, dtype, notes)
    items += training
    items += _generation_items(recipe, shape, world, dtype, gpu_gb, notes)
    if not profile.cpu_only:
        items.append(MemoryItem("CUDA context & workspace", OVERHEAD_BYTES, "allowance (0.76 GiB measured on an "
                                "H100); fragmentation not counted: grpo train sets expandable segments"))
    return MemoryPlan(items, shape.params, trainable, world, dtype, source, gpu_gb, full, ckpt, notes,
                      host=profile.cpu_only)


def _static_items(recipe: Recipe, shape: ModelShape, world: int, dtype: str,
                  notes: list[str]) -> tuple[list[MemoryItem], int]:
    """Weights, adapters, gradients, optimizer state and the reference model; and the trainable count."""
    m, t, profile = recipe.model, recipe.training, recipe.launch.spec
    wb, params = DTYPE_BYTES[dtype], shape.params
    shard_weights = world if profile.shards_weights else 1
    shard_state = world if profile.shards_state else 1
    sharded = f" / {world} (ZeRO-3/FSDP)" if shard_weights > 1 else ""
    items: list[MemoryItem] = []
    if m.quantization:
        weights = shape.linear_params * QUANT_BYTES[m.quantization] + (params - shape.linear_params) * wb
        wnote = f"{_count(params)} params, projections {m.quantization}, rest {dtype}"
    else:
        weights = params * wb
        wnote = f"{_count(params)} params x {wb:g} bytes ({dtype})"
    items.append(MemoryItem("weights", weights / shard_weights, wnote + sharded))
    eight_bit = "8bit" in t.optim
    if m.lora is not None:
        trainable, unknown = shape.lora_params(m.lora.r, m.lora.target_modules)
        if unknown:
            notes.append(f"LoRA target(s) {', '.join(unknown)} not recognised: not counted")
        for extra in m.lora.modules_to_save or []:
            if extra in ("lm_head", "embed_tokens"):
                trainable += shape.embedding_params
        items.append(MemoryItem("LoRA adapters", trainable * 4.0 / shard_weights,
                                f"{trainable / 1e6:,.2f}M trainable params, fp32{sharded}"))
        grad_b, moments_b, master_b = 4.0, (2.0 if eight_bit else 8.0), 0.0
        why = "fp32 adapters"
    else:
        trainable, grad_b = params, wb
        if profile.shards_state:
            moments_b, master_b = (2.0 if eight_bit else 8.0), (4.0 if wb < 4 else 0.0)
            why = "DeepSpeed/FSDP mixed precision: fp32 moments"
        else:
            moments_b, master_b = (2.0 if eight_bit else 2 * wb), 0.0
            why = f"torch AdamW keeps moments in {dtype}"
    split = f" / {world}" if shard_state > 1 else ""
    items.append(MemoryItem("gradients", trainable * grad_b / shard_state, f"{grad_b:g} bytes/param{split}"))
    items.append(MemoryItem("optimizer (AdamW m, v)", trainable * moments_b / shard_state,
                            f"{moments_b:g} bytes/param, {'8-bit optimizer' if eight_bit else why}{split}"))
    if master_b:
        items.append(MemoryItem("fp32 master weights", trainable * master_b / shard_state, f"4 bytes/param{split}"))
    beta = t.beta
    if beta > 0 and m.lora is None:
        items.append(MemoryItem("reference model", weights / shard_weights, f"beta={beta:g}: a frozen copy{sharded}"))
    elif beta > 0:
        notes.append("beta > 0 with LoRA: the reference is the base model with the adapter disabled (no copy)")
    return items, trainable


def _sequence(recipe: Recipe, notes: list[str]) -> tuple[int, int, int]:
    """(per-device batch, completion tokens, prompt + completion tokens)."""
    t = recipe.training
    per_device = t.per_device_train_batch_size
    completion = t.max_completion_length
    prompt = recipe.data.max_prompt_tokens
    if prompt is None:
        prompt = DEFAULT_PROMPT_TOKENS
        notes.append(f"data.max_prompt_tokens is not set: prompts assumed {DEFAULT_PROMPT_TOKENS} tokens")
    if recipe.data.images is not None:
        prompt = image_prompt_tokens(recipe, prompt, recipe.data.max_prompt_tokens is not None, notes)
    return per_device, completion, prompt + completion


def _training_items(recipe: Recipe, shape: ModelShape, dtype: str,
                    notes: list[str]) -> tuple[list[MemoryItem], float, float]:
    """Activations and log-prob tiles of one micro-batch; and activations with/without checkpointing."""
    ab = 4.0 if dtype == "float32" else 2.0  # activation bytes
    per_device, completion, seq = _sequence(recipe, notes)
    tokens = per_device * seq
    per_layer = shape.activation_values_per_token_layer() * ab * tokens
    eager = recipe.model.attn_implementation == "eager"
    scores = 2 * shape.heads * seq * seq * ab * per_device if eager else 0.0
    lora = recipe.model.lora
    dropout = (shape.lora_dropout_bytes_per_token_layer(lora.target_modules, ab) * tokens
               if lora is not None and lora.dropout > 0 else 0.0)
    full = (per_layer + scores + dropout) * shape.layers
    ckpt = shape.hidden * ab * tokens * shape.layers + per_layer + scores + dropout
    use_ckpt = recipe.training.checkpointing()
    chosen, other = (ckpt, full) if use_ckpt else (full, ckpt)
    items = [MemoryItem(
        "activations", chosen,
        f"{tokens:,} tokens/micro-batch, gradient checkpointing {'on' if use_ckpt else 'off'} "
        f"({'off' if use_ckpt else 'on'}: {other / GIB:.2f} GiB)" + (", eager attention" if eager else "")
        + (f", LoRA dropout copies {dropout * (1 if use_ckpt else shape.layers) / GIB:.2f} GiB" if dropout else ""),
        "training")]
    items.append(_logprob_item(recipe, shape, dtype, per_device * (seq if recipe.launch.spec.cpu_only else completion)))
    if lora is not None and recipe.launch.spec.cpu_only:
        # glibc malloc raises its mmap threshold as large blocks are freed, so a step's activations end up on the
        # heap, and the heap keeps them resident after backward. A full fine-tune's gradients reuse those pages; a
        # LoRA run has nothing that does, and its next peak lands beside them (benchmarks/micro/memory_plan.py:
        # SmolLM2 LoRA measured 1.34x this plan without this line, 1.06x with a fixed MALLOC_MMAP_THRESHOLD_).
        kept = chosen - dropout * (1 if use_ckpt else shape.layers)
        items.append(MemoryItem("freed activations kept by malloc", kept,
                                "host RAM only: glibc keeps a LoRA step's freed activations resident", "training"))
    return items, full, ckpt


def _logprob_item(recipe: Recipe, shape: ModelShape, dtype: str, rows: int) -> MemoryItem:
    """TRL 1.16's fused LM head scores tokens in tiles, never the full logits: on CUDA only the completion positions,
    elsewhere every position of the micro-batch.

    On the CPU the tile is folded by torch ops that keep about 7 fp32 copies alive. On CUDA a Triton kernel folds it
    in place, so one tile in the compute dtype is alive, beside the backward's fp32 gradient of the hidden states
    and, when the LM head trains (a full fine-tune), its fp32 weight gradient and that gradient cast back to the
    weights' dtype (scripts/gpu_check.sh measured the CUDA side: docs/performance.md, "GPU").
    """
    tile_rows, tile_cols = min(rows, TOKEN_TILE), min(shape.vocab, VOCAB_TILE)
    if recipe.launch.spec.cpu_only:
        return MemoryItem("log-prob tiles", LOGPROB_TILES_ALIVE * tile_rows * tile_cols * 4.0,
                          f"{LOGPROB_TILES_ALIVE} x {tile_rows:,} tokens x {tile_cols:,} vocab x 4 bytes "
                          "(TRL's fused LM head)", "training")
    compute = DTYPE_BYTES[dtype]
    total = tile_rows * tile_cols * compute + rows * shape.hidden * 4.0
    note = f"{tile_rows:,} tokens x {tile_cols:,} vocab x {compute:g} bytes (TRL's fused LM head, Triton)"
    lora = recipe.model.lora
    if lora is None or "lm_head" in (lora.modules_to_save or []):
        total += shape.vocab * shape.hidden * (4.0 + compute)
        note += f", the LM head's fp32 gradient {shape.vocab * shape.hidden * 4.0 / GIB:.2f} GiB"
    return MemoryItem("log-prob tiles", total, note, "training")


def _generation_items(recipe: Recipe, shape: ModelShape, world: int, dtype: str, gpu_gb: float | None,
                      notes: list[str]) -> list[MemoryItem]:
    """The generation KV cache (transformers) or vLLM's reservation (colocate); server mode counts nothing."""
    t, vllm = recipe.training, recipe.launch.vllm
    if vllm.mode == "off":
        _, _, seq = _sequence(recipe, [])
        gen_batch = t.generation_batch(world) // world
        kv = 2 * shape.layers * shape.kv_dim * (4.0 if dtype == "float32" else 2.0) * gen_batch * seq
        items = [MemoryItem("generation KV cache", kv, f"{gen_batch} sequences x {seq} tokens (transformers "
                            "generate)", "generation")]
        lora = recipe.model.lora
        if lora is not None and merge_rule(recipe)[0]:
            copy = shape.adapted_weight_params(lora.target_modules) * DTYPE_BYTES[dtype]
            items.append(MemoryItem("LoRA merge: kept base copy", copy, "the adapted base weights, kept while the "
                                    "adapter is merged for generation", "generation"))
        return items
    if vllm.mode == "colocate":
        util = vllm.gpu_memory_utilization
        if gpu_gb is not None:
            # TRL puts the engine to sleep (level 2: weights and KV cache released) for the training pass.
            asleep = bool(vllm.enable_sleep_mode)
            return [MemoryItem("vLLM (colocate)", util * gpu_gb * GIB, f"gpu_memory_utilization {util:g} x "
                               f"{gpu_gb:.1f} GiB" + (", released while training (enable_sleep_mode)" if asleep
                                                      else ""), "generation" if asleep else "static")]
        notes.append(f"vLLM colocate reserves {util:g} x the GPU's memory: not counted (GPU memory unknown; "
                     "pass --gpu-memory-gb)")
        return []
    notes.append(f"vLLM server mode: generation runs on {vllm.server_gpus} other GPU(s), not counted")
    return []
