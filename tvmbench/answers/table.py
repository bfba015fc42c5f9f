"""Every CLI table: columns declared once, laid out to the width, rendered for a terminal, a pipe or TSV.

A table is a list of ``Column`` specs and rows (dicts). ``layout`` picks the columns that fit the
width: lower-priority columns are dropped *whole* (a footer names them), nothing is cut inside a
cell (numbers are whole, ids are the shortest prefix unique among the rows shown and at least
``MIN_ID`` long, long names wrap at spaces). ``render`` prints it: a rich table in a terminal, plain
aligned text with no box drawing and no escape sequences otherwise (at the content width), or TSV.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from numbers import Real
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from tvmbench.core.printable import BIDI_CONTROLS, printable

MIN_ID = 8  # ids shown are never shorter: a prefix this long is what every command accepts
GAP = 2  # spaces between the columns of plain text
WRAP_WIDTH = 20  # a wrapping column is not squeezed below this before lower-priority columns are dropped


#: Bidi controls (``BIDI_CONTROLS``) shown as their escapes, like the control characters: stored before
#: intake refused them, or from a team's database.
_BIDI = {c: f"\\u{c:04x}" for c in BIDI_CONTROLS}


def shown(text: str) -> str:
    """``text`` as a terminal may show it: control characters (``printable``) and bidi overrides escaped."""
    return printable(text).translate(_BIDI)


#: What a spreadsheet takes for the start of a formula in a cell it imports (OWASP's CSV injection list).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def spreadsheet_text(text: str) -> str:
    """A text cell of a CSV or TSV that a spreadsheet shows as written: a leading formula character gets a '."""
    # Names are user text: a model "=HYPERLINK(...)" ran as a formula on opening the file. A number written
    # as text (-1.5) stays a number, and a lone "-" (no value) is no formula.
    if text[:1] in FORMULA_STARTS and text != "-" and not _NUMBER.fullmatch(text):
        return "'" + text
    return text


class ColumnError(ValueError):
    """--columns named a column the table does not have."""


@dataclass(frozen=True)
class Column:
    """One column: where its value comes from, how it reads, and how much it matters.

    Args:
        key: its name for ``--columns`` (and the TSV header).
        header: the header shown (may wrap at spaces).
        get: a row's key, or a function of the row, giving the raw value (TSV writes it as is).
        text: the cell text from the row (default: ``fmt`` of the value).
        priority: 0 is never dropped; higher numbers are dropped first when the width is short.
        right: right-justified (numbers).
        wrap: the cell may wrap at spaces (names); otherwise it keeps one line.
        ident: a hex id, shown at the shortest prefix unique in the column (at least MIN_ID).
        style: a rich style for the cell in a terminal, from the row.
        short: a shorter cell text, used when the full one does not fit; ``legend`` explains it.
        legend: (abbreviation, meaning) pairs explaining ``short``.
        optional: shown only when some row has a value.
    """

    key: str
    header: str
    get: str | Callable[[dict[str, Any]], Any]
    text: Callable[[dict[str, Any]], str] | None = None
    priority: int = 1
    right: bool = False
    wrap: bool = False
    ident: bool = False
    style: Callable[[dict[str, Any]], str | None] | None = None
    short: Callable[[dict[str, Any]], str] | None = None
    legend: Sequence[tuple[str, str]] = ()
    optional: bool = False  # left out (silently) when no row has a value, such as Ray columns without Ray

    def value(self, row: dict[str, Any]) -> Any:
        return row.get(self.get) if isinstance(self.get, str) else self.get(row)

    def cell(self, row: dict[str, Any]) -> str:
        return self.text(row) if self.text is not None else fmt(self.value(row))


@dataclass
class Options:
    """How the user asked for tables (the CLI's --wide, --columns, --tsv)."""

    wide: bool = False
    columns: list[str] | None = None
    tsv: bool = False
    on_error: Callable[[str], None] | None = None  # the CLI's one-line exit for a --columns name it lacks


#: The options of the running command (set once by the CLI before it prints).
current = Options()


