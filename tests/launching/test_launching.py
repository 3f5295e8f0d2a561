"""Multi-process launching and the vLLM server: exact command lines, early dependency errors, health polling."""

from __future__ import annotations

import http.server
import json
import os
import signal
import socket
import sys
import textwrap
import threading
import time
from importlib.resources import files
from pathlib import Path

import pytest

from grpo_cli.errors import GrpoError, RecipeError
from grpo_cli.launching import relaunch as launching
from grpo_cli.launching.relaunch import (
    accelerate_command,
    maybe_relaunch,
    profile_config_path,
    resume_command,
    run_forwarding_signals,
    train_passthrough,
)
from grpo_cli.launching.vllm_server import (
    server_base_url,
    server_env,
    server_gpu_env,
    vllm_serve_command,
    wait_for_server,
)
from grpo_cli.planning import plan_run, world_size_explanation
from grpo_cli.recipe.loader import load_recipe
from grpo_cli.recipe.profiles import multi_process_names
from tests.conftest import MINIMAL, ROOT, run_cli

CONFIGS = Path(str(files("grpo_cli.assets") / "accelerate_configs"))  # where the package finds them
USER_CONFIGS = ROOT / "accelerate_configs"  # the folder users see and copy from
PROFILES = multi_process_names()
PY = sys.executable
ACC = [PY, "-m", "grpo_cli.launching.accelerate_launch"]


def _recipe(write_recipe, minimal_dir: Path, launch: str = "", model: str = "", name: str = "recipe.yaml",
            name_or_path: str = "Qwen/Qwen2.5-0.5B-Instruct"):
    """MINIMAL plus an indented `launch:` body and extra model keys; returns (recipe, path)."""
    text = MINIMAL.replace("  name_or_path: Qwen/Qwen2.5-0.5B-Instruct\n",
                           f"  name_or_path: {name_or_path}\n" + textwrap.indent(model, "  "))
    if launch:
        text += "launch:\n" + textwrap.indent(textwrap.dedent(launch), "  ")
    path = write_recipe(text, name)
    return load_recipe(path), path


@pytest.mark.parametrize("profile", PROFILES)
def test_accelerate_command_is_exact_for_each_profile(profile, write_recipe, minimal_dir) -> None:
    recipe, path = _recipe(write_recipe, minimal_dir, f"profile: {profile}\nnum_processes: 4\n")
    cmd = accelerate_command(recipe, path, ["training.learning_rate=1e-6"], [f"launch.profile={profile}"],
                             train_passthrough(output_dir="out", force=True), gpus=4)
    assert cmd == [*ACC, "--config_file", str(CONFIGS / f"{profile}.yaml"), "--num_processes", "4",
                   "--num_machines", "1", "--machine_rank", "0", "-m", "grpo_cli", "train", str(path),
                   "training.learning_rate=1e-6", f"launch.profile={profile}", "--output-dir", "out", "--force"]


def test_accelerate_command_multi_node_names_the_main_node(write_recipe, minimal_dir) -> None:
    recipe, path = _recipe(write_recipe, minimal_dir, """\
        profile: zero3
        num_processes: 16
        num_machines: 2
        machine_rank: 1
        main_process_ip: 10.0.0.1
        main_process_port: 29600
        """)
    cmd = accelerate_command(recipe, path, [], ["launch.machine_rank=1"], gpus=8)
    assert cmd == [*ACC, "--config_file", str(CONFIGS / "zero3.yaml"), "--num_processes", "16",
                   "--num_machines", "2", "--machine_rank", "1", "--main_process_ip", "10.0.0.1",
                   "--main_process_port", "29600", "-m", "grpo_cli", "train", str(path), "launch.machine_rank=1"]


@pytest.mark.parametrize(("profile", "launcher"), [("ddp", "multi_gpu"), ("zero2", "use_deepspeed"),
                                                   ("zero3", "use_deepspeed"), ("fsdp", "use_fsdp")])
