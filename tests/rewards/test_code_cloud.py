"""E2B and Morph Cloud backends of the `code` reward (issue 22): plain HTTP, no SDK.

Both are hosted services behind an API key and the test machine reaches no network beyond package registries,
so no live call is made here (docs/rewards.md says the live path is unverified). What is tested is what needs no
service: validate's checks of the settings, the error when the service cannot be reached, and the runner each
test executes inside the sandbox, run here by a real Python.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from grpo_cli.errors import GrpoError
from grpo_cli.rewards.builtins.code import code
from grpo_cli.rewards.builtins.code_cloud import read_runner, runner_source
from tests.conftest import ROOT, assert_paragraph, run_cli

ADD = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
TESTS = [{"input": "1 2\n", "output": "3\n"}]


@pytest.fixture
def code_recipe(write_recipe, tmp_path: Path):
    (tmp_path / "data.jsonl").write_text('{"question": "add", "tests": [{"input": "1 2", "output": "3"}]}\n',
                                         encoding="utf-8")

    def make(params: str) -> Path:
        return write_recipe(f"""
            model: {{name_or_path: "bundled:tiny-tool"}}
            data: {{files: data.jsonl, prompt: {{template: "{{question}}", chat: true}}}}
            rewards: [{{name: code, params: {params}}}]
            training: {{num_generations: 2, per_device_train_batch_size: 2, max_completion_length: 32}}
            launch: {{profile: cpu}}
            """)

    return make


@pytest.mark.parametrize("backend,variable", [("e2b", "E2B_API_KEY"), ("morph", "MORPH_API_KEY")])
def test_validate_names_the_missing_api_key(code_recipe, monkeypatch: pytest.MonkeyPatch, backend: str,
                                            variable: str) -> None:
    monkeypatch.delenv(variable, raising=False)
    result = run_cli("validate", code_recipe(f"{{backend: {backend}, backend_image: snap_1}}"))
    assert result.exit_code == 2, result
    flat = " ".join(result.output.split())
    assert f"${variable}, which is not set" in flat and "rewards[0].params.backend" in flat


def test_validate_accepts_e2b_with_its_key_and_wants_a_morph_snapshot(code_recipe,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("E2B_API_KEY", "e2b_test")
    monkeypatch.setenv("MORPH_API_KEY", "morph_test")
    assert run_cli("validate", code_recipe("{backend: e2b}")).exit_code == 0
    morph = run_cli("validate", code_recipe("{backend: morph}"))
    assert_paragraph(morph, "backend_image")
    assert run_cli("validate", code_recipe("{backend: morph, backend_image: snapshot_abc}")).exit_code == 0
    typo = run_cli("validate", code_recipe("{backend: e2bb}"))
    assert_paragraph(typo, "e2b", "morph")


@pytest.mark.parametrize("backend,path", [("e2b", "/sandboxes"), ("morph", "/instance?snapshot_id=snap_1")])
def test_an_unreachable_service_stops_the_reward_with_a_clear_error(monkeypatch: pytest.MonkeyPatch, backend: str,
                                                                     path: str) -> None:
    monkeypatch.setenv("E2B_API_KEY", "e2b_test")
    monkeypatch.setenv("MORPH_API_KEY", "morph_test")
    with pytest.raises(GrpoError) as caught:
        code([ADD], tests=[TESTS], backend=backend, backend_url="http://127.0.0.1:9", backend_image="snap_1")
    assert f"cannot reach http://127.0.0.1:9{path}" in caught.value.render()


def test_the_sandbox_runner_feeds_stdin_and_reports_exit_timeouts_and_output() -> None:
    """What E2B's kernel or Morph's `python3 -c` would execute for one test, executed here by a real Python."""

    def run(program: str, stdin: str = "", timeout: float = 5.0) -> tuple[bool, str, str | None]:
        done = subprocess.run([sys.executable, "-c", runner_source(program, stdin, timeout, 512)],
                              capture_output=True, text=True, timeout=60)
        return read_runner("kernel noise\n" + done.stdout)

    assert run("a, b = map(int, input().split())\nprint(a + b)", "20 22\n") == (True, "42\n", None)
    assert run("import sys\nsys.exit(3)") == (False, "", "exit 3")
    assert run("while True:\n    pass", timeout=1.0) == (False, "", "timed out")
    assert run("x = bytearray(2 * 1024 ** 3)")[0] is False  # the memory limit holds
    assert read_runner("no marker at all") == (False, "", "the sandbox gave no result")


def test_open_r1_code_provider_becomes_the_code_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    monkeypatch.setenv("E2B_API_KEY", "e2b_test")
    source = ROOT / "tests" / "fixtures" / "imports" / "open-r1" / "Qwen2.5-1.5B-Instruct__config_demo_code.yaml"
    config = tmp_path / "config.yaml"
    config.write_text(source.read_text(encoding="utf-8") + "\ncode_provider: e2b\n", encoding="utf-8")
    out = tmp_path / "recipe.yaml"
    result = run_cli("import", "open-r1", config, "--profile", "zero2", "--num-processes", "7", "-o", out)
    assert result.exit_code == 0, result.output
    rewards = yaml.safe_load(out.read_text(encoding="utf-8"))["rewards"]
    assert [r.get("params", {}).get("backend") for r in rewards if r.get("name") == "code"] == ["e2b"]
