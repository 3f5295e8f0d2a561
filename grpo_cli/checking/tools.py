"""`grpo check-tools`: show what the model sees of each tool and call every tool before any GPU time.

For each tool (standalone or an environment method) it builds the JSON schema transformers will
put in the prompt, calls the tool with example arguments (from a JSONL file, or generated from the
schema: three variants per tool), times each call and attributes every exception and timeout. Each
environment plays one scripted episode: construct, `reset(**first row)`, one call of each method,
`get_reward()` if it has one, then the recipe's rewards with `environments=[env]` as TRL passes it.
A tool that fails on every call, or returns the same thing for different arguments, is flagged.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_cli.checking.tool_examples import example_arguments
from grpo_cli.checking.tool_preview import preview
from grpo_cli.data import prepare_data
from grpo_cli.errors import GrpoError, did_you_mean
from grpo_cli.paths import read_text
from grpo_cli.rewards import call_reward, load_reward
from grpo_cli.rewards.calling import run_awaitable
from grpo_cli.tools.guard import ToolTimeout
from grpo_cli.tools.loading import Toolset, environment_methods, load_toolset, make_environment

if TYPE_CHECKING:
    from grpo_cli.recipe.schema import Recipe


@dataclass
class CallRecord:
    tool: str
    arguments: dict[str, Any]
    seconds: float
    result: str = ""
    error: str = ""
    timeout: bool = False
    environment: str | None = None


@dataclass
class EpisodeRecord:
    environment: str
    observation: str = ""
    calls: list[CallRecord] = field(default_factory=list)
    rewards: dict[str, Any] = field(default_factory=dict)
    error: str = ""


@dataclass
class DryRun:
    """Everything check-tools found; `ok` is False when a tool is flagged or an episode broke."""

    schemas: dict[str, Any] = field(default_factory=dict)
    schema_errors: dict[str, str] = field(default_factory=dict)
    prompt_preview: str = ""
    parse_check: str = ""
    calls: list[CallRecord] = field(default_factory=list)
    episodes: list[EpisodeRecord] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.flags or self.schema_errors or any(e.error for e in self.episodes))

    def to_json(self) -> str:
        return json.dumps(asdict(self) | {"ok": self.ok}, indent=2, default=str)


def call_once(tool: Any, arguments: dict[str, Any], environment: str | None = None) -> CallRecord:
    """Call a (guarded) tool as TRL does, timing it and catching what it raises."""
    import asyncio
    import inspect

    started = time.perf_counter()
    record = CallRecord(tool.__name__, arguments, 0.0, environment=environment)
    try:
        result = tool(**arguments)
        if inspect.isawaitable(result):
            result = asyncio.run(_await(result))
        record.result = repr(result)[:200]
    except ToolTimeout as exc:
        record.error, record.timeout = str(exc), True
    except Exception as exc:
        record.error = f"{type(exc).__name__}: {exc}"[:300]
    record.seconds = time.perf_counter() - started
    return record


async def _await(awaitable: Any) -> Any:
    return await awaitable


def _schemas(toolset: Toolset, probes: dict[str | None, Any], report: DryRun) -> dict[str, Any]:
    """name -> callable for every tool, with its JSON schema (or the error transformers raises) in the report."""
    from transformers.utils import get_json_schema

    callables: dict[str, Any] = {t.__name__: t for t in toolset.tools}
    for name, env in probes.items():
        for method in environment_methods(type(env)):
            callables[f"{name}.{method}" if name else method] = getattr(env, method)
    for key, func in callables.items():
        try:
            report.schemas[key] = get_json_schema(func)
        except Exception as exc:  # transformers raises its own exception types for missing hints/docs
            report.schema_errors[key] = f"{type(exc).__name__}: {exc}"
    return callables


def _load_examples(path: Path | None) -> dict[str, list[dict[str, Any]]]:
    if path is None:
        return {}

    text = read_text(path, what="examples file", where="--examples",
                     missing_fix='Give a JSONL file of {"tool": "add", "arguments": {"a": 1, "b": 2}} lines.')
    out: dict[str, list[dict[str, Any]]] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            out.setdefault(row["tool"], []).append(dict(row.get("arguments") or {}))
        except (ValueError, KeyError, TypeError) as exc:
            raise GrpoError(f"line {n} of {path} is not a tool example ({exc})", where="--examples",
                            fix='Each line: {"tool": "<name>", "arguments": {...}}.') from None
    return out


def _flag(report: DryRun) -> None:
    by_tool: dict[str, list[CallRecord]] = {}
    for call in report.calls + [c for e in report.episodes for c in e.calls]:
        by_tool.setdefault(call.tool, []).append(call)
    for tool, calls in by_tool.items():
        ok = [c for c in calls if not c.error]
        if not ok:
            report.flags.append(f"{tool} failed on all {len(calls)} calls (last: {calls[-1].error})")
        elif len(ok) >= 2 and len({c.result for c in ok}) == 1 and len({json.dumps(c.arguments, sort_keys=True,
                                                                                  default=str) for c in ok}) > 1:
            report.flags.append(f"{tool} returned the same value ({ok[0].result}) for {len(ok)} different "
                                "argument sets: the model cannot learn anything from it")


def dry_run(recipe: Recipe, *, examples: Path | None = None, with_model: bool = True) -> DryRun:
    """The whole dry run; user code is imported, the model's tokenizer (not its weights) is loaded."""
    report = DryRun()
    toolset = load_toolset(recipe)
    if toolset is None:
        raise GrpoError("the recipe has no `tools` and no `environment`", where="tools",
                        fix="Add a `tools:` list or an `environment:` (see docs/tools.md).")
    given = _load_examples(examples)
    probes = {name: make_environment(toolset, name) for name in toolset.environments}
    callables = _schemas(toolset, probes, report)
    unknown = sorted(set(given) - set(report.schemas))
    if unknown:
        guess = did_you_mean(unknown[0], list(report.schemas))
        raise GrpoError(f"{examples} has examples for {', '.join(map(repr, unknown))}, which the recipe does not "
                        "define as a tool or environment method", where="--examples",
                        fix=(f"Did you mean `{guess}`? " if guess else "")
                        + f"The recipe's tools: {', '.join(sorted(report.schemas)) or 'none'}.")
    rows = _first_rows(recipe, toolset)
    for tool in toolset.tools:
        schema = report.schemas.get(tool.__name__)
        arg_sets = given.get(tool.__name__) or ([example_arguments(schema, v) for v in range(3)] if schema else [])
        report.calls += [call_once(tool, args) for args in arg_sets]
    for name in toolset.environments:
        report.episodes.append(_episode(recipe, toolset, name, rows.get(name, {}), given, report))
    _flag(report)
    if with_model:
        preview(recipe, toolset, list(callables.values()), rows, report)
    return report


