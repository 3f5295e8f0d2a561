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
#
# It only ever deletes what it wrote, by exact name: the wheels of its previous run, listed with their SHA-256 in
# DIR/.gpu_wheels (a listed file whose content changed, or any other file, is left alone), and only after the new
# download succeeded (it downloads into a scratch folder inside DIR first). A DIR holding wheels it did not write
# is refused.
set -euo pipefail
usage="usage: scripts/gpu_wheels.sh [DIR]   (default: .whl in the repository root)"
if [[ ${1:-} == -h || ${1:-} == --help ]]; then echo "$usage"; exit 0; fi
if [[ $# -gt 1 ]]; then
  echo "$usage" >&2
  echo "gpu_wheels.sh: one DIR at most, got $# arguments ($*); give the one directory the wheels go into" >&2
  exit 2
fi
if [[ ${1:-} == -* ]]; then
  echo "$usage" >&2
  echo "gpu_wheels.sh: unknown option $1 (a DIR starting with '-' needs ./ before it)" >&2
  exit 2
fi
if [[ $# -eq 1 && -z $1 ]]; then
  echo "gpu_wheels.sh: DIR is empty; give a directory, or no argument for the default .whl" >&2
  exit 2
fi
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
list=$dir/.gpu_wheels
# "NAME SHA256" per wheel this script wrote; a bare name (an older list) or a changed file is not ours to delete
ours() { [[ -f $list && -f $dir/$1 ]] && grep -qxF -- "$1 $(sha256sum -- "$dir/$1" | cut -d' ' -f1)" "$list"; }
foreign=()
for w in "$dir"/*.whl; do
  [[ -e $w ]] || continue
  ours "$(basename -- "$w")" || foreign+=("$(basename -- "$w")")
done
if (( ${#foreign[@]} )); then
  echo "gpu_wheels.sh: $dir holds wheels this script did not write (or that changed since): ${foreign[*]}." \
       "It replaces only its own wheels, so move those away or give an empty or new directory" >&2
  exit 2
fi
stage=$(mktemp -d "$dir/.gpu_wheels.partial.XXXXXX") || {
  echo "gpu_wheels.sh: cannot write into $dir; give a directory you can write" >&2; exit 2; }
trap 'rm -rf -- "$stage"' EXIT
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
         manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
# shellcheck disable=SC2086
if ! "$py" -m pip download -q --no-deps --only-binary=:all: --python-version "${GRPO_GPU_PYTHON_VERSION:-3.12}" \
    --implementation cp "${platforms[@]}" -d "$stage" $pins 2> >(grep -v "^WARNING: Location" >&2); then
  echo "gpu_wheels.sh: the download failed (above); $dir is as it was" >&2
  exit 1
fi
if [[ -f $list ]]; then  # the previous run's wheels, each by its exact name and only if unchanged
  while read -r name _; do
    if [[ $name == *.whl && $name != */* ]] && ours "$name"; then rm -f -- "$dir/$name"; fi
  done <"$list"
fi
(cd -- "$stage" && for w in *.whl; do echo "$w $(sha256sum -- "$w" | cut -d' ' -f1)"; done) >"$stage/list"
mv -- "$stage"/*.whl "$dir"/
mv -- "$stage/list" "$list"
count=$(find "$dir" -maxdepth 1 -type f -name '*.whl' | wc -l)
wheels_kib=$(find "$dir" -maxdepth 1 -type f -name '*.whl' -print0 | xargs -0 du -ck | tail -1 | cut -f1)
tree_kib=$(cd "$root" && git ls-files -co --exclude-standard -z | xargs -0 du -ck 2>/dev/null | tail -1 | cut -f1)
echo "gpu_wheels.sh: $count wheels in $dir: $((wheels_kib / 1024)) MiB; with the working tree ($((tree_kib / 1024)) MiB)" \
     "$(((wheels_kib + tree_kib) / 1024)) MiB of the 64 MiB a device call carries"
if (( wheels_kib + tree_kib > 64 * 1024 )); then
  echo "gpu_wheels.sh: too large to travel: drop a wheel or shrink the tree" >&2
  exit 1
fi
