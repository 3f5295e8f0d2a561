#!/usr/bin/env bash
# The GPU proof in one call: the CUDA path, bf16, and the memory plan against the CUDA peak, on one GPU.
#
#   scripts/gpu_check.sh [--dry-run] OUTDIR
#
# Run it first on a lent GPU machine (no network there: the wheels travel with the tree, made here by
# scripts/gpu_wheels.sh into .whl/). It installs the wheels into a temporary target, then runs each part of
# benchmarks/gpu/gpu_check.py in its own process under its own time limit, going on past a part that fails, and
# writes OUTDIR/gpu_check.json, OUTDIR/gpu_check.md (the tables) and OUTDIR/gpu_check.log (each part's output).
# Each case trains twice, on TRL's default generation path and on grpo's fast path (the adapter merged while
# generating, a static cache with compiled decode), and the table sets them side by side: generation tokens/s,
# step time, the ratios, and whether the first round's sampled tokens agree; `grpo merge` runs in the same call.
# The whole run stays under GRPO_GPU_CHECK_SECONDS (default 450, a positive whole number); GRPO_GPU_CHECK_PARTS picks
# a subset (names from `python benchmarks/gpu/gpu_check.py parts --all`) and GRPO_GPU_CHECK_JOBS=N runs up to N cases
# and demos at once (for a second call with little device time left). A bad value of any of them is refused.
# It never replaces what it did not write: an OUTDIR holding a real GPU run's results (or files of that name it
# cannot tell are a dry run's) is refused, and so is a TMPDIR it cannot make its scratch folder in.
# `--dry-run` runs the same parts on the CPU
# with tiny sizes, in this environment, without wheels (tests/measuring/test_gpu_kit.py runs it).
# Record a real run with `python benchmarks/gpu/gpu_check.py record OUTDIR` (a new file in docs/performance/history/).
set -uo pipefail
usage="usage: scripts/gpu_check.sh [--dry-run] OUTDIR"
dry=()
if [[ ${1:-} == -h || ${1:-} == --help ]]; then echo "$usage"; exit 0; fi
if [[ ${1:-} == --dry-run ]]; then dry=(--dry-run); shift; fi
if [[ $# -ne 1 || $1 == -* || -z $1 ]]; then
  echo "$usage" >&2
  [[ ${1:-} == -* ]] && echo "gpu_check.sh: unknown option $1 (an OUTDIR starting with '-' needs ./ before it)" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
refuse() { echo "gpu_check.sh: $*" >&2; exit 2; }
py=${PYTHON:-python3}
[[ -z ${PYTHON:-} && ${#dry[@]} -eq 1 && -x $root/.venv/bin/python ]] && py=$root/.venv/bin/python
budget=${GRPO_GPU_CHECK_SECONDS:-450}
[[ $budget =~ ^[0-9]+$ ]] && (( 10#$budget > 0 )) || refuse "GRPO_GPU_CHECK_SECONDS=$budget is not a positive" \
  "whole number of seconds; set it to the run's budget (default 450), e.g. GRPO_GPU_CHECK_SECONDS=450, or unset it"
budget=$((10#$budget))
jobs_max=${GRPO_GPU_CHECK_JOBS:-1}  # >1: cases and demos share the GPU (memory stays per process; speed does not)
[[ $jobs_max =~ ^[0-9]+$ ]] && (( 10#$jobs_max > 0 )) || refuse "GRPO_GPU_CHECK_JOBS=$jobs_max is not a positive" \
  "whole number; set how many cases may share the GPU at once (default 1), or unset it"
jobs_max=$((10#$jobs_max))
only=${GRPO_GPU_CHECK_PARTS:-}      # a space-separated subset of the parts, for a second call with time left
if [[ -n $only ]]; then
  known=$("$py" "$root/benchmarks/gpu/gpu_check.py" parts --all "${dry[@]}" | cut -d' ' -f1) ||
    refuse "cannot list the kit's parts with $py; set PYTHON to the environment that runs the check"
  for part in $only; do
    grep -qxF -- "$part" <<<"$known" || refuse "GRPO_GPU_CHECK_PARTS names '$part', which is not a part; the" \
      "parts are: $(echo $known); name some of them, space-separated, or unset it to run the default ones"
  done
fi
if [[ -e $1 && ! -d $1 ]]; then
  refuse "OUTDIR $1 exists and is not a directory; give a directory (it is created if missing)"
fi
if [[ -e $1/gpu_check.json ]]; then  # replace only a dry run's results: a real GPU run's are never overwritten
  "$py" -c 'import json, sys; sys.exit(json.load(open(sys.argv[1])).get("dry_run") is not True)' \
    "$1/gpu_check.json" 2>/dev/null || refuse "OUTDIR $1 already holds results of a GPU run (gpu_check.json," \
      "not a dry run's); they are never replaced: give a new OUTDIR, or move them away first"
else
  for f in gpu_check.md gpu_check.log; do
    [[ -e $1/$f ]] && refuse "OUTDIR $1 holds $f but no gpu_check.json, so it may be an earlier run's that did" \
      "not finish; it is never replaced: give a new OUTDIR, or move $f away first"
  done
fi
began=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/tmp}/grpo-gpu-check.XXXXXX" 2>/dev/null) && [[ -d $work && -w $work ]] ||
  refuse "cannot make a scratch folder in TMPDIR=${TMPDIR:-/tmp} (missing, not a directory or not writable);" \
    "the parts' logs and models go there: point TMPDIR at a writable directory with a few GiB free, or unset it"
trap 'rm -rf -- "$work"' EXIT
mkdir -p -- "$1" || refuse "cannot create OUTDIR $1; give a directory you can write"
out=$(cd -- "$1" && pwd)
[[ -w $out ]] || refuse "cannot write into OUTDIR $out (read-only or not yours); give a directory you can write"
trap 'exit 130' INT
trap 'exit 143' TERM
log=$out/gpu_check.log
: 2>/dev/null >"$log" || refuse "cannot write into OUTDIR $out (cannot create $log there); give a directory you can write"
say() { echo "[gpu_check $(( $(date +%s) - began ))s] $*" | tee -a "$log"; }
export PYTHONPATH=$root HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
export GRPO_CACHE_DIR=$work/cache

smoke() { "$py" -c "import torch, transformers, peft, datasets, trl, pydantic, typer, grpo_cli.training.run
from trl import GRPOConfig, GRPOTrainer
print('imports ok: torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'transformers', transformers.__version__,
      'trl', trl.__version__, 'datasets', datasets.__version__, 'peft', peft.__version__)" >>"$log" 2>&1; }

wheels=${GRPO_GPU_WHEELS:-$root/.whl}
if [[ ${#dry[@]} -eq 0 ]]; then
  site=$work/site
  if compgen -G "$wheels/*.whl" >/dev/null; then
    say "installing $(ls "$wheels"/*.whl | wc -l) wheels from $wheels into $site"
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$wheels"/*.whl \
      >>"$log" 2>&1 || say "pip install of the wheels failed (see the log)"
    export PYTHONPATH=$root:$site
  else
    say "no wheels in $wheels (make them with scripts/gpu_wheels.sh): using what the machine has"
  fi
  if ! smoke && [[ -d $site ]]; then
    say "the imports failed with the carried transformers; trying the machine's own"
    rm -rf "$site"/transformers "$site"/transformers-*.dist-info
    smoke || say "the imports still fail: the parts below will say where"
  fi
else
  smoke || say "the imports fail: the parts below will say where"
fi
tail -n 1 "$log"

run_part() {  # PART LIMIT: its output goes to its own file, then into the log whole
  timeout -k 10 "$2" "$py" "$root/benchmarks/gpu/gpu_check.py" run "$1" "$work" "${dry[@]}" >"$work/$1.log" 2>&1
  local rc=$?
  { echo "----- $1 (exit $rc)"; cat "$work/$1.log"; } >>"$log"
  if (( rc == 124 || rc == 137 )); then say "$1 stopped at its time limit"; else say "$1 done"; fi
}
limit_for() {  # LIMIT: the part's limit, cut to what the run's budget has left (15 s kept for the table); 0 if spent
  local left=$(( budget - ($(date +%s) - began) - 15 ))
  if (( left < 10 )); then echo 0; elif (( $1 > left )); then echo "$left"; else echo "$1"; fi
}
while read -r part limit; do
  [[ -n $only && " $only " != *" $part "* ]] && continue
  shared=0
  [[ $jobs_max -gt 1 && ( $part == case-* || $part == demo-* ) ]] && shared=1
  if (( shared )); then
    while (( $(jobs -rp | wc -l) >= jobs_max )); do wait -n; done
  else
    wait  # facts, rates and merge run alone (merge needs the LoRA case's adapter)
  fi
  limit=$(limit_for "$limit")
  if (( limit == 0 )); then
    say "$part skipped: the run's ${budget} s are spent"
    continue
  fi
  say "$part (limit ${limit}s)"
  if (( shared )); then run_part "$part" "$limit" & else run_part "$part" "$limit"; fi
done < <("$py" "$root/benchmarks/gpu/gpu_check.py" parts "${dry[@]}")
wait

"$py" "$root/benchmarks/gpu/gpu_check.py" table "$work" "$out" "${dry[@]}" 2>>"$log"
rc=$?
say "done in $(( $(date +%s) - began )) s: $out/gpu_check.md, $out/gpu_check.json, $out/gpu_check.log"
exit $rc