def fmt(value: Any, digits: int = 4) -> str:
    """A cell: '-' for missing, floats at ``digits`` significant digits (whole: never cut)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def id_length(values: Sequence[Any], minimum: int = MIN_ID) -> int:
    """The shortest prefix length (>= ``minimum``) at which the distinct ``values`` stay distinct."""
    distinct = sorted({str(v) for v in values if v})
    n = minimum
    for a, b in pairwise(distinct):  # neighbours in sorted order share the longest prefixes
        common = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        n = max(n, common + 1)
    return n


def short_id(value: Any, length: int = MIN_ID) -> str:
    """``value`` cut to ``length`` characters (``id_length`` of the ids around it), '-' when missing."""
    return str(value)[:length] if value else "-"


# Widths are terminal cells, not characters: a CJK character or an emoji takes two (rich.cells).
def _longest_word(text: str) -> int:
    return max((cell_len(w) for line in text.splitlines() for w in line.split(" ")), default=0)


def _longest_line(text: str) -> int:
    return max((cell_len(line) for line in text.splitlines()), default=0)


def _wrap(text: str, width: int) -> list[str]:
    """``text`` wrapped at spaces to ``width`` cells (a longer word keeps its own line, whole)."""
    lines: list[str] = []
    for word in text.split():
        if lines and cell_len(lines[-1]) + 1 + cell_len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines or [""]


def _pad(text: str, width: int, right: bool) -> str:
    """``text`` padded with spaces to ``width`` cells."""
    fill = " " * max(0, width - cell_len(text))
    return fill + text if right else text + fill


@dataclass
class Layout:
    """Which columns show, at which widths, and what was left out (the footer)."""

    shown: list[int]  # indices into the columns, in display order
    widths: list[int]  # per shown column
    dropped: list[str] = field(default_factory=list)  # headers of the columns left out
    fits: bool = True  # False when even the kept columns need more than the width


def layout(
    columns: Sequence[Column],
    cells: Sequence[Sequence[str]],
    width: int | None,
    overhead: Callable[[int], int],
    *,
    wanted: Sequence[str] | None = None,
    wide: bool = False,
) -> Layout:
    """Pick the columns fitting ``width`` (None: no limit) and their widths.

    Args:
        cells: the cell texts, one list per row, one entry per column.
        overhead: the characters a renderer adds around n columns (separators, borders, padding).
        wanted: column keys the user named (--columns): exactly those, in that order.
        wide: every column, however wide.
    """
    keys = [c.key for c in columns]
    if wanted:
        unknown = [w for w in wanted if w not in keys]
        if unknown:
            raise ColumnError(f"no column {', '.join(map(repr, unknown))}; this table has: {', '.join(keys)}")
        order = [keys.index(w) for w in wanted]
    else:
        order = list(range(len(columns)))
    natural, minimum = [], []
    for i, col in enumerate(columns):
        texts = [row[i] for row in cells]
        natural.append(max([_longest_line(col.header), *(_longest_line(t) for t in texts)]))
        words = [_longest_word(t) if col.wrap else _longest_line(t) for t in texts]
        # A column that keeps its cells on one line keeps its header on one line too (rich does).
        header = _longest_word(col.header) if col.wrap else _longest_line(col.header)
        minimum.append(max([header, *words]))
    if width is None:
        return Layout(order, [natural[i] for i in order])
    # A wrapping column gives way down to WRAP_WIDTH (or its longest word) before any column is dropped,
    # and below that only when nothing droppable is left: a name over two lines reads, over five not.
    comfort = [min(n, max(m, WRAP_WIDTH)) for n, m in zip(natural, minimum, strict=True)]
    shown = list(order)
    dropped: list[int] = []
    if not (wanted or wide):
        # Least important first; among equals, the rightmost (columns are declared in reading order).
        by_cost = sorted(shown, key=lambda i: (columns[i].priority, i), reverse=True)
        for i in by_cost:
            if sum(comfort[j] for j in shown) + overhead(len(shown)) <= width or columns[i].priority == 0:
                break
            shown.remove(i)
            dropped.append(i)
    widths = {i: natural[i] for i in shown}
    for floor in (comfort, minimum):  # shrink the wrapping columns, widest first
        while sum(widths.values()) + overhead(len(shown)) > width:
            candidates = [i for i in shown if widths[i] > floor[i]]
            if not candidates:
                break
            widest = max(candidates, key=lambda i: widths[i] - floor[i])
            widths[widest] -= 1
    fits = sum(widths.values()) + overhead(len(shown)) <= width
    return Layout(shown, [widths[i] for i in shown], [columns[i].header for i in sorted(dropped)], fits)


def _rich_overhead(n: int) -> int:
    """What ``_print_rich``'s table adds around n columns: two spaces between columns (no edges)."""
    return 2 * (n - 1) if n else 0