def _first_rows(recipe: Recipe, toolset: Toolset) -> dict[str | None, dict[str, Any]]:
    """The first mapped training row (what TRL hands to reset) for each environment (routed by `environment`)."""
    out: dict[str | None, dict[str, Any]] = {}
    train = prepare_data(recipe).train
    for row in train.select(range(min(len(train), 500))):
        key = row.get("environment") if toolset.routed else None
        out.setdefault(key, row)
    return out


def _episode(recipe: Recipe, toolset: Toolset, name: str | None, row: dict[str, Any],
             given: dict[str, list[dict[str, Any]]], report: DryRun) -> EpisodeRecord:
    """construct -> reset(**row) -> each method once -> get_reward -> the recipe's rewards."""
    label = name or toolset.classes[name].__name__
    record = EpisodeRecord(label)
    try:
        env = make_environment(toolset, name)
        kwargs = {k: v for k, v in row.items() if k != "environment"} if toolset.routed else dict(row)
        observation = env.reset(**kwargs)
        record.observation = "" if observation is None else str(observation)[:300]
    except GrpoError as exc:  # the constructor or reset raised, exited or timed out (tools/lifecycle.py)
        record.error = exc.problems[0].what
        return record
    transcript: list[dict[str, Any]] = []
    for method in environment_methods(type(env)):
        func = getattr(env, method)
        schema = report.schemas.get(f"{name}.{method}" if name else method)
        args = (given.get(method) or [example_arguments(schema, 0) if schema else {}])[0]
        call = call_once(func, args, environment=label)
        record.calls.append(call)
        transcript += [{"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": method, "arguments": args}}]},
            {"role": "tool", "name": method, "content": call.error or call.result}]
    transcript.append({"role": "assistant", "content": str(row.get("answer", ""))})
    record.rewards = _episode_rewards(recipe, env, row, transcript)
    failed = record.rewards.get(f"{type(env).__name__}.get_reward")
    if isinstance(failed, str) and failed.startswith("error: "):
        record.error = failed.removeprefix("error: ")  # training would stop here too
    return record


def run_awaitable_if(value: Any) -> Any:
    """An async get_reward's value (awaited), else the value itself."""
    import inspect

    return run_awaitable(value) if inspect.isawaitable(value) else value


def _episode_rewards(recipe: Recipe, env: Any, row: dict[str, Any], transcript: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if callable(getattr(env, "get_reward", None)):
        try:
            out[f"{type(env).__name__}.get_reward"] = run_awaitable_if(env.get_reward())
        except Exception as exc:  # GrpoError: raised, exited or timed out (tools/lifecycle.py)
            what = exc.problems[0].what if isinstance(exc, GrpoError) else f"{type(exc).__name__}: {exc}"
            out[f"{type(env).__name__}.get_reward"] = f"error: {what}"
    prompt = [{"role": "user", "content": str(row.get("prompt", ""))}]
    columns = {k: [v] for k, v in row.items() if k != "prompt"}
    for entry in recipe.rewards:
        func = load_reward(entry, recipe.base_dir)
        if isinstance(func, str):
            continue
        try:
            out[entry.label] = call_reward(func, prompts=[prompt], completions=[transcript], completion_ids=[[]],
                                           trainer_state=None, environments=[env], **columns)[0]
        except Exception as exc:
            out[entry.label] = f"error: {type(exc).__name__}: {exc}"
    return out