def test_accelerate_accepts_the_command_and_picks_the_profiles_launcher(profile, launcher, write_recipe,
                                                                        minimal_dir) -> None:
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    recipe, path = _recipe(write_recipe, minimal_dir, f"profile: {profile}\nnum_processes: 2\n")
    cmd = accelerate_command(recipe, path, [], [], ["--resume"], gpus=2)
    args, _, _ = _validate_launch_command(launch_command_parser().parse_args(cmd[3:]))
    assert getattr(args, launcher) is True
    assert (args.num_processes, args.num_machines, args.module, args.training_script) == (2, 1, True, "grpo_cli")
    assert args.training_script_args == ["train", str(path), "--resume"]


def test_the_top_level_accelerate_configs_are_the_shipped_ones() -> None:
    """Users copy from accelerate_configs/ at the top of the checkout: it must hold exactly the files grpo launches
    with, not a stale copy."""
    shipped = {p.name: p.read_bytes() for p in CONFIGS.glob("*.yaml")}
    assert shipped and {p.name: p.read_bytes() for p in USER_CONFIGS.glob("*.yaml")} == shipped
    assert all(profile_config_path(p).parent == CONFIGS for p in PROFILES)


def test_shipped_accelerate_configs_load_and_use_only_real_options() -> None:
    """accelerate silently ignores a misspelt key inside deepspeed_config/fsdp_config: every key must be an option."""
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import launch_command_parser

    options = {a.dest for a in launch_command_parser()._actions}
    expected = {"single": "NO", "ddp": "MULTI_GPU", "zero2": "DEEPSPEED", "zero3": "DEEPSPEED", "fsdp": "FSDP"}
    for profile, kind in expected.items():
        cfg = load_config_from_file(str(profile_config_path(profile)))
        assert cfg.distributed_type.value == kind, profile
        assert cfg.mixed_precision == "no", f"{profile}: mixed precision belongs to the recipe"
        for key in [*cfg.deepspeed_config, *cfg.fsdp_config]:
            assert key in options, f"{profile}.yaml: {key} is not an accelerate option"
    zero3 = load_config_from_file(str(profile_config_path("zero3"))).deepspeed_config
    assert (zero3["zero_stage"], zero3["zero3_init_flag"], zero3["zero3_save_16bit_model"]) == (3, True, True)
    assert load_config_from_file(str(profile_config_path("zero2"))).deepspeed_config["zero_stage"] == 2
    fsdp = load_config_from_file(str(profile_config_path("fsdp"))).fsdp_config
    assert (fsdp["fsdp_version"], fsdp["fsdp_auto_wrap_policy"]) == (2, "TRANSFORMER_BASED_WRAP")


def test_vllm_server_gpus_are_subtracted_and_the_child_gets_the_real_world_size(write_recipe, minimal_dir) -> None:
    recipe, path = _recipe(write_recipe, minimal_dir, "profile: zero3\nvllm: {mode: server, server_gpus: 1}\n")
    cmd = accelerate_command(recipe, path, [], [], gpus=8)
    assert cmd[cmd.index("--num_processes") + 1] == "7"
    assert cmd[-1] == "launch.num_processes=7"  # each process checks TRL's batch rules for 7, not 1
    assert world_size_explanation(recipe, gpus=8) == "8 GPUs visible, 1 taken by the vLLM server → 7 training processes"


def test_process_count_problems_are_explained(write_recipe, minimal_dir) -> None:
    recipe, path = _recipe(write_recipe, minimal_dir, "profile: ddp\n")
    with pytest.raises(GrpoError, match="--num-processes"):
        accelerate_command(recipe, path, [], [], gpus=0)
    assert world_size_explanation(recipe, gpus=4) == "4 GPUs visible → 4 training processes"
    uneven, path = _recipe(write_recipe, minimal_dir, "profile: ddp\nnum_processes: 3\nnum_machines: 2\n"
                           "main_process_ip: 10.0.0.1\n", name="uneven.yaml")
    with pytest.raises(GrpoError, match="cannot be split evenly over 2 machines"):
        accelerate_command(uneven, path, [], [], gpus=2)


