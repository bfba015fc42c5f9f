#!/usr/bin/env bash
# Idempotent set-up shared by quickstart.sh and test.sh: a virtualenv in .venv with tvmbench installed.
# With --system, also the Debian packages the full test suite needs (cross compilers, qemu).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == "--system" ]]; then
  pkgs=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross gcc-arm-linux-gnueabihf libc6-dev-armhf-cross
        gcc-riscv64-linux-gnu libc6-dev-riscv64-cross qemu-user-static debootstrap fakeroot
        gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm chromium tmux)
  missing=()
  for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if ((${#missing[@]})); then
    SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO="sudo"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
fi

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
[[ -x .venv/bin/python ]] || "$PY" -m venv .venv
stamp=.venv/.tvmbench-installed
if [[ ! -f $stamp || pyproject.toml -nt $stamp ]]; then
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e ".[test]"
  touch "$stamp"
fi
