#!/usr/bin/env bash
# Does a results database written by an older tvmbench open, answer the same and resume with this one?
#   bash scripts/check_old_database.sh [COMMIT]     (default deb8ac7: the tree before the engine room)
# The older tree runs from a git worktree with this checkout's .venv (same TVM, Ray, SQLAlchemy). It
# writes one finished sweep (tiny_cnn, tiny_mlp: three executors, two opt_levels) and one left
# pending-device (board key 'later', which no board has); then this tree upgrades the database, compares
# `results list --json` and `results best --json` on the fields both trees print, adds a 'later' board and
# resumes the pending sweep. Exit status 0 only if both answers are the same and the resumed jobs are ok.
# Its files (databases, JSON answers) stay in /tmp/tvmbench-olddb.*.
set -euo pipefail
cd "$(dirname "$0")/.."
COMMIT=${1:-deb8ac7}
ROOT=$(pwd)
PY=$ROOT/.venv/bin/python
WORK=$(mktemp -d /tmp/tvmbench-olddb.XXXXXX)
cleanup() { "$ROOT/.venv/bin/tvmbench" farm down >/dev/null 2>&1 || true; git worktree remove --force "$WORK/tree" 2>/dev/null || true; }
trap cleanup EXIT
git worktree add -q -f "$WORK/tree" "$COMMIT"
export TVMBENCH_HOME=$WORK/home
mkdir -p "$TVMBENCH_HOME"
unset TVMBENCH_DB TVMBENCH_TRACKER
# The older tree's CLI: its own packages first on the path (run from $WORK, so this checkout's are not on it).
old() { (cd "$WORK" && PYTHONPATH="$WORK/tree" "$PY" -c 'import sys; from orchestrator.main import main; sys.argv[0] = "tvmbench"; main()' "$@"); }
new() { (cd "$WORK" && "$ROOT/.venv/bin/tvmbench" "$@"); }
(cd "$WORK" && PYTHONPATH="$WORK/tree" "$PY" -c 'import orchestrator; print("older tree:", orchestrator.__file__)')

M=$ROOT/examples/models
cat > "$WORK/finished.toml" <<EOF
name = "finished"
[[models]]
path = "$M/tiny_cnn.onnx"
[[models]]
path = "$M/tiny_mlp.onnx"
[[targets]]
preset = "host"
[axes]
executor = ["vm-bytecode", "vm-compiled", "onnxruntime"]
opt_level = [0, 2]
[measure]
number = 2
repeat = 3
EOF
cat > "$WORK/pending.toml" <<EOF
name = "pending"
[[models]]
path = "$M/tiny_mlp.onnx"
[[targets]]
name = "later"
target = { kind = "llvm" }
board_key = "later"
arch = "$(uname -m)"
[axes]
executor = ["vm-bytecode"]
opt_level = [0, 2]
[measure]
number = 2
repeat = 3
device_wait_s = 5
EOF

echo "== older tree: a finished sweep and one waiting for a board"
old sweep run finished.toml | tail -1
old sweep run pending.toml | tail -1 || true  # exits non-zero: its jobs wait for a board
old results list --json > "$WORK/old_list.json"
old results best --json > "$WORK/old_best.json"
old farm down >/dev/null 2>&1 || true

echo "== this tree"
new db upgrade
new results list --json > "$WORK/new_list.json"
new results best --json > "$WORK/new_best.json"
PENDING=$("$PY" - "$WORK" <<'EOF'
import json
import sys

work = sys.argv[1]
for name in ("list", "best"):
    old, new = (json.load(open(f"{work}/{side}_{name}.json")) for side in ("old", "new"))
    shared = sorted(set().union(*map(dict.keys, old)) & set().union(*map(dict.keys, new)))
    same = [{k: r.get(k) for k in shared} for r in old] == [{k: r.get(k) for k in shared} for r in new]
    added = sorted(set().union(*map(dict.keys, new)) - set().union(*map(dict.keys, old)))
    print(f"results {name}: {len(old)} rows before, {len(new)} after; the same on {len(shared)} shared fields: "
          f"{same}; fields added: {', '.join(added) or 'none'}", file=sys.stderr)
    if not same:
        sys.exit(1)
listed = json.load(open(f"{work}/new_list.json"))
pending = {r["sweep_id"] for r in listed if r.get("status") == "pending-device"}
print(*pending)
EOF
)
[[ -n $PENDING ]] || { echo "no pending-device sweep in the older database" >&2; exit 1; }
new farm up | tail -1
new farm add --key later | tail -1
new sweep resume "$PENDING" | tail -1
"$PY" - "$WORK" "$PENDING" <<'EOF'
import json
import subprocess
import sys

work, sweep = sys.argv[1:]
rows = json.loads(subprocess.run([f"{sys.prefix}/bin/tvmbench", "results", "list", "--sweep", sweep, "--json"],
                                 cwd=work, capture_output=True, text=True, check=True).stdout)
statuses = sorted(r["status"] for r in rows)
print(f"resumed sweep {sweep}: {statuses}")
sys.exit(0 if statuses and set(statuses) == {"ok"} else 1)
EOF
echo "the older database opens, answers the same and resumes"
