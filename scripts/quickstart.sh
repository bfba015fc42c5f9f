#!/usr/bin/env bash
# Set up, then run the quickstart sweep on the embedded default: local Ray, a local farm on 127.0.0.1, SQLite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/tvmbench sweep run examples/quickstart.toml "$@"
