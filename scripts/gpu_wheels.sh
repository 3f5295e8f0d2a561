#!/usr/bin/env bash
# The wheels scripts/gpu_check.sh installs on a lent GPU machine, which reaches no package index.
#
#   scripts/gpu_wheels.sh [DIR]        (default: .whl in the repository root, which git ignores)
#
# The machine's image has Python 3.12 with a CUDA torch, accelerate, typer, rich, pyyaml, pyarrow, pandas,
# matplotlib, safetensors, tokenizers and huggingface_hub, and lacks trl, datasets (dill, multiprocess), pydantic
# and omegaconf. This downloads those, plus transformers, peft, typer, fsspec and typing_extensions, at the versions
# this checkout's environment runs (what CI tests), as cp312 manylinux x86_64 wheels without dependencies.
# gpu_check.sh falls back to the image's own transformers if the carried one does not import there. Prints the
# total size: the wheels and the working tree travel together and must stay under 64 MiB.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/.whl}
py=${PYTHON:-$root/.venv/bin/python}
[[ -x $py ]] || py=python3
packages=(trl transformers peft datasets dill multiprocess fsspec pydantic pydantic_core annotated-types
          typing-inspection typing_extensions omegaconf typer)
pins=$("$py" - "${packages[@]}" <<'PY'
import importlib.metadata as md, sys
missing = []
for name in sys.argv[1:]:
    try:
        print(f"{name}=={md.version(name)}")
    except md.PackageNotFoundError:
        missing.append(name)
if missing:
    sys.exit(f"gpu_wheels.sh: {', '.join(missing)} not installed in {sys.executable}: install the project "
             "(the README's test command) first, or set PYTHON to an environment that has them")
PY
)
if [[ -e $dir && ! -d $dir ]]; then
  echo "gpu_wheels.sh: $dir exists and is not a directory; give a directory for the wheels" >&2
  exit 2
fi
mkdir -p -- "$dir" || { echo "gpu_wheels.sh: cannot create $dir; give a directory you can write" >&2; exit 2; }
# Only wheels this script wrote are replaced: those listed in DIR/.gpu_wheels (or any in the default .whl, which
# is its own). A wheel of the user's in DIR is never deleted.
list=$dir/.gpu_wheels
if [[ $dir != "$root/.whl" ]]; then
  foreign=()
  for w in "$dir"/*.whl; do
    [[ -e $w ]] || continue
    grep -qxF -- "$(basename -- "$w")" "$list" 2>/dev/null || foreign+=("$(basename -- "$w")")
  done
  if (( ${#foreign[@]} )); then
    echo "gpu_wheels.sh: $dir holds wheels this script did not write (${foreign[*]}); it replaces the wheels" \
         "in DIR, so give an empty or new directory (or the default .whl)" >&2
    exit 2
  fi
fi
if [[ -f $list ]]; then
  while read -r w; do [[ -n $w && $w != */* ]] && rm -f -- "$dir/$w"; done <"$list"
fi
[[ $dir == "$root/.whl" ]] && rm -f -- "$dir"/*.whl
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
         manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
# shellcheck disable=SC2086
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version "${GRPO_GPU_PYTHON_VERSION:-3.12}" --implementation cp \
  "${platforms[@]}" -d "$dir" $pins 2> >(grep -v "^WARNING: Location" >&2)
(cd -- "$dir" && ls -- *.whl) >"$list"
count=$(find "$dir" -type f -name '*.whl' | wc -l)
wheels_kib=$(du -sk "$dir" | cut -f1)
tree_kib=$(cd "$root" && git ls-files -co --exclude-standard -z | xargs -0 du -ck 2>/dev/null | tail -1 | cut -f1)
echo "gpu_wheels.sh: $count wheels in $dir: $((wheels_kib / 1024)) MiB; with the working tree ($((tree_kib / 1024)) MiB)" \
     "$(((wheels_kib + tree_kib) / 1024)) MiB of the 64 MiB a device call carries"
if (( wheels_kib + tree_kib > 64 * 1024 )); then
  echo "gpu_wheels.sh: too large to travel: drop a wheel or shrink the tree" >&2
  exit 1
fi
