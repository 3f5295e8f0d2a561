"""Tools and environments at run time: failures and timeouts become counted errors, async tools stay async,
environments play episodes, and several environments are routed by the `environment` column."""

from __future__ import annotations

import asyncio
import inspect
import json
import textwrap
import time
from pathlib import Path

import pytest

from grpo_cli.recipe.loader import load_recipe
from tests.conftest import run_cli

TOOLS = '''
import asyncio
import time


def divide(a: int, b: int) -> float:
    """Divide a by b.

    Args:
        a: numerator
        b: denominator
    """
    return a / b


def sleepy(seconds: float) -> str:
    """Sleep, then answer.

    Args:
        seconds: how long
    """
    time.sleep(seconds)
    return "awake"


async def shout(text: str, suffix: str) -> str:
    """Upper-case the text.

    Args:
        text: what to shout
        suffix: appended (bound by the recipe)
    """
    await asyncio.sleep(0)
    return text.upper() + suffix


async def stuck(text: str) -> str:
    """Never answers.

    Args:
        text: ignored
    """
    await asyncio.sleep(30)
    return text


def constant(x: int) -> int:
    """Always 7.

    Args:
        x: ignored
    """
    return 7
'''

ENVS = '''
class Vault:
    """A vault that opens with the row's code."""

    def __init__(self, greeting: str = "hi"):
        self.greeting = greeting
        self.code = None
        self.opened = False

    def reset(self, **kwargs) -> str:
        self.code = str(kwargs["code"])
        self.opened = False
        return f" {self.greeting}"

    def try_code(self, code: str) -> str:
        """Try a code.

        Args:
            code: the code to try
        """
        self.opened = code == self.code
        return "open" if self.opened else "closed"

    def get_reward(self) -> float:
        return 1.0 if self.opened else 0.0


class Echo:
    """Repeats what it hears."""

    def reset(self, **kwargs) -> None:
        self.heard = []

    def say(self, text: str) -> str:
        """Say something.

        Args:
            text: the words
        """
        self.heard.append(text)
        return text


def opened(completions, environments, **kwargs):
    return [1.0 if getattr(env, "opened", False) else 0.0 for env in environments]
'''


def _setup(tmp_path: Path, extra: str, rows: list[dict], rewards: str = "[{name: accuracy}]") -> Path:
    (tmp_path / "tools.py").write_text(TOOLS, encoding="utf-8")
    (tmp_path / "envs.py").write_text(ENVS, encoding="utf-8")
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    text = textwrap.dedent("""
        model: {name_or_path: "bundled:tiny-tool"}
        data:
          files: data.jsonl
          prompt: {template: "{question}", chat: true}
        rewards: REWARDS
        training: {num_generations: 2, per_device_train_batch_size: 2}
        launch: {profile: cpu}
        """).replace("REWARDS", rewards) + textwrap.dedent(extra)
    path = tmp_path / "recipe.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _load(path: Path):
    from grpo_cli.recipe import load_recipe

    return load_recipe(path)


ROWS = [{"question": "open the vault", "answer": "open", "code": "42"}]


def test_a_raising_tool_is_a_counted_failure_the_model_sees(tmp_path: Path) -> None:
    from grpo_cli.tools import load_toolset
    from grpo_cli.tools.episodes import call_tool

    toolset = load_toolset(_load(_setup(tmp_path, "tools: [tools.py:divide]\n", ROWS)))
    divide = toolset.tools[0]
    name, result, failed = call_tool({"divide": divide}, {"type": "function", "function": {
        "name": "divide", "arguments": {"a": 1, "b": 0}}})
    assert (name, failed) == ("divide", True)
    assert result == {"error": "division by zero"}  # what TRL hands the model
    assert call_tool({"divide": divide}, {"type": "function", "function": {
        "name": "divide", "arguments": {"a": 6, "b": 3}}}) == ("divide", 2.0, False)
    stats = toolset.summary()["divide"]
    assert (stats.calls, stats.failures, stats.timeouts) == (2, 1, 0)
    assert "ZeroDivisionError" in (stats.last_error or "")


