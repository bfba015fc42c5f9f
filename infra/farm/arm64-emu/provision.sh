#!/usr/bin/env bash
# Provision (once) an emulated aarch64 board: a Debian bookworm arm64 userland with Python 3.11 and the
# aarch64 wheels of TVM, run later under qemu user-mode by launch.sh. Nothing runs under emulation here.
#
#   infra/farm/arm64-emu/provision.sh [ROOT]      (default ${TVMBENCH_HOME:-~/.tvmbench}/boards/arm64-emu)
#
# Idempotent: a finished root carries ROOT/.tvmbench-provisioned (holding the pins) and is left alone;
# an unfinished one is rebuilt. Needs: debootstrap, dpkg, python3 -m pip with network access to the
# Debian mirror apt uses and to the Python package index. Runs debootstrap as root, or under fakeroot
# when not root (it creates device nodes and sets owners). PYTHON: the interpreter whose pip installs
# the wheels (default python3; tvmbench passes its own).
#
# TVM_VERSION and TVM_FFI_VERSION choose the release the board runs (default: the pins below; tvmbench
# passes the pin of workers/toolchains/pins.py). BASE_ROOT, a provisioned root of another release, lends
# its userland as a hard-linked copy (nothing on a root is written after provisioning), so a second
# release costs its wheels only, not another debootstrap.
set -euo pipefail

ROOT=${1:-${TVMBENCH_HOME:-$HOME/.tvmbench}/boards/arm64-emu}
SUITE=bookworm
TVM_PIN="apache-tvm[rpc]==0.27.0.post1"
FFI_PIN="apache-tvm-ffi==0.1.14.post1"
NUMPY_PIN="numpy<2.3"
[[ -n ${TVM_VERSION:-} ]] && TVM_PIN="apache-tvm[rpc]==$TVM_VERSION"
[[ -n ${TVM_FFI_VERSION:-} ]] && FFI_PIN="apache-tvm-ffi==$TVM_FFI_VERSION"
PINS="$SUITE $TVM_PIN $FFI_PIN $NUMPY_PIN"
BASE_ROOT=${BASE_ROOT:-}
[[ -n $BASE_ROOT && -f $BASE_ROOT/.tvmbench-provisioned ]] || BASE_ROOT=""
STAMP="$ROOT/.tvmbench-provisioned"
PYTHON=${PYTHON:-python3}

if [[ -f $STAMP && "$(cat "$STAMP")" == "$PINS" ]]; then
  echo "arm64-emu: $ROOT is provisioned"
  exit 0
fi

DEBOOTSTRAP=(debootstrap)
if [[ -z $BASE_ROOT && $(id -u) -ne 0 ]]; then
  command -v fakeroot >/dev/null || {
    echo "error: debootstrap needs root: run as root, or apt-get install fakeroot" >&2
    exit 1
  }
  DEBOOTSTRAP=(fakeroot debootstrap)
fi
for tool in $([[ -z $BASE_ROOT ]] && echo debootstrap dpkg); do
  command -v "$tool" >/dev/null || {
    echo "error: $tool not found; apt-get install debootstrap qemu-user-static" >&2
    exit 1
  }
done

# The Debian mirror this machine's apt already uses (deb822 .sources files first, then one-line lists).
mirror() {
  local f uri
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] || continue
    uri=$(awk '/^URIs:/ {print $2; exit}' "$f")
    if [[ $uri == */debian && $uri != *security* ]]; then echo "$uri"; return; fi
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f $f ]] || continue
    uri=$(awk '$1 == "deb" && $2 ~ /\/debian\/?$/ {print $2; exit}' "$f")
    if [[ -n $uri ]]; then echo "$uri"; return; fi
  done
  echo "http://deb.debian.org/debian"
}
MIRROR=${TVMBENCH_DEBIAN_MIRROR:-$(mirror)}

PARTIAL="$ROOT.partial"
rm -rf "$PARTIAL"
mkdir -p "$(dirname "$ROOT")"
if [[ -n $BASE_ROOT ]]; then
  echo "arm64-emu: the $SUITE userland of $BASE_ROOT into $PARTIAL (hard links)"
  cp -al "$BASE_ROOT" "$PARTIAL"
  rm -rf "$PARTIAL/opt/tvm-site" "$PARTIAL/.tvmbench-provisioned"
else
  echo "arm64-emu: debootstrap $SUITE arm64 from $MIRROR into $PARTIAL"
  "${DEBOOTSTRAP[@]}" --foreign --arch=arm64 --variant=minbase --include=python3 "$SUITE" "$PARTIAL" "$MIRROR" \
    >"$PARTIAL.log" 2>&1 || { tail -20 "$PARTIAL.log" >&2; exit 1; }
  # Unpack every fetched package without running its scripts (they would need emulation, and nothing
  # on the board needs them: the agent only imports Python modules).
  for deb in "$PARTIAL"/var/cache/apt/archives/*.deb; do
    dpkg -x "$deb" "$PARTIAL"
  done
  rm -f "$PARTIAL"/var/cache/apt/archives/*.deb
fi

echo "arm64-emu: aarch64 wheels into $PARTIAL/opt/tvm-site"
"$PYTHON" -m pip install -q --no-cache-dir --disable-pip-version-check --target "$PARTIAL/opt/tvm-site" \
  --platform manylinux_2_28_aarch64 --platform manylinux2014_aarch64 --platform manylinux_2_17_aarch64 \
  --python-version 3.11 --implementation cp --abi cp311 --only-binary=:all: \
  "$TVM_PIN" "$FFI_PIN" "$NUMPY_PIN"

rm -rf "$ROOT" "$PARTIAL.log"
mv "$PARTIAL" "$ROOT"
echo "$PINS" >"$STAMP"
echo "arm64-emu: provisioned $ROOT ($(du -sh "$ROOT" | cut -f1))"
