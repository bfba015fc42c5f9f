"""`tvmbench serve`: a read-only web dashboard over the results database (Starlette + Jinja2, run by uvicorn)."""