def test_custom_accelerate_config_is_relative_to_the_recipe(write_recipe, minimal_dir, monkeypatch) -> None:
    (minimal_dir / "my_zero3.yaml").write_text((USER_CONFIGS / "zero3.yaml").read_text())
    recipe, path = _recipe(write_recipe, minimal_dir, "profile: ddp\nnum_processes: 2\n"
                           "accelerate_config: my_zero3.yaml\n")
    cmd = accelerate_command(recipe, path, [], [], gpus=2)
    assert cmd[cmd.index("--config_file") + 1] == str(minimal_dir / "my_zero3.yaml")
    monkeypatch.setattr(launching, "installed", lambda name: name != "deepspeed")
    with pytest.raises(GrpoError, match="DeepSpeed"):  # the custom file runs DeepSpeed: same install hint
        launching.check_launch_dependencies(recipe)
    missing, _ = _recipe(write_recipe, minimal_dir, "profile: ddp\naccelerate_config: nope.yaml\n", name="m.yaml")
    with pytest.raises(GrpoError, match="nope.yaml not found"):
        accelerate_command(missing, path, [], [], gpus=2)


def test_resume_path_travels_as_the_positional_train_expects() -> None:
    assert train_passthrough(output_dir=Path("runs/a"), resume=True, resume_path="runs/a/checkpoint-5") == [
        "--output-dir", "runs/a", "--resume", "runs/a/checkpoint-5"]
    assert train_passthrough() == []


def test_resume_hint_keeps_the_output_dir_and_the_launch_flags() -> None:
    # What a DDP worker sees after `grpo train r.yaml x=1 --profile ddp --num-processes 2 -o runs/a`.
    overrides = ["training.max_steps=9", "rewards=[{name: accuracy}]", "launch.profile=ddp", "launch.num_processes=2"]
    assert resume_command("r.yaml", overrides, Path("runs/a")) == (
        "grpo train r.yaml training.max_steps=9 'rewards=[{name: accuracy}]' -o runs/a --profile ddp "
        "--num-processes 2 --resume")


def test_single_and_launched_processes_train_in_process(write_recipe, minimal_dir, monkeypatch) -> None:
    monkeypatch.setattr(launching, "run_forwarding_signals", lambda *a: pytest.fail("must not launch"))
    single, path = _recipe(write_recipe, minimal_dir)
    assert maybe_relaunch(plan_run(single), path, [], []) is None
    ddp, path = _recipe(write_recipe, minimal_dir, "profile: ddp\nnum_processes: 2\n", name="ddp.yaml")
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert maybe_relaunch(plan_run(ddp), path, [], []) is None


