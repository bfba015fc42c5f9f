"""The dashboard's web application (Starlette): one HTML page and one JSON endpoint per view.

Pages are Jinja2 templates with autoescaping on, so sweep names, paths and error messages always reach
the browser as text. Plots are PNGs drawn here and the one script is served from the package: the pages
work with no internet. Every handler only reads (the store is opened read-only by dashboard.server).
A database that fails reads with a StoreError (damaged, no server answering) or a server that stops
answering mid-serve answers the error page (503) and logs its line once.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

import jinja2
from sqlalchemy.exc import InterfaceError, OperationalError
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from db.engine import StoreError
from tvmbench.answers import query as q
from tvmbench.answers import regressions
from tvmbench.answers import tuning as tuning_answers
from tvmbench.answers.compare import SameSweep
from tvmbench.dashboard import plots, views

if TYPE_CHECKING:
    from db.store import ResultStore

HERE = Path(__file__).parent
#: How often the pages of running sweeps ask for their progress (milliseconds).
POLL_MS = 1000
#: uvicorn's own error log: the dashboard's lines go where uvicorn's go, formatted as they are.
log = logging.getLogger("uvicorn.error")


def _fmt(value: Any, digits: int = 4) -> str:
    """A table cell: '-' for missing, short floats."""
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, float):
        # Large values (epoch seconds, byte counts) keep their integer digits; the rest 4 significant ones.
        return f"{value:.0f}" if abs(value) >= 1e5 else f"{value:.{digits}g}"
    return str(value)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,  # every template, whatever its extension
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["fmt"] = _fmt
    env.filters["short"] = lambda key: (key or "")[:12]
    env.filters["q"] = lambda value: quote(str(value), safe="")
    env.filters["pretty"] = lambda value: json.dumps(value, indent=2, default=str, sort_keys=True)
    env.globals["is_mapping"] = lambda value: isinstance(value, dict)
    env.globals["is_list"] = lambda value: isinstance(value, list)
    return env


#: The longest query or path value answered (characters): ids are 12-64, names and filters a few dozen.
#: Longer is refused (400) rather than echoed into every link of the page (a 60 KB filter made 847 KB).
MAX_VALUE = 512
#: The live pages' poll names every sweep they show running (13 characters each).
MAX_WATCH = 16384


def refused_values(request: Request) -> str | None:
    """What is wrong when a query or path value of ``request`` is over its bound or a query key is repeated,
    else None."""
    values = [(f"?{k}=", v) for k, v in request.query_params.multi_items()]
    values += [(f"{{{k}}} in the path", str(v)) for k, v in request.path_params.items()]
    for name, value in values:
        limit = MAX_WATCH if name == "?watch=" else MAX_VALUE
        if len(value) > limit:
            return f"{name} is {len(value)} characters long; at most {limit} are answered: shorten it"
    # Each parameter names one thing: `?a=X&a=Y` answered about Y alone, without a word (compare, history).
    keys = [k for k, _ in request.query_params.multi_items()]
    twice = next((k for k in keys if keys.count(k) > 1), None)
    if twice is not None:
        return f"?{twice}= is given {keys.count(twice)} times: give it once"
    return None


def shown_url(store: ResultStore) -> str:
    """The database as the user named it, password hidden."""
    from sqlalchemy.engine import make_url

    return make_url(store.url).render_as_string(hide_password=True)


class JSONResponse(Response):
    """JSON as the CLI prints it (NaN as null, datetimes as ISO strings)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return json.dumps(views.jsonable(content), indent=2, default=str).encode()


