"""`tvmbench report`: the HTML is self-contained and its plots render in a real headless chromium."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.synthetic import T0, Result, add_sweep, noisy
from tvmbench.cli import app

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def report_db(store):  # type: ignore[no-untyped-def]
    for i in range(4):
        add_sweep(store, f"h{i}", [Result(samples=noisy(4.0, seed=i))], created_at=T0 + timedelta(days=i))
    add_sweep(
        store,
        "rep0001",
        [
            Result(executor="vm-compiled", opt_level=2, samples=noisy(8.0, seed=1)),  # 2x its history
            Result(executor="vm-bytecode", opt_level=2, samples=noisy(6.0, seed=3)),
            Result(executor="vm-bytecode", opt_level=0, samples=noisy(7.0, seed=5)),
            Result(executor="vm-bytecode", opt_level=3, status="build", error="TVMError: boom"),
            Result(model="tiny_mlp", board_key="arm64-emu", target="arm64", emulated=True, samples=noisy(0.5)),
        ],
        label="rep",
        created_at=T0 + timedelta(days=9),
    )
    return store


def _images(page: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)]


def test_report_is_self_contained_with_plots_and_sections(report_db, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out, pngs = tmp_path / "report.html", tmp_path / "png"
    result = CliRunner().invoke(
        app, ["report", "rep", "-o", str(out), "--png", str(pngs), "--db", report_db.url], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    page = out.read_text()
    images = _images(page)
    assert len(images) == 3  # host latency, emulated latency, failures
    assert all(img.startswith(PNG_MAGIC) for img in images)
    assert not re.search(r"(src|href)=['\"](?!data:)", page)  # nothing fetched from anywhere
    assert sorted(p.name for p in pngs.iterdir()) == [
        "failures.png",
        "latency-tiny_cnn-host-ms-hw.png",
        "latency-tiny_mlp-arm64-emu-ms-emu.png",
    ]
    assert "vm-bytecode O2 per-target (host) is fastest" in page
    assert "TVMError: boom" in page
    regressions = page.split("<h2>Regressions against history</h2>")[1].split("<h2>")[0]
    assert "vm-compiled" in regressions and "vm-bytecode" not in regressions


def test_report_of_unknown_sweep_fails_cleanly(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = CliRunner().invoke(app, ["report", "nope", "-o", str(tmp_path / "r.html"), "--db", store.url])
    assert result.exit_code == 2
    assert "no sweep 'nope'" in result.output
    assert not (tmp_path / "r.html").exists()


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian chromium (scripts/setup.sh --system)")
def test_report_renders_in_headless_chromium(report_db, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from tvmbench.answers.html_report import write_report

    out = tmp_path / "report.html"
    written = write_report(report_db, "rep", out)
    profile = tmp_path / "chromium-profile"
    proc = subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--dump-dom",
            out.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    # The page's own script counts images that decoded (naturalWidth > 0) once the page has loaded.
    check = re.search(r'id="render-check"[^>]*data-images="(\d+)"[^>]*data-rendered="(\d+)"', proc.stdout)
    assert check, proc.stdout[:2000]
    assert int(check.group(1)) == written.plots == 3
    assert int(check.group(2)) == written.plots
