#!/usr/bin/env bash
# System packages for tests/launching/test_slurm.py and tests/launching/test_slurm_vllm.py: Slurm and MUNGE from Debian's packages
# (about 30 s), so the tests can start a private cluster on localhost: one node, or several node entries on this
# host with one slurmd each (`slurmd -N`, which Debian's build supports). CI (root, fresh machine) runs this
# before the tests.
# Does nothing when they are installed; without root or apt-get it only says so and the test is skipped.
set -uo pipefail
if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "install_slurm: needs root and apt-get; tests/launching/test_slurm.py will be skipped" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq slurm-wlm munge >/dev/null; }; then
  echo "install_slurm: apt-get failed; tests/launching/test_slurm.py will be skipped" >&2
fi
exit 0
