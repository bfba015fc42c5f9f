#!/usr/bin/env bash
# Set up (Debian packages, virtualenv, emulated boards), then run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --system
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -q -ra --durations=25 "$@"
