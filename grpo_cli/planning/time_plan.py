"""The time plan: how long a steady optimizer step takes, how long the run, and what it costs, before a model loads.

A step is planned from a step measured before (grpo_cli/step_rates.py): the nearest row, on this machine when
there is one (this user's own runs first, then the shipped table), with the same generation backend. Each part
of the row is fixed seconds plus seconds per completion (`RateRow.fixed`, fitted from steps at two batch sizes:
a tiny model's step is mostly overhead that does not grow with its batch); the per-completion seconds grow with
the recipe's completions, and both are scaled by the rest of the work the part grows with:

- generation: the tokens to decode per batch (x parameters, when the model differs): for transformers, with a
  row that recorded its completion lengths, the expected longest completion of a batch of the recipe's size
  (planning/decode_steps.py); otherwise max_completion_length;
- training (log-probabilities, forward, backward, optimizer): tokens per completion x FLOPs per token
  (6 x parameters, 4 x with LoRA: no weight gradients) against the row's, i.e. the row's achieved FLOP rate,
  x the share of completions that train (all, or with the zero-advantage skip the share the row's run
  trained: a group whose completions all score alike skips forward and backward);
- weight sync (vLLM): parameters; rewards: as measured (a built-in whose rate the table has, such as the
  sandboxed `code`, from that rate); the rest of the step: as measured.

The load average is shown, not used: scaling rows by it planned no better on a shared machine. Each part carries
the row it came from. Where no row has the backend and device (vLLM on a GPU, say), the plan says unknown rather
than guess; a row from another machine is used only as an assumption and says so. The whole run is steps x the
step plus evaluation (before/after and `eval.every_steps`, at the row's generation rate).
Standard library and pydantic only: `grpo validate` plans without importing torch.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from grpo_cli.hardware import machine, visible_gpus
from grpo_cli.planning.decode_steps import decode_steps
from grpo_cli.planning.memory import memory_plan
from grpo_cli.planning.sampling_choice import shares_prompt
from grpo_cli.step_rates import (
    PARTS,
    RateRow,
    Seconds,
    StepEstimate,
    StepShape,
    TimePlan,
    candidate_rows,
    shipped_reward_rates,
)
from grpo_cli.threads import load_average

if TYPE_CHECKING:
    from grpo_cli.recipe.schema import Recipe

SCALE_LIMIT = 10.0
"""A row is scaled to a model at most this many times larger or smaller: a tiny model's step is overhead, not
FLOPs (the demo's 0.1M-parameter row scaled to SmolLM2-135M planned 3x its measured step), so beyond it the plan
says unknown."""
BACKENDS = {"off": "transformers", "auto": "transformers", "colocate": "vllm-colocate", "server": "vllm-server",
            "async": "vllm-async"}


def recipe_shape(recipe: Recipe, params: int, threads: int | None, device: str) -> StepShape:
    """The step this recipe runs in each process, as the rate rows describe a measured one (`device`: cpu or
    gpu, where it trains here)."""
    t, data = recipe.training, recipe.data
    files = data.files.get(data.split) if isinstance(data.files, dict) else data.files
    return StepShape(
        model=recipe.model.name_or_path, params=params, lora=recipe.model.lora is not None,
        backend=BACKENDS[recipe.launch.vllm.mode], processes=recipe.launch.world_size, threads=threads,
        completions=t.per_device_train_batch_size * t.gradient_accumulation_steps,
        completion_tokens=t.max_completion_length, prompt_tokens=data.max_prompt_tokens,
        data=str(data.dataset or files or (recipe.environment.factory if recipe.environment else "")),
        rewards=sorted(e.name or e.function or e.model or "" for e in recipe.rewards),
        device=device, trained=None if recipe.sampling.skip_zero_advantage else 1.0,
        prompt_share=1 / t.num_generations if shares_prompt(recipe) else 1.0)


def planned_share(shape: StepShape, row: RateRow) -> float | None:
    """The share of completions the plan assumes train: all without the zero-advantage skip; with it, the
    share the row's run trained (the same model and data skip alike), unknown when the row did not record it."""
    return shape.trained if shape.trained is not None else row.shape.trained


def _trained(shape: StepShape, row: RateRow) -> tuple[float, str]:
    """The completions that train against the row's, as a factor on its per-completion training seconds (the
    fixed ones, such as the optimizer step, run whatever skips), and what was assumed: a group whose completions
    all scored alike skips forward and backward, so a row measured with the skip trained only its share (a row
    that did not record it is taken as measured)."""
    measured, planned = row.shape.trained, planned_share(shape, row)
    if measured is None or planned is None:
        return 1.0, ""
    if measured <= 0:
        return 1.0, "the row trained no completion (every group skipped), so training is planned as measured"
    if shape.trained is None and measured >= 1.0:
        return 1.0, "every completion training, as in the row's run (the zero-advantage skip may skip some)"
    if shape.trained is None:
        return 1.0, f"the zero-advantage skip training {planned:.2f} of the completions, as in the row"
    if abs(planned - measured) < 1e-9:
        return 1.0, ""
    return planned / measured, f"{planned:.2f} of the completions training (the row's run trained {measured:.2f})"


def choose_row(shape: StepShape, here: str, rows: list[RateRow]) -> RateRow | None:
    """The measured step nearest this one: same device and backend and a model within SCALE_LIMIT x its size
    required; then this machine, model size, processes, LoRA, data; this user's runs before the shipped table
    even at another thread count (grpo picks the threads by the load when a run starts, so a run here says more
    about this machine now than a thread count does); then threads; newer rows first."""
    same = [r for r in rows if r.shape.device == shape.device and r.shape.backend == shape.backend
            and 1 / SCALE_LIMIT <= max(r.shape.params, 1) / max(shape.params, 1) <= SCALE_LIMIT]

    def distance(r: RateRow) -> float:
        s = r.shape
        return ((r.machine != here) * 100 + abs(math.log(max(s.params, 1) / max(shape.params, 1))) * 10
                + (s.processes != shape.processes) * 5 + (s.lora != shape.lora) * 2 + (s.data != shape.data)
                + (r.run_dir is None) * 0.6 + (s.threads != shape.threads) * 0.5)

    return min(reversed(same), key=distance, default=None)  # reversed: the newest of equals (rows are appended)


def _prompt_tokens(shape: StepShape, row: RateRow) -> tuple[float, str]:
    """Prompt tokens per completion: measured on the same data, else data.max_prompt_tokens, else the row's."""
    measured = row.shape.prompt_tokens or 0.0
    if shape.data == row.shape.data or shape.prompt_tokens is None:
        return measured, "" if shape.data == row.shape.data else ", prompts assumed as long as the row's"
    return float(shape.prompt_tokens), ", prompts at data.max_prompt_tokens"


def _factors(shape: StepShape, row: RateRow) -> dict[str, tuple[float, float, str]]:
    """Per part: the completions against the row's (what its per-completion seconds grow with), the rest of
    the work against the row's (tokens, model size, FLOPs per token; fixed and per-completion seconds alike),
    and what was assumed to say so."""
    r = row.shape
    same_model = r.model == shape.model and r.params == shape.params
    size = 1.0 if same_model else shape.params / max(r.params, 1)
    scaled = "" if same_model else f", scaled from {r.model} ({r.params / 1e6:,.1f}M params)"
    prompt, prompt_note = _prompt_tokens(shape, row)
    per_completion = (prompt + shape.completion_tokens) / max((r.prompt_tokens or 0.0) + r.completion_tokens, 1.0)
    shared = shape.token_share(prompt) / r.token_share()  # the tokens a completion trains: per completion, not fixed
    if shape.prompt_share != r.prompt_share:
        prompt_note += (f", each prompt's forward shared by {round(1 / shape.prompt_share)} completions"
                        if shape.prompt_share < 1 else ", a prompt forward per completion")
        prompt_note += f" (the row's: {'shared' if r.prompt_share < 1 else 'one per completion'})"
    flops = (4 if shape.lora else 6) * shape.params / ((4 if r.lora else 6) * max(r.params, 1))
    batch = shape.completions / max(r.completions, 1)
    decode = shape.completion_tokens / max(r.completion_tokens, 1)
    generation = scaled
    if (longest := decode_steps(row, shape)) is not None:  # transformers decodes a batch until its longest ends
        decode, generation = longest.factor, f", {longest.how(row, shape)}{scaled}"
    trained, share_note = _trained(shape, row)
    training = scaled + prompt_note + (f", {share_note}" if share_note else "")
    return {"generation": (batch, decode * size, generation), "training": (batch * trained * shared,
                                                                       per_completion * flops,
                                                                       training),
            "weight_sync": (1.0, size, scaled), "reward": (batch, 1.0, ""), "other": (batch, 1.0, "")}


def _reward(shape: StepShape, row: RateRow, factor: float, reward_rates: dict[str, float],
            assumed: str) -> tuple[Seconds | None, str]:
    """The rewards' seconds: the row's when it scored the same rewards, else the table's rates per completion."""
    measured = row.seconds.get("reward")
    if shape.rewards == row.shape.rewards and measured is not None:
        return measured.scaled(factor), assumed + row.origin()
    if all(name in reward_rates for name in shape.rewards):
        total = sum(shape.completions / reward_rates[name] for name in shape.rewards)
        return (Seconds(mean=total, low=total, high=total),
                "rewards/s measured per built-in (benchmarks/rewards.py on 2 cores, 2026-11-23)")
    unknown = [n for n in shape.rewards if n not in reward_rates]
    return None, f"unknown: {', '.join(unknown)} not measured yet (one `grpo train` here measures it)"


def _assumed(shape: StepShape, row: RateRow, here: str) -> str:
    """What differs between the row's step and this one that the plan does not model, as a source's prefix."""
    assumed = "" if row.machine == here else "assumed, measured on another machine: "
    if shape.threads != row.shape.threads and row.machine == here:
        assumed += f"measured with {row.shape.threads} torch thread(s), {shape.threads} planned: "
    if shape.processes != row.shape.processes:
        assumed += f"measured with {row.shape.processes} process(es), {shape.processes} planned, communication not " \
                   "counted: "
    return assumed


def _growth(row: RateRow, part: str, batch: float) -> tuple[float, str]:
    """How many times the row's part this many times its completions takes: its fixed share stays, the rest
    grows with them; and how that was fitted, when the batch differs."""
    share = row.fixed_share(part)
    if abs(batch - 1.0) < 1e-9 or part not in row.fixed:
        return share + (1 - share) * batch, ""
    seconds, trained = row.seconds[part].mean, row.shape.trained if part == "training" else None
    per = (seconds - row.fixed[part]) / max(row.shape.completions * (trained or 1.0), 1e-9)
    return share + (1 - share) * batch, (f"{part} {row.fixed[part]:.3g} s fixed + {per:.3g} s per completion"
                                         f"{' trained' if trained else ''} ({row.fit})")


def plan_step(shape: StepShape, here: str, rows: list[RateRow], reward_rates: dict[str, float]) -> list[StepEstimate]:
    """Each part of the steady step, from the nearest row: its fixed seconds and its seconds per completion,
    each scaled by the rest of the work; [] when no row has this device and backend."""
    row = choose_row(shape, here, rows)
    return [] if row is None else _plan_from(shape, row, here, reward_rates)


def _plan_from(shape: StepShape, row: RateRow, here: str, reward_rates: dict[str, float]) -> list[StepEstimate]:
    """Each part of the steady step, scaled from `row`."""
    assumed = _assumed(shape, row, here)
    estimates = []
    for part, (batch, work, how) in _factors(shape, row).items():
        growth, fitted = _growth(row, part, batch)
        measured = row.seconds.get(part)
        seconds, source = (measured.scaled(growth * work) if measured else None), assumed + row.origin()
        if part == "reward":
            seconds, source = _reward(shape, row, growth * work, reward_rates, assumed)
        how = ", ".join(h for h in (fitted, how.lstrip(", ")) if h)
        fixed = measured.mean * row.fixed_share(part) * work if measured and part != "reward" else None
        estimates.append(StepEstimate(part=part, seconds=seconds, source=source, how=how, fixed=fixed))
    return sorted(estimates, key=lambda e: PARTS.index(e.part))


def _evaluation(recipe: Recipe, shape: StepShape, step: list[StepEstimate], eval_prompts: int | None,
                steps: int | None) -> tuple[Seconds | None, str]:
    """Held-out sampling over the run: before/after and every eval.every_steps, at the row's generation rate."""
    ev = recipe.eval
    count = (2 if ev.before_after else 0) + ((steps // ev.every_steps) if ev.every_steps and steps else 0)
    if not count:
        return None, ""
    generation = next((e.seconds for e in step if e.part == "generation"), None)
    prompts = ev.max_samples if ev.max_samples and (eval_prompts is None or ev.max_samples < eval_prompts) \
        else eval_prompts
    if generation is None or prompts is None:
        return None, f"{count} evaluation(s), time unknown (the number of held-out prompts is not known here)"
    tokens = ev.max_new_tokens or shape.completion_tokens
    share = prompts * ev.num_generations * tokens / max(shape.completions * shape.completion_tokens, 1)
    return (generation.scaled(share * count), f"{count} evaluation(s) of {prompts} prompts x {ev.num_generations}, "
            "at the training step's generation rate")


def plan_time(recipe: Recipe, *, steps: int | None, eval_prompts: int | None, threads: int | None,
              gpus: list[str] | None = None) -> TimePlan:
    """The recipe's time plan on this machine (`gpus`: the visible GPUs' names; looked up when None)."""
    if gpus is None:
        gpus = [] if recipe.launch.spec.cpu_only else visible_gpus()
    here = machine(gpus)
    vllm = recipe.launch.vllm
    devices = 1 if recipe.launch.spec.cpu_only else recipe.launch.world_size + (vllm.server_gpus if
                                                                                 vllm.mode in ("server", "async")
                                                                                 else 0)
    plan = TimePlan(machine=here, steps=steps, price_per_hour=recipe.launch.price_per_hour, devices=devices,
                    load=load_average())
    memory, why = memory_plan(recipe, gpu_memory_gb=None, world_size=1)
    if memory is None:
        plan.unknown = f"the model's size is unknown ({why})"
        return plan
    # without a visible GPU the run trains on this CPU, whatever the profile (a ddp run uses gloo)
    plan.shape = shape = recipe_shape(recipe, memory.params, threads, "gpu" if gpus else "cpu")
    row = choose_row(shape, here, candidate_rows(here))
    if row is not None:  # the parts, and the share of completions the plan assumes train
        plan.parts = _plan_from(shape, row, here, shipped_reward_rates())
        plan.shape = shape.model_copy(update={"trained": planned_share(shape, row)})
    if not plan.parts:
        plan.unknown = (f"no measured {shape.backend} step on a {shape.device} of a model within {SCALE_LIMIT:g}x "
                        f"its size ({shape.params / 1e6:,.1f}M parameters; after one `grpo train` here, there is)")
        return plan
    plan.evaluation, plan.evaluation_note = _evaluation(recipe, shape, plan.parts, eval_prompts, steps)
    return plan


def duration(seconds: float) -> str:
    """0.106 s / 2.1 s / 48 s / 7 min / 3.2 h: readable at every scale."""
    if seconds < 1:
        return f"{seconds:.2g} s"
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def span(seconds: Seconds) -> str:
    """`~2.1 s (1.8–2.6 s)`; one figure when the range is a point."""
    if abs(seconds.high - seconds.low) < 0.05 * max(seconds.mean, 1e-9):
        return f"~{duration(seconds.mean)}"
    return f"~{duration(seconds.mean)} ({duration(seconds.low)}–{duration(seconds.high)})"


def span_of(money: Seconds) -> str:
    """A cost as `~14.1 (12.0–16.3)`, one figure when the range is a point."""
    if abs(money.high - money.low) < 0.05 * max(money.mean, 1e-9):
        return f"~{money.mean:,.3g}"
    return f"~{money.mean:,.3g} ({money.low:,.3g}–{money.high:,.3g})"


def plan_lines(plan: TimePlan) -> dict[str, str]:
    """The plan's time lines: the steady step and its parts with their source, the run, and its cost."""
    step = plan.step
    if step is None:
        return {"time per step": f"unknown: {plan.unknown or 'no part could be planned'}"}
    parts = ", ".join(f"{p.part} {duration(p.seconds.mean) if p.seconds else 'unknown'}" for p in plan.parts
                      if p.seconds is None or p.seconds.high > 0)
    sources = list(dict.fromkeys([*(p.source for p in plan.parts), *(p.how for p in plan.parts if p.how)]))
    at_least = f"at least {span(step)}" if plan.missing else span(step)
    here = f"; load now {plan.load:.1f}" if plan.load is not None else ""
    lines = {"time per step": f"{at_least} steady ({parts}); rates: {'; '.join(sources)}{here}"}
    run = plan.run
    if run is not None:
        evaluation = f" + {plan.evaluation_note} {span(plan.evaluation)}" if plan.evaluation else (
            f" ({plan.evaluation_note})" if plan.evaluation_note else "")
        lines["time for the run"] = (f"{span(run)}: {plan.steps} steps x the steady step{evaluation}; model loading "
                                     "and the first step's warm-up not counted")
    cost = plan.cost
    if cost is not None and plan.price_per_hour is not None:
        unit = "GPU" if plan.shape is not None and plan.shape.device == "gpu" else "machine"
        lines["cost"] = (f"{span_of(cost)} at {plan.price_per_hour:g} per device-hour x {plan.devices} "
                         f"{unit}{'s' if plan.devices != 1 else ''}")
    return lines
