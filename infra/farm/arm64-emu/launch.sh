#!/usr/bin/env bash
# Start the board agent on the emulated aarch64 board: the board's own Python 3.11 and aarch64 TVM
# wheels, run by qemu user-mode emulation with the provisioned root as loader prefix.
#
#   infra/farm/arm64-emu/launch.sh ROOT --tracker 127.0.0.1:9190 --key arm64-emu --port 9095
#
# The agent serves RPC in-process: a Python that re-executed itself would lose qemu's -L prefix.
set -euo pipefail
ROOT=${1:?usage: launch.sh ROOT [board_agent.py arguments]}
shift
HERE=$(cd "$(dirname "$0")" && pwd)
AGENT="$HERE/../../../workers/board_agent.py"
[[ -f $ROOT/.tvmbench-provisioned ]] || {
  echo "error: $ROOT is not a provisioned arm64-emu board; run $HERE/provision.sh $ROOT" >&2
  exit 1
}
command -v qemu-aarch64-static >/dev/null || {
  echo "error: qemu-aarch64-static not found; apt-get install qemu-user-static" >&2
  exit 1
}
# OPENBLAS_CORETYPE: numpy's OpenBLAS would pick SVE kernels qemu reports and warn on every import.
exec env -u PYTHONHOME PYTHONPATH="$ROOT/opt/tvm-site" PYTHONNOUSERSITE=1 OPENBLAS_CORETYPE=ARMV8 \
  qemu-aarch64-static -L "$ROOT" "$ROOT/usr/bin/python3.11" "$AGENT" --emulated "$@"
