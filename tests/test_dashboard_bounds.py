"""Dashboard answers to what it cannot show: unknown sweeps to compare are 404, overlong values 400.

A real uvicorn server over HTTP on a database of two sweeps (rows written through ResultStore). Before,
`/compare` with unknown sweeps answered 200 with the error inside the page, and a 60 KB `?model=`
filter was echoed into every link of an 847 KB page.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from db.store import ResultStore
from tests.synthetic import T0, Result, add_sweep, noisy
from tests.test_dashboard import get, running
from tvmbench.dashboard.app import MAX_VALUE
from tvmbench.dashboard.server import open_readonly

A, B = "cmp000000001", "cmp000000002"


@pytest.fixture
def base(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'results.db'}"
    store = ResultStore(url)
    for i, sweep_id in enumerate((A, B)):
        results = [Result(samples=noisy(4.0 + i, seed=i))]
        add_sweep(store, sweep_id, results, label=f"l{i}", created_at=T0 + timedelta(days=i))
    store.close()
    reader = open_readonly(url)
    with running(reader) as served:
        yield served
    reader.close()


def test_compare_with_an_unknown_or_ambiguous_sweep_is_404(base: str) -> None:
    for path in (f"/compare?a=nosuch&b={B}", f"/compare?a={A}&b=nosuch"):
        status, _, page = get(base + path)
        assert status == 404 and "no sweep &#39;nosuch&#39;" in page, (path, status, page[:500])
        status, _, body = get(base + path.replace("/compare", "/api/compare"))
        assert status == 404 and "no sweep 'nosuch'" in json.loads(body)["error"], (path, status, body)
    status, _, body = get(f"{base}/api/compare?a=cmp&b={B}")
    assert status == 404 and f"ambiguous, 2 start with it: {A}, {B}" in json.loads(body)["error"]
    status, _, body = get(f"{base}/api/compare?a={A}&b={B}&threshold=lots")
    assert status == 400 and "?threshold='lots' is not a number" in json.loads(body)["error"]
    # Out of the range `results compare` accepts: refused as the CLI refuses them, not answered.
    for query, said in (("threshold=nan", "?threshold=nan: must be finite and at least 0"),
                        ("threshold=-1", "?threshold=-1: must be finite and at least 0"),
                        ("threshold=inf", "?threshold=inf: must be finite and at least 0"),
                        ("alpha=7", "?alpha=7: must be above 0 and below 1"),
                        ("alpha=0", "?alpha=0: must be above 0 and below 1")):  # fmt: skip
        status, _, body = get(f"{base}/api/compare?a={A}&b={B}&{query}")
        assert status == 400 and said in json.loads(body)["error"], (query, status, body)
    assert get(f"{base}/api/compare?a={A}&b={B}&threshold=0.1&alpha=0.01")[0] == 200
    assert get(f"{base}/compare?a={A}&b={B}")[0] == 200
    assert get(f"{base}/compare")[0] == 200, "the form with nothing chosen yet"


def test_an_overlong_filter_is_refused_not_echoed(base: str) -> None:
    huge = "m" * 60_000
    status, _, page = get(f"{base}/sweep/{A}?model={huge}")
    assert status == 400 and "?model= is 60000 characters long; at most 512" in page, (status, page[:500])
    assert huge[: MAX_VALUE + 1] not in page and len(page) < 20_000
    status, _, body = get(f"{base}/api/sweep/{A}?model={huge}&sort=median")
    assert status == 400 and "?model= is 60000 characters long" in json.loads(body)["error"]
    status, _, page = get(f"{base}/sweep/{A}?model={'m' * MAX_VALUE}")
    assert status == 200, "a value at the bound is answered (no rows match it)"
    status, _, body = get(f"{base}/api/job/{'f' * 600}")
    assert status == 400 and "{key} in the path is 600 characters long" in json.loads(body)["error"]
    many = ",".join(f"{i:012x}" for i in range(1000))  # the live pages' poll names every sweep it shows
    status, _, body = get(f"{base}/api/sweeps?watch={many}")
    assert status == 200 and json.loads(body) == []


def test_an_unknown_history_method_is_a_bad_request(base: str) -> None:
    status, _, body = get(f"{base}/api/sweep/{A}")
    key = json.loads(body)["results"][0]["job_key"]
    for path in (
        f"/api/history/{key}?method=bogus",
        f"/history/{key}?method=bogus",
        f"/history/{key}/plot.png?method=x",
    ):
        status, _, body = get(base + path)
        assert status == 400 and "choose from mad, zscore" in body, (path, status, body[:300])
    assert get(f"{base}/api/history/{key}?method=mad")[0] == 200