class HostCheck:
    """Answer only requests whose Host header names one of ``allowed_hosts`` (400 otherwise), an IPv6 literal
    such as ``[::1]:8321`` included: Starlette's TrustedHostMiddleware cut it at its first colon ("["), so a
    dashboard on ``--host ::1`` was served with no check, open to DNS rebinding."""

    def __init__(self, app: Any, allowed_hosts: list[str]) -> None:
        self.app, self.allowed = app, {h.lower() for h in allowed_hosts}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            host = Headers(scope=scope).get("host", "").lower()
            name = host[: host.find("]") + 1] if host.startswith("[") else host.split(":")[0]
            if name not in self.allowed:
                await PlainTextResponse("Invalid host header", status_code=400)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(
    store: ResultStore,
    *,
    tracker: str | None = None,
    poll_ms: int = POLL_MS,
    allowed_hosts: list[str] | None = None,
) -> Starlette:
    """The dashboard over ``store`` (open it read-only); ``tracker`` (HOST:PORT) adds the farm's live view.

    ``allowed_hosts``: the Host headers answered (others get 400), so that a web page elsewhere cannot
    read a loopback dashboard through DNS rebinding; None answers any.
    """
    env = _environment()
    env.globals["db_label"] = shown_url(store)

    def page(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        body = env.get_template(template).render(
            request=request, poll_ms=poll_ms, path=request.url.path, status_code=status_code, **context
        )
        return HTMLResponse(body, status_code=status_code)

    def answer(request: Request, template: str, data: Any, **context: Any) -> Response:
        """The page, or its data when the path is under /api/."""
        if request.url.path.startswith("/api/"):
            return JSONResponse(data)
        return page(request, template, data=data, **context)

    def not_found(request: Request, message: str, status_code: int = 404) -> Response:
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": message}, status_code=status_code)
        return page(request, "error.html", status_code=status_code, message=message)

    logged: set[str] = set()

    def store_failed(request: Request, exc: Exception) -> Response:
        """The error page (503) for a database that fails reads (damaged, no server), its line logged once."""
        message = str(exc)
        # Every page fails alike while it lasts: a traceback per request buried the one line that said why.
        if message not in logged:
            logged.add(message)
            log.error("%s", message)
        return not_found(request, message, 503)

    def connection_failed(request: Request, exc: Exception) -> Response:
        """The error page (503) for a database server that stopped answering mid-serve (stopped, restarted, a
        network gone): before, a bare 500 "Internal Server Error" and a traceback per request (one a second
        from each open Sweeps page). The pool reconnects by itself once the server is back."""
        from db.urls import redact
        from tvmbench.core.errors import one_line

        message = f"results database {shown_url(store)} cannot be read: {one_line(exc)}"
        then = "check that the database server runs; the dashboard answers again once it does"
        return store_failed(request, StoreError(redact(f"{message}; {then}", store.url)))

    def bounded(handler: Callable[[Request], Response]) -> Callable[[Request], Response]:
        """``handler``, answering 400 instead when a query or path value is over its bound or repeated."""

        def checked(request: Request) -> Response:
            problem = refused_values(request)
            return not_found(request, problem, 400) if problem else handler(request)

        return checked

    def index(request: Request) -> Response:
        return RedirectResponse("/sweeps")

    def sweeps_page(request: Request) -> Response:
        watch = request.query_params.get("watch")
        ids = [w for w in watch.split(",") if w] if watch is not None else None
        return answer(request, "sweeps.html", views.sweeps(store, ids))

    def sweep_page(request: Request) -> Response:
        try:
            query = views.SweepQuery.parse(request.query_params)
        except q.QueryError as exc:
            return not_found(request, str(exc), 400)
        try:
            data = views.sweep(store, request.path_params["ref"], query)
        except q.QueryError as exc:
            return not_found(request, str(exc))

        def sort_link(column: str) -> str:
            current = data["query"]
            desc = current["sort"] == column and not current["descending"]
            params = {f: current[f] for f in views.FILTERS if current[f]}
            params.update(sort=column, order="desc" if desc else "asc")
            return f"/sweep/{quote(data['sweep']['sweep_id'])}?{urlencode(params)}"

        return answer(
            request, "sweep.html", data, columns=views.RESULT_COLUMNS, filters=views.FILTERS, sort_link=sort_link
        )

    def sweep_plot(request: Request) -> Response:
        stem = request.path_params["stem"]
        try:
            found = q.resolve_sweep(store, request.path_params["ref"])
            drawn = plots.sweep_plot_png(store, found.id, stem)
        except q.QueryError as exc:
            return not_found(request, str(exc))
        if drawn is None:
            return not_found(request, f"sweep {found.id} has no plot {stem!r}")
        return Response(drawn, media_type="image/png", headers={"Cache-Control": "no-cache"})

    def job_page(request: Request) -> Response:
        params = request.query_params
        try:
            data = views.job(store, request.path_params["key"], params.get("sweep") or None, params.get("diff") or None)
        except (q.QueryError, q.NoSuchJob) as exc:
            return not_found(request, str(exc))
        return answer(request, "job.html", data, known=JOB_SECTIONS)

    def job_samples(request: Request) -> Response:
        try:
            data = views.job(store, request.path_params["key"], request.query_params.get("sweep") or None)
        except (q.QueryError, q.NoSuchJob) as exc:
            return not_found(request, str(exc))
        if not data["samples"]:
            return not_found(request, f"job {data['job_key']} has no samples")
        title = f"{data['model']} {data['executor']} O{data['opt_level']}: {len(data['samples'])} samples"
        drawn = plots.png(lambda: plots.samples_figure(data["samples"], data["unit"] or "ms", title))
        return Response(drawn, media_type="image/png")

    def job_curve(request: Request) -> Response:
        try:
            data = views.job(store, request.path_params["key"], request.query_params.get("sweep") or None)
        except (q.QueryError, q.NoSuchJob) as exc:
            return not_found(request, str(exc))
        tuning = (data.get("build") or {}).get("tuning")
        curve = tuning_answers.curve_of(tuning)
        if not curve:
            return not_found(request, f"job {data['job_key']} has no tuning curve")
        summary = data.get("tuning_curve") or {}
        budget = tuning_answers.budget_text(tuning.get("budget"), tuning.get("stopped_by"))  # "64" or "auto"
        title = tuning_answers.curve_title({**data, "budget": budget})
        measured, ort = summary.get("measured_median_ms"), summary.get("onnxruntime_median_ms")
        drawn = plots.png(lambda: tuning_answers.curve_figure(curve, title, measured, ort, tuning.get("checks")))
        return Response(drawn, media_type="image/png")

    def compare_page(request: Request) -> Response:
        params = request.query_params
        a, b = params.get("a"), params.get("b")
        data: dict[str, Any] | None = None
        error = None
        status = 200
        if a and b:
            try:
                threshold = _number(params, "threshold", low=0.0)
                alpha = _number(params, "alpha", low=0.0, high=1.0, open_low=True)
                data = views.compare(store, a, b, threshold=threshold, alpha=alpha)
            except SameSweep as exc:  # one sweep on both sides: refused as `results compare` refuses it
                error, status = str(exc), 400
            except q.QueryError as exc:  # an unknown or ambiguous sweep, like /sweep/{ref}
                error, status = str(exc), 404
            except ValueError as exc:  # a threshold or alpha that is no number
                error, status = str(exc), 400
        elif request.url.path.startswith("/api/"):
            error, status = "give two sweeps: /api/compare?a=BASELINE&b=NEW", 400
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": error}, status_code=status) if error else JSONResponse(data)
        return page(request, "compare.html", status, data=data, error=error, sweeps=views.sweeps(store), a=a, b=b)

    def unknown_method(request: Request, method: str) -> Response | None:
        """A 400 for a ?method= that is no regression method (a bad parameter, not a missing page)."""
        if method in regressions.METHODS:
            return None
        return not_found(request, f"?method={method!r}: choose from {', '.join(sorted(regressions.METHODS))}", 400)

    def history_page(request: Request) -> Response:
        method = request.query_params.get("method") or "zscore"
        if refused := unknown_method(request, method):
            return refused
        try:
            data = views.history(store, request.path_params["key"], method)
        except q.QueryError as exc:
            return not_found(request, str(exc))
        return answer(request, "history.html", data, methods=sorted(regressions.METHODS))

    def history_plot(request: Request) -> Response:
        method = request.query_params.get("method") or "zscore"
        if refused := unknown_method(request, method):
            return refused
        try:
            data = views.history(store, request.path_params["key"], method)
        except q.QueryError as exc:
            return not_found(request, str(exc))
        return Response(plots.png(lambda: plots.history_figure(data)), media_type="image/png")

    def farm_page(request: Request) -> Response:
        return answer(request, "farm.html", views.farm(store, tracker))

    routes = [
        Route("/", bounded(index)),
        Route("/sweeps", bounded(sweeps_page)),
        Route("/api/sweeps", bounded(sweeps_page)),
        Route("/sweep/{ref}", bounded(sweep_page)),
        Route("/api/sweep/{ref}", bounded(sweep_page)),
        Route("/sweep/{ref}/plot/{stem}.png", bounded(sweep_plot)),
        Route("/job/{key}", bounded(job_page)),
        Route("/api/job/{key}", bounded(job_page)),
        Route("/job/{key}/samples.png", bounded(job_samples)),
        Route("/job/{key}/curve.png", bounded(job_curve)),
        Route("/compare", bounded(compare_page)),
        Route("/api/compare", bounded(compare_page)),
        Route("/history/{key}", bounded(history_page)),
        Route("/api/history/{key}", bounded(history_page)),
        Route("/history/{key}/plot.png", bounded(history_plot)),
        Route("/farm", bounded(farm_page)),
        Route("/api/farm", bounded(farm_page)),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    middleware = [Middleware(HostCheck, allowed_hosts=allowed_hosts)] if allowed_hosts else []
    return Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={
            StoreError: store_failed,
            OperationalError: connection_failed,
            InterfaceError: connection_failed,
        },
    )


def _number(
    params: Any, name: str, default: float = 0.05, *, low: float, high: float = math.inf, open_low: bool = False
) -> float:
    """The query parameter ``name`` as a float (``default`` when absent) in the range the CLI's option takes:
    low <(=) value < high; ValueError naming it otherwise (nan and inf included)."""
    raw = params.get(name)
    try:
        value = float(raw) if raw else default
    except ValueError:
        raise ValueError(f"?{name}={raw!r} is not a number: give e.g. {name}=0.05") from None
    if not ((value > low if open_low else value >= low) and value < high):
        lower = f"above {low:g}" if open_low else f"at least {low:g}"
        bounds = f"{lower} and below {high:g}" if high != math.inf else f"finite and {lower}"
        raise ValueError(f"?{name}={raw}: must be {bounds}, e.g. {name}=0.05")
    return value


#: Keys of `results show --json` that the job page shows in their own section; any other key (what
#: later issues add: tuning, memory, board state...) is listed under "More recorded data".
JOB_SECTIONS = frozenset(
    {
        "sweep_id", "job_key", "model", "target", "board_key", "board", "executor", "kernels_path", "opt_level",
        "pipeline", "status", "unit", "median_ms", "std_ms", "samples", "median", "flash_bytes", "ram_bytes",
        "max_abs_err", "emulated", "equivalent_to", "fingerprint", "compile_s", "kernel_count", "pass_count",
        "error", "config", "build", "runs", "same_program_as", "kernel_profile", "diff_job", "pass_diff",
        "kernel_alone_ms",
        "diff_labels", "tuning", "memory", "board_state", "tuning_curve",
    }
)  # fmt: skip