def _plain_overhead(n: int) -> int:
    return GAP * (n - 1) if n else 0


def table_width(console: Console) -> int | None:
    """The width tables must fit: the terminal's, else COLUMNS when set, else none (content width)."""
    if console.is_terminal:
        return console.width
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else None


def _cells(columns: Sequence[Column], rows: Sequence[dict[str, Any]], short: set[int]) -> list[list[str]]:
    lengths = {i: id_length([c.value(r) for r in rows]) for i, c in enumerate(columns) if c.ident}
    out = []
    for r in rows:
        line = []
        for i, c in enumerate(columns):
            if c.ident and c.text is None:
                line.append(short_id(c.value(r), lengths[i]))
            elif i in short and c.short is not None:
                line.append(c.short(r))
            else:
                line.append(c.cell(r))
        out.append([shown(cell) for cell in line])
    return out


@dataclass
class Rendered:
    """What ``render`` printed, for the lines a command prints under its table."""

    dropped: list[str]
    id_lengths: dict[str, int]  # column key -> the prefix length its ids were shown at

    def id(self, key: str, value: Any) -> str:
        """``value`` at the length the ``key`` column showed (MIN_ID when the table did not show it)."""
        return short_id(value, self.id_lengths.get(key, MIN_ID))


def render(
    console: Console,
    columns: Sequence[Column],
    rows: Sequence[dict[str, Any]],
    title: str | None = None,
    options: Options | None = None,
) -> Rendered:
    """Print ``rows`` as a table on ``console`` with the current (or given) options; see the module doc."""
    opts = options or current
    columns = [c for c in columns if not c.optional or any(c.value(r) not in (None, "") for r in rows)]
    try:
        return _render(console, columns, rows, title, opts)
    except ColumnError as exc:
        if opts.on_error is not None:
            opts.on_error(str(exc))
        raise


def _render(
    console: Console, columns: Sequence[Column], rows: Sequence[dict[str, Any]], title: str | None, opts: Options
) -> Rendered:
    lengths = {c.key: id_length([c.value(r) for r in rows]) for c in columns if c.ident}
    if opts.tsv:
        _print_tsv(columns, rows, opts.columns)
        return Rendered([], {k: 10**6 for k in lengths})  # TSV shows ids whole: so do the lines about it
    terminal = console.is_terminal
    width = None if opts.wide else table_width(console)
    overhead = _rich_overhead if terminal else _plain_overhead
    short: set[int] = set()
    cells = _cells(columns, rows, short)
    plan = layout(columns, cells, width, overhead, wanted=opts.columns, wide=opts.wide)
    abbreviable = {i for i, c in enumerate(columns) if c.short is not None}
    if abbreviable and (plan.dropped or not plan.fits):
        # The full names cost columns: short ones with a legend, where that keeps more columns or fits.
        short_cells = _cells(columns, rows, abbreviable)
        short_plan = layout(columns, short_cells, width, overhead, wanted=opts.columns, wide=opts.wide)
        if len(short_plan.dropped) < len(plan.dropped) or (short_plan.fits and not plan.fits):
            short, cells, plan = abbreviable, short_cells, short_plan
    if terminal:
        styles = [[c.style(r) if c.style else None for c in columns] for r in rows]
        _print_rich(console, columns, cells, styles, plan, title)
    else:
        _print_plain(console, columns, cells, plan, title)
    meanings: dict[str, None] = {}  # one legend for every shortened column, in the legend's order
    for i in sorted(short & set(plan.shown)):
        used = {word for row in cells for word in row[i].split()}
        meanings.update((f"{abbr} = {what}", None) for abbr, what in columns[i].legend if abbr in used)
    if meanings:
        _line(console, "legend: " + ", ".join(meanings))
    if plan.dropped:
        _line(console, f"left out for width: {', '.join(plan.dropped)} (--wide shows them)")
    return Rendered(plan.dropped, lengths)