def test_a_hanging_tool_times_out(tmp_path: Path) -> None:
    from grpo_cli.tools import ToolTimeout, load_toolset

    recipe = _load(_setup(tmp_path, """
        tools:
          - {function: tools.py:sleepy, timeout: 0.2}
          - {function: tools.py:stuck, timeout: 0.2}
        """, ROWS))
    sleepy, stuck = load_toolset(recipe).tools
    started = time.perf_counter()
    try:
        sleepy(seconds=20)
        raise AssertionError("no timeout")
    except ToolTimeout as exc:
        assert "sleepy did not return within 0.2 s" in str(exc)
    assert sleepy(seconds=0) == "awake"
    try:
        asyncio.run(stuck(text="x"))
        raise AssertionError("no timeout")
    except ToolTimeout as exc:
        assert "stuck did not return within 0.2 s" in str(exc)
    assert time.perf_counter() - started < 15  # nowhere near the 20 s and 30 s the tools asked for
    assert sleepy.tool_stats.timeouts == 1 and sleepy.tool_stats.calls == 2


def test_an_async_tool_stays_async_with_its_bound_param_hidden(tmp_path: Path) -> None:
    from transformers.utils import get_json_schema

    from grpo_cli.tools import load_toolset

    recipe = _load(_setup(tmp_path, "tools: [{function: tools.py:shout, params: {suffix: '!'}}]\n", ROWS))
    shout = load_toolset(recipe).tools[0]
    assert inspect.iscoroutinefunction(shout)  # TRL runs it on its event loop only if this holds
    assert asyncio.run(shout(text="hey")) == "HEY!"
    schema = get_json_schema(shout)["function"]
    assert schema["name"] == "shout"
    assert list(schema["parameters"]["properties"]) == ["text"]  # the model never sees `suffix`


def test_dry_run_attributes_failures_and_flags_broken_tools(tmp_path: Path) -> None:
    path = _setup(tmp_path, """
        tools:
          - tools.py:divide
          - {function: tools.py:sleepy, timeout: 0.2}
          - tools.py:constant
        """, ROWS)
    examples = tmp_path / "examples.jsonl"
    examples.write_text('{"tool": "divide", "arguments": {"a": 1, "b": 0}}\n'
                        '{"tool": "sleepy", "arguments": {"seconds": 5}}\n', encoding="utf-8")
    result = run_cli("check-tools", path, "--examples", examples, "--no-model", "--json")
    assert result.exit_code == 1, result
    report = json.loads(result.output)
    errors = {c["tool"]: c for c in report["calls"] if c["error"]}
    assert "ZeroDivisionError" in errors["divide"]["error"]
    assert errors["sleepy"]["timeout"] is True
    flags = " ".join(report["flags"])
    assert "divide failed on all 1 calls" in flags
    assert "sleepy failed on all 1 calls" in flags
    assert "constant returned the same value (7) for 3 different argument sets" in flags
    assert report["schemas"]["divide"]["function"]["parameters"]["required"] == ["a", "b"]


def test_examples_for_a_tool_the_recipe_lacks_are_refused(tmp_path: Path) -> None:
    path = _setup(tmp_path, "tools: [tools.py:divide]\n", ROWS)
    examples = tmp_path / "examples.jsonl"
    examples.write_text('{"tool": "divid", "arguments": {"a": 1, "b": 2}}\n', encoding="utf-8")
    result = run_cli("check-tools", path, "--examples", examples, "--no-model")
    assert result.exit_code == 2 and "Traceback" not in result.output, result
    flat = " ".join(result.output.split())
    assert "examples for 'divid'" in flat and "Did you mean `divide`?" in flat


