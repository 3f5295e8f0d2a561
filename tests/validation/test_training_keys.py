"""`training` keys that pass the field check but used to fail later (`validation/training_keys.py`): scheduler
kwargs held against transformers, Hub uploads and their token, `do_eval` alone, a Hub id the Hub would refuse."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import RECIPES, assert_paragraph, run_cli

DEMO = RECIPES / "demo.yaml"


def _validate(write_recipe, training: str, *extra: str) -> str:
    path = write_recipe(f"""
        model: {{name_or_path: bundled:tiny-arith}}
        data: {{files: bundled:tiny-arith-data/train.jsonl, prompt: {{template: "{{question}}="}}}}
        rewards: [{{name: accuracy}}]
        training: {{num_generations: 4, per_device_train_batch_size: 4, max_completion_length: 32, {training}}}
        launch: {{profile: cpu}}
        """)
    result = run_cli("validate", path, *extra)
    return f"{result.exit_code}|{' '.join(result.output.split())}"


def test_a_scheduler_kwarg_typo_is_caught_before_the_model_loads(write_recipe) -> None:
    out = _validate(write_recipe, "lr_scheduler_type: cosine_with_min_lr, lr_scheduler_kwargs: {min_lr_rat: 0.1}")
    assert out.startswith("2|"), out
    assert "lr_scheduler_kwargs.min_lr_rat" in out and "min_lr_rate" in out
    ok = _validate(write_recipe, "lr_scheduler_type: cosine_with_min_lr, lr_scheduler_kwargs: {min_lr_rate: 0.1}")
    assert ok.startswith("0|"), ok
    missing = _validate(write_recipe, "lr_scheduler_type: cosine_with_min_lr")
    assert missing.startswith("2|") and "min_lr or min_lr_rate" in missing


@pytest.mark.parametrize(("kind", "kwargs", "accepted"), [
    ("cosine_with_min_lr", {"min_lr_rat": 0.1}, False),
    ("cosine_with_min_lr", {"min_lr_rate": 0.1}, True),
    ("cosine", {"num_cycles": 1.0}, True),
    ("polynomial", {"power": 2.0, "lr_end": 1e-9}, True),
    ("linear", {"num_cycles": 1.0}, False),
    ("warmup_stable_decay", {"num_decay_steps": 2}, True),
    ("warmup_stable_decay", {"num_decay_step": 2}, False),
])
def test_the_scheduler_check_agrees_with_transformers(kind: str, kwargs: dict, accepted: bool) -> None:
    """What validate accepts, transformers' get_scheduler builds; what it rejects, transformers raises for."""
    import torch
    from transformers import get_scheduler

    from grpo_cli.recipe.schema.training import TrainingSection
    from grpo_cli.validation.training_keys import scheduler_problems

    problems = scheduler_problems(TrainingSection.model_validate(
        {"lr_scheduler_type": kind, "lr_scheduler_kwargs": kwargs})).problems
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    try:
        get_scheduler(kind, optimizer, num_warmup_steps=1, num_training_steps=10, scheduler_specific_kwargs=kwargs)
        built = True
    except (TypeError, ValueError):
        built = False
    assert built is accepted and (not problems) is accepted, problems


def test_every_scheduler_signature_read_from_source_matches_the_imported_function() -> None:
    """validate reads each scheduler's parameters from transformers' source without importing torch; the
    functions transformers really calls must have exactly those parameters."""
    import inspect

    from transformers.optimization import TYPE_TO_SCHEDULER_FUNCTION

    from grpo_cli.validation.training_keys import scheduler_signature

    for kind, func in TYPE_TO_SCHEDULER_FUNCTION.items():
        read = scheduler_signature(kind.value)
        assert read is not None, kind
        params = {n: p.default is not p.empty for n, p in inspect.signature(func).parameters.items()
                  if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
        takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in inspect.signature(func).parameters.values())
        assert read == (params, takes_kwargs), kind


def test_push_to_hub_needs_a_token_and_says_it_uploads_twice(write_recipe, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no saved login
    out = _validate(write_recipe, "push_to_hub: true, hub_model_id: me/run")
    assert out.startswith("2|") and "training.push_to_hub" in out and "token" in out, out
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    out = _validate(write_recipe, "push_to_hub: true, hub_model_id: me/run", "output.push_to_hub=me/final")
    assert out.startswith("0|"), out
    assert "me/run" in out and "me/final" in out and "again" in out


def test_do_eval_alone_is_not_silently_ignored(write_recipe) -> None:
    out = _validate(write_recipe, "do_eval: true")
    assert out.startswith("2|") and "training.do_eval" in out and "eval_strategy" in out, out
    assert _validate(write_recipe, "do_eval: false").startswith("0|")


def test_validate_refuses_a_push_to_hub_id_the_hub_would_refuse() -> None:
    assert_paragraph(run_cli("validate", DEMO, f"output.push_to_hub=user/{'y' * 120}"), "output.push_to_hub",
                     "at most 96")
    assert run_cli("validate", DEMO, "output.push_to_hub=user/tiny-demo").exit_code == 0