def _line(console: Console, text: str) -> None:
    console.print(Text(text), highlight=False, soft_wrap=not console.is_terminal)


def _print_rich(
    console: Console,
    columns: Sequence[Column],
    cells: list[list[str]],
    styles: list[list[str | None]],
    plan: Layout,
    title: str | None,
) -> None:
    # A rule under the header and no vertical lines: the columns get the width box drawing would take.
    table = Table(
        title=title,
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
        title_justify="left",
        expand=False,
    )
    for i, w in zip(plan.shown, plan.widths, strict=True):
        col = columns[i]
        table.add_column(
            col.header,
            justify="right" if col.right else "left",
            width=w,
            no_wrap=not col.wrap,
            overflow="fold",  # never "…": a word longer than the column (none, by the layout) folds
        )
    for row, style in zip(cells, styles, strict=True):
        table.add_row(*(Text(row[i], style=style[i] or "") for i in plan.shown))
    needed = sum(plan.widths) + _rich_overhead(len(plan.shown))
    if needed <= console.width:
        console.print(table)
        return
    # Wider than the terminal only on --wide/--columns (or priority-0 columns that cannot fit): render
    # at the table's width and let the terminal wrap the lines rather than squeeze the cells.
    saved = console.width
    console.width = needed
    try:
        console.print(table)
    finally:
        console.width = saved


def _print_plain(
    console: Console, columns: Sequence[Column], cells: list[list[str]], plan: Layout, title: str | None
) -> None:
    lines = [title] if title else []
    shown = [columns[i] for i in plan.shown]

    def emit(texts: list[str], wrap: list[bool]) -> None:
        parts = [
            _wrap(t, w) if ok and cell_len(t) > w else [t] for t, ok, w in zip(texts, wrap, plan.widths, strict=True)
        ]
        for k in range(max(len(p) for p in parts)):
            pieces = []
            for p, c, w in zip(parts, shown, plan.widths, strict=True):
                pieces.append(_pad(p[k] if k < len(p) else "", w, c.right))
            lines.append((" " * GAP).join(pieces).rstrip())

    emit([c.header for c in shown], [True] * len(shown))
    lines.append((" " * GAP).join("-" * w for w in plan.widths))
    for row in cells:
        emit([row[i] for i in plan.shown], [c.wrap for c in shown])
    _write(console, lines)


def _print_tsv(columns: Sequence[Column], rows: Sequence[dict[str, Any]], wanted: Sequence[str] | None) -> None:
    keys = [c.key for c in columns]
    if wanted:
        unknown = [w for w in wanted if w not in keys]
        if unknown:
            raise ColumnError(f"no column {', '.join(map(repr, unknown))}; this table has: {', '.join(keys)}")
    chosen = [columns[keys.index(w)] for w in wanted] if wanted else list(columns)

    def raw(col: Column, row: dict[str, Any]) -> str:
        value = col.value(row)
        if isinstance(value, tuple):  # an interval: both ends unrounded, "[lo, hi]" ("" when it has none)
            ends = ["" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v) for v in value]
            return f"[{', '.join(ends)}]" if any(ends) else ""
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return ""
        # Numbers unrounded and ids whole (a spreadsheet computes with them); other cells as on screen.
        number = isinstance(value, Real) and not isinstance(value, bool)
        plain = col.ident or col.text is None or number
        text = shown((str(value) if plain else col.cell(row)).replace("\t", " ").replace("\n", " "))
        return text if number else spreadsheet_text(text)  # -inf is a number too, not a formula

    out = ["\t".join(c.key for c in chosen)]
    out += ["\t".join(raw(c, r) for c in chosen) for r in rows]
    # On stdout as written (console.print would expand the tabs); the CLI sends its other lines to stderr.
    sys.stdout.write("\n".join(out) + "\n")


def _write(console: Console, lines: list[str]) -> None:
    """Plain lines as written: no wrapping, no highlighting, no markup (cells are user text)."""
    console.print(Text("\n".join(lines)), soft_wrap=True, highlight=False)
