"""Database URLs as given (a URL or a SQLite file's path) and as shown: never with their password."""

from __future__ import annotations

import re
from pathlib import Path

# user:password@ in any URL-like text (scheme://user:password@host): the password part is replaced.
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*:)(?P<password>[^@\s/]*)@")
MASK = "***"


def as_url(given: str) -> str:
    """``given`` as a SQLAlchemy URL: a path (``results.db``, ``~/r.db``) is that SQLite file, made absolute.

    Only text with no scheme is a path; one with ``?`` or ``#`` stays as given (a URL would read them as
    its query or fragment), and is then refused as no URL.
    """
    if "://" in given or given.startswith("sqlite:") or not given.strip() or any(c in given for c in "?#"):
        return given
    return f"sqlite:///{Path(given).expanduser().absolute()}"


def shown_url(url: str) -> str:
    """``url`` with its password replaced by ***, as SQLAlchemy renders it (the text as given if it is no URL)."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL at all: still hide whatever looks like user:password@
        return redact(url)


def redact(text: str, url: str | None = None) -> str:
    """``text`` with every URL password masked; ``url``'s password too wherever it appears by itself.

    Driver messages (psycopg's, SQLAlchemy's) quote the URL or its parts; one pass here covers them all.
    """
    text = _USERINFO.sub(lambda m: m.group("head") + MASK + "@", text)
    password = _password(url) if url else None
    if password and len(password) >= 4:  # a shorter one would mask ordinary words of the message
        from urllib.parse import quote

        for form in {password, quote(password, safe="")}:
            text = text.replace(form, MASK)
    return text


def password_in(url: str) -> bool:
    """Whether ``url`` carries a password."""
    return bool(_password(url))


def _password(url: str) -> str | None:
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).password
    except Exception:
        match = _USERINFO.search(url)
        return match.group("password") if match else None