def test_environment_episode_reset_tools_and_rewards(tmp_path: Path) -> None:
    path = _setup(tmp_path, """
        environment: {factory: envs.py:Vault, params: {greeting: hello}}
        """, ROWS, rewards="[{function: envs.py:opened}]")
    examples = tmp_path / "examples.jsonl"
    examples.write_text('{"tool": "try_code", "arguments": {"code": "42"}}\n', encoding="utf-8")
    result = run_cli("check-tools", path, "--examples", examples, "--no-model", "--json")
    assert result.exit_code == 0, result
    episode = json.loads(result.output)["episodes"][0]
    assert episode["environment"] == "Vault"
    assert episode["observation"] == " hello"  # reset got the row (its code) and the constructor params
    assert [c["result"] for c in episode["calls"]] == ["'open'"]
    assert episode["rewards"] == {"Vault.get_reward": 1.0, "opened": 1.0}  # the reward read `environments`


def test_several_environments_are_routed_by_the_environment_column(tmp_path: Path) -> None:
    from grpo_cli.tools import load_toolset
    from grpo_cli.tools.episodes import start_episodes

    rows = [{"question": "q1", "answer": "a", "code": "1", "environment": "vault"},
            {"question": "q2", "answer": "b", "code": "2", "environment": "echo"},
            {"question": "q3", "answer": "c", "code": "3", "environment": "vault"}]
    recipe = _load(_setup(tmp_path, "environment: {vault: envs.py:Vault, echo: envs.py:Echo}\n", rows))
    toolset = load_toolset(recipe)
    kwargs = toolset.trainer_kwargs()
    assert sorted(kwargs["environment_factory"]) == ["echo", "vault"]  # TRL's dict form
    prompts = [[{"role": "user", "content": r["question"]}] for r in rows]
    episodes = start_episodes(toolset, prompts, rows)
    assert [type(e.environment).__name__ for e in episodes] == ["Vault", "Echo", "Vault"]
    assert [e.environment.code for e in (episodes[0], episodes[2])] == ["1", "3"]
    assert episodes[0].prompt[-1]["content"] == "q1 hi"  # Vault's reset observation is appended
    names = [[t.__name__ for t in toolset.tools_for(e.environment)] for e in episodes]
    assert names == [["try_code"], ["say"], ["try_code"]]  # each rollout sees only its environment's tools
    result = run_cli("check-tools", recipe.source, "--no-model", "--json")
    report = json.loads(result.output)
    assert sorted(e["environment"] for e in report["episodes"]) == ["echo", "vault"]


SIGALRM_TOOL = '''
import signal
import time


def timed_square(x: int) -> int:
    """Square a number under its own alarm, as TRL's agent example times its code.

    Args:
        x: the number
    """
    def expired(signum, frame):
        raise TimeoutError("own alarm")

    signal.signal(signal.SIGALRM, expired)
    signal.alarm(5)
    try:
        return x * x
    finally:
        signal.alarm(0)


def sleeper(seconds: float) -> str:
    """Sleep.

    Args:
        seconds: how long
    """
    time.sleep(seconds)
    return "done"
'''


def test_a_tool_using_sigalrm_works_under_the_default_timeout(tmp_path: Path) -> None:
    from grpo_cli.tools import ToolTimeout, load_toolset

    (tmp_path / "tools.py").write_text(SIGALRM_TOOL, encoding="utf-8")
    (tmp_path / "data.jsonl").write_text('{"question": "1"}\n', encoding="utf-8")
    (tmp_path / "recipe.yaml").write_text(textwrap.dedent("""
        model: {name_or_path: bundled:tiny-tool}
        data: {files: data.jsonl, prompt: {column: question, chat: true}}
        rewards: [{name: format}]
        tools: [tools.py:timed_square, {function: tools.py:sleeper, timeout: 0.3}]
        launch: {profile: cpu}
        """), encoding="utf-8")
    square, sleeper = load_toolset(load_recipe(tmp_path / "recipe.yaml")).tools
    assert square(x=7) == 49 and square.tool_stats.failures == 0
    started = time.perf_counter()
    with pytest.raises(ToolTimeout):
        sleeper(seconds=20)  # the timeout still interrupts a blocking call on the main thread
    assert time.perf_counter() - started < 10
    assert sleeper(seconds=0) == "done"
