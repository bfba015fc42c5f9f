"""tvmbench/answers/table.py without a database: columns dropped by priority, the footer, ids, widths (ms)."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from tvmbench.answers import columns
from tvmbench.answers.table import Column, ColumnError, Options, _wrap, id_length, layout, render

COLS = [
    Column("job", "job", "job_key", priority=0, ident=True),
    Column("model", "model", "model", priority=0, wrap=True),
    Column("median", "median ms", "median", priority=0, right=True),
    Column("std", "std ms", "std", priority=1, right=True),
    Column("target", "target", "target", priority=2),
    Column("program", "program", "program", priority=3),
]
ROWS = [
    {"job_key": "0123456789abcdef", "model": "a long model name with words", "median": 0.0712345, "std": 0.00041,
     "target": "llvm -mcpu=cortex-a72", "program": "f" * 40},
    {"job_key": "0123456799abcdef", "model": "mlp", "median": 12345.678, "std": None, "target": "host",
     "program": "e" * 40},
]  # fmt: skip


def printed(width: int, terminal: bool, options: Options | None = None, rows=ROWS, cols=COLS) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=terminal, color_system=None)
    render(console, cols, rows, "t", options or Options())
    return out.getvalue()


def test_id_length_is_the_shortest_unique_prefix_of_at_least_8() -> None:
    assert id_length(["aaaaaaaaaa1", "bbbbbbbbbbb"]) == 8
    assert id_length(["0123456789ab", "0123456799ab"]) == 9  # they differ at index 8
    assert id_length(["0123456789ab", "0123456789ab", "0123456789ac"]) == 12  # duplicates are one id
    assert id_length([]) == 8


def test_lowest_priority_dropped_first_and_whole() -> None:
    cells = [[c.cell(r) for c in COLS] for r in ROWS]
    keep_all = layout(COLS, cells, None, lambda n: 2 * (n - 1))
    assert [COLS[i].key for i in keep_all.shown] == [c.key for c in COLS] and not keep_all.dropped
    narrow = layout(COLS, cells, 60, lambda n: 2 * (n - 1))
    assert [COLS[i].key for i in narrow.shown] == ["job", "model", "median", "std"]
    assert narrow.dropped == ["target", "program"] and narrow.fits
    tiny = layout(COLS, cells, 10, lambda n: 2 * (n - 1))  # priority 0 stays even when it cannot fit
    assert [COLS[i].key for i in tiny.shown] == ["job", "model", "median"] and not tiny.fits


@pytest.mark.parametrize("width", [60, 80, 100])
def test_terminal_table_fits_never_cuts_and_names_what_it_left_out(width: int) -> None:
    out = printed(width, terminal=True)
    plain = out
    assert "…" not in plain
    assert max(len(line) for line in plain.splitlines()) <= width
    for word in ("0.07123", "1.235e+04", "012345678", "012345679"):  # 4 significant digits, 9-char unique ids
        assert word in plain, plain
    if width < 100:
        assert "left out for width: " in plain and "--wide" in plain
        assert "program" in plain.split("left out for width: ")[1]
        assert "f" * 40 not in plain


def test_pipe_is_plain_text_at_content_width_with_every_column(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    out = printed(40, terminal=False)
    assert not re.search(r"[\u2500-\u257f]|\x1b", out), out
    assert "f" * 40 in out and "left out" not in out
    header = out.splitlines()[1]
    assert header.split() == ["job", "model", "median", "ms", "std", "ms", "target", "program"]


def test_wide_columns_and_tsv(capsys: pytest.CaptureFixture[str]) -> None:
    assert "f" * 40 in printed(60, terminal=True, options=Options(wide=True))
    picked = printed(200, terminal=False, options=Options(columns=["median", "job"]))
    assert picked.splitlines()[1].split() == ["median", "ms", "job"]
    assert printed(60, terminal=False, options=Options(tsv=True)) == ""  # on stdout, as written
    tsv = capsys.readouterr().out.splitlines()
    assert tsv[0].split("\t") == [c.key for c in COLS]
    assert tsv[1].split("\t")[:3] == ["0123456789abcdef", "a long model name with words", "0.0712345"]
    with pytest.raises(ColumnError, match="no column 'nope'; this table has: job, model"):
        printed(60, terminal=False, options=Options(columns=["nope"]))


def test_a_configuration_is_shortened_with_a_legend_only_when_it_does_not_fit() -> None:
    rows = [{"model": "tiny_mlp", "board_key": "host", "unit": "ms", "emulated": False, "uncertain": False,
             "best": "vm-compiled O2 per-target (host)", "best_median": 0.0712345, "best_lo": 0.07, "best_hi": 0.072,
             "speedup_vs_onnxruntime": 1.5, "best_peak_mem_mb": 12.0, "runner_up": "vm-bytecode O0 generic (host)",
             "runner_up_median": 0.08, "runner_up_lo": 0.079, "runner_up_hi": 0.081,
             "speedup_vs_slowest": 2.0}]  # fmt: skip
    narrow = printed(80, terminal=True, rows=rows, cols=columns.best("95% CI"))
    assert "VMc O2 pt" in narrow and "pt = per-target pipeline" in narrow
    assert narrow.count("legend: ") == 1 and "VMb = vm-bytecode" in narrow  # one legend for both columns
    assert "0.07123" in narrow and "[0.07, 0.072]" in narrow and "1.5" in narrow
    wide = printed(300, terminal=True, rows=rows, cols=columns.best("95% CI"))
    assert "vm-compiled O2 per-target (host)" in wide and "VMc" not in wide


@pytest.mark.parametrize("terminal", [False, True])
def test_wide_characters_count_as_the_cells_they_take(terminal: bool) -> None:
    from rich.cells import cell_len

    rows = [{**ROWS[0], "model": "模型 😀 resnet"}, {**ROWS[1], "model": "mlp"}]
    out = printed(60, terminal=terminal, rows=rows, cols=COLS[:3])
    lines = [line for line in out.splitlines()[1:] if line.strip() and not set(line.strip()) <= {"-", "─", " "}]
    # Every row's median column ends where the header's does: cells, not characters, were padded.
    ends = {cell_len(line.rstrip()) for line in lines if "0.07123" in line or "1.235e+04" in line or "median" in line}
    assert len(ends) == 1, out
    # Plain text wraps a name by cells too (when COLUMNS limits the width).
    assert _wrap("模型模型 ab 模型", 9) == ["模型模型", "ab 模型"]
    assert _wrap("模型模型模型", 4) == ["模型模型模型"], "a longer word keeps its own line, whole"


def test_a_text_column_with_a_gap_stays_left_aligned() -> None:
    # `results query` of a sweep with a pending-device job: pandas fills its missing board with NaN.
    rows = [{"board": "host@127.0.0.1:9000", "median": 1.5}, {"board": float("nan"), "median": float("nan")}]
    board, median = columns.generic(["board", "median"], rows)
    assert (board.right, median.right) == (False, True)