def test_cpu_ddp_relaunches_with_gloo_env_and_returns_the_exit_code(write_recipe, minimal_dir, monkeypatch) -> None:
    for var in ("LOCAL_RANK", "ACCELERATE_LAUNCHED", launching.RELAUNCHED_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(launching, "visible_gpu_count", lambda: 0)
    seen = {}
    monkeypatch.setattr(launching, "run_forwarding_signals", lambda cmd, env: seen.update(cmd=cmd, env=env) or 3)
    recipe, path = _recipe(write_recipe, minimal_dir, "profile: ddp\nnum_processes: 2\n")
    assert maybe_relaunch(plan_run(recipe), path, [], ["launch.num_processes=2"], ["--force"]) == 3
    assert seen["cmd"][-4:] == ["train", str(path), "launch.num_processes=2", "--force"]
    assert seen["env"]["ACCELERATE_USE_CPU"] == "true" and seen["env"][launching.RELAUNCHED_ENV] == "1"


def test_batch_sizes_are_checked_for_the_launched_world_size_before_launching(write_recipe, minimal_dir,
                                                                               monkeypatch) -> None:
    for var in ("LOCAL_RANK", "ACCELERATE_LAUNCHED", launching.RELAUNCHED_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(launching, "visible_gpu_count", lambda: 0)
    monkeypatch.setattr(launching, "run_forwarding_signals", lambda *a: pytest.fail("must not launch"))
    _, path = _recipe(write_recipe, minimal_dir, "profile: ddp\nnum_processes: 3\n")
    recipe = load_recipe(path, ["training.num_generations=8"])  # 4 per device x 3 processes: 12 % 8 != 0
    with pytest.raises(RecipeError) as info:
        maybe_relaunch(plan_run(recipe), path, ["training.num_generations=8"], [])
    assert "3 processes" in info.value.render() and "World size: 3 training processes" in info.value.render()


def _no_model_load(monkeypatch) -> None:
    import grpo_cli.training.run

    monkeypatch.setattr(grpo_cli.training.run, "load_model", lambda *a, **k: pytest.fail("loaded a model"))


def test_train_zero3_without_deepspeed_fails_before_loading_a_model(write_recipe, minimal_dir, monkeypatch) -> None:
    _no_model_load(monkeypatch)
    monkeypatch.setattr(launching, "installed", lambda name: name != "deepspeed")
    path = write_recipe(MINIMAL)
    result = run_cli("train", path, "--profile", "zero3", "--num-processes", "2")
    assert result.exit_code == 2, result
    assert "DeepSpeed" in result.output and "grpo-cli" in result.output and "--profile fsdp" in result.output


def test_train_with_vllm_but_without_vllm_installed_fails_early(write_recipe, minimal_dir, monkeypatch) -> None:
    _no_model_load(monkeypatch)
    monkeypatch.setattr(launching, "installed", lambda name: name != "vllm")
    path = write_recipe(MINIMAL)
    result = run_cli("train", path, "launch.vllm.mode=colocate")
    assert result.exit_code == 2, result
    assert "needs vLLM" in result.output and "launch.vllm.mode=off" in result.output


def test_install_hint_is_printed_verbatim(write_recipe, minimal_dir, monkeypatch) -> None:
    _no_model_load(monkeypatch)
    monkeypatch.setattr(launching, "installed", lambda name: False)
    result = run_cli("train", write_recipe(MINIMAL), "--profile", "zero3", "--num-processes", "2")
    assert "pip install 'grpo-cli[deepspeed]'" in result.output, result


def _flags(cmd: list[str]) -> dict[str, str]:
    """`--flag value` pairs of a command line (a bare flag maps to "")."""
    out: dict[str, str] = {}
    for i, token in enumerate(cmd):
        if token.startswith("--"):
            nxt = cmd[i + 1] if i + 1 < len(cmd) else ""
            out[token] = "" if nxt.startswith("--") else nxt
    return out


def test_vllm_serve_command_is_what_trl_documents_for_server_mode(write_recipe, minimal_dir) -> None:
    recipe, _ = _recipe(write_recipe, minimal_dir, "vllm: {mode: server}\n")
    cmd = vllm_serve_command(recipe)
    assert cmd[:3] == ["vllm", "serve", "Qwen/Qwen2.5-0.5B-Instruct"]  # not the deprecated `trl vllm-serve`
    flags = _flags(cmd)
    assert (flags["--host"], flags["--port"], flags["--tensor-parallel-size"]) == ("127.0.0.1", "8000", "1")
    assert flags["--gpu-memory-utilization"] == "0.9"  # TRL's server default, not colocate's 0.3
    # What TRL 1.16's client needs from the server (weight sync over NCCL, processed logprobs).
    assert json.loads(flags["--weight-transfer-config"]) == {"backend": "nccl"}
    assert (flags["--logprobs-mode"], flags["--max-logprobs"]) == ("processed_logprobs", "-1")
    assert server_env() == {"VLLM_SERVER_DEV_MODE": "1"}
    model_dir = minimal_dir / "models" / "policy"
    model_dir.mkdir(parents=True)
    full, _ = _recipe(write_recipe, minimal_dir, """\
        vllm: {mode: server, port: 8001, tensor_parallel_size: 2, server_gpus: 2, gpu_memory_utilization: 0.85,
               max_model_length: 4096}
        """, model="revision: v1.0\ndtype: bfloat16\ntrust_remote_code: true\n", name="full.yaml",
        name_or_path="models/policy")  # a local directory resolves against the recipe
    cmd = vllm_serve_command(full)
    assert cmd[:3] == ["vllm", "serve", str(model_dir)]
    flags = _flags(cmd)
    assert {k: flags[k] for k in ("--revision", "--tensor-parallel-size", "--port", "--gpu-memory-utilization",
                                  "--dtype", "--max-model-len", "--trust-remote-code")} == {
        "--revision": "v1.0", "--tensor-parallel-size": "2", "--port": "8001", "--gpu-memory-utilization": "0.85",
        "--dtype": "bfloat16", "--max-model-len": "4096", "--trust-remote-code": ""}


def test_vllm_serve_refuses_non_server_recipes_and_too_few_server_gpus(write_recipe, minimal_dir) -> None:
    colocate, _ = _recipe(write_recipe, minimal_dir, "vllm: {mode: colocate}\n")
    with pytest.raises(GrpoError, match="launch.vllm.mode=server"):
        vllm_serve_command(colocate)
    tp, _ = _recipe(write_recipe, minimal_dir, "vllm: {mode: server, tensor_parallel_size: 2}\n", name="tp.yaml")
    with pytest.raises(GrpoError, match="server_gpus: 2"):
        vllm_serve_command(tp)


def test_server_takes_the_gpus_training_leaves_free(write_recipe, minimal_dir) -> None:
    recipe, _ = _recipe(write_recipe, minimal_dir, "profile: zero3\nvllm: {mode: server, server_gpus: 2}\n")
    assert server_gpu_env(recipe, gpus=8, environ={}) == {"CUDA_VISIBLE_DEVICES": "6,7"}
    assert server_gpu_env(recipe, gpus=8, environ={"CUDA_VISIBLE_DEVICES": "3"}) == {}
    assert server_base_url(recipe) == "http://127.0.0.1:8000"


def test_vllm_serve_cli_prints_the_command(write_recipe, minimal_dir) -> None:
    path = write_recipe(MINIMAL + "launch:\n  vllm: {mode: server, port: 8123}\n")
    result = run_cli("vllm-serve", path, "--print-only")
    assert result.exit_code == 0, result
    assert "VLLM_SERVER_DEV_MODE=1 vllm serve Qwen/Qwen2.5-0.5B-Instruct --host 127.0.0.1 --port 8123" \
           in result.output


class _Health(http.server.BaseHTTPRequestHandler):
    paths: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.paths.append(self.path)
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_wait_for_server_returns_once_a_late_server_answers() -> None:
    port = _free_port()
    server = http.server.HTTPServer(("127.0.0.1", port), _Health)
    threading.Timer(0.6, server.serve_forever).start()  # bound now, answering only after 0.6 s
    try:
        start = time.monotonic()
        wait_for_server(f"http://127.0.0.1:{port}/", timeout=5, interval=0.2)
        assert time.monotonic() - start < 4
        assert "/health" in _Health.paths
    finally:
        server.shutdown()
        server.server_close()


def test_wait_for_server_gives_up_with_the_command_to_start_it() -> None:
    port = _free_port()
    start = time.monotonic()
    with pytest.raises(GrpoError) as info:
        wait_for_server(f"http://127.0.0.1:{port}", timeout=0.5, interval=0.1, recipe_source="recipes/x.yaml")
    assert time.monotonic() - start < 3
    assert f"http://127.0.0.1:{port}/health" in info.value.render()
    assert "grpo vllm-serve recipes/x.yaml" in info.value.render()


CHILD = """
import os, signal, subprocess, sys, time
def stop(signum, frame):
    open(sys.argv[1] + "." + str(os.getpid()), "w").write(signal.Signals(signum).name)
    sys.exit(130)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
if len(sys.argv) > 2:
    subprocess.Popen([sys.executable, __file__, sys.argv[1]])  # a "worker" in the same process group
open(sys.argv[1] + ".ready." + str(os.getpid()), "w").close()
time.sleep(30)
"""


@pytest.mark.usefixtures("python_sigint")  # SIGINT as at a terminal, even when the suite runs in the background
def test_first_ctrl_c_asks_every_process_of_the_group_to_stop_gracefully(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    marker = tmp_path / "got"

    def interrupt_when_ready() -> None:
        deadline = time.monotonic() + 20
        while len(list(tmp_path.glob("got.ready.*"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_when_ready, daemon=True).start()
    code = run_forwarding_signals([sys.executable, str(script), str(marker), "spawn"], dict(os.environ))
    assert code == 130
    time.sleep(0.3)  # the worker may finish writing just after its parent exits
    got = sorted(p.read_text() for p in tmp_path.glob("got.[0-9]*"))
    assert got == ["SIGTERM", "SIGTERM"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler it found, restored
