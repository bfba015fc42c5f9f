"""A new SQLite results database, created all or nothing.

The schema is built in a temporary file beside the database and published with a hard link: a creation
killed midway (kill -9, Ctrl-C, a full disk) leaves no database, where creating it in place left seven
tables and no schema revision, which every later command tripped over.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import socket
from pathlib import Path

from db.engine import make_engine
from db.schema import upgrade
from tvmbench.core.files import sync_folder
from tvmbench.core.liveness import pid_alive

#: A new database is built under this name in its folder, then published (``create_sqlite``).
_CREATING = ".tvmbench-creating"
# host tag, pid, random; "-wal", "-shm", "-journal": SQLite's files beside it.
_CREATING_NAME = re.compile(r"^\.tvmbench-creating-([0-9a-f]{8})-(\d+)-[0-9a-f]{8}\.db(-wal|-shm|-journal)?$")


def create_sqlite(path: Path) -> bool:
    """Make the SQLite database ``path`` at the newest schema, all or nothing; True when this call made it.

    False, having made nothing, when a file is there already or another process published one first
    (theirs is the database), and where the file system has no hard links (then the caller migrates in
    place, as before). The schema is built in a temporary file in the same folder (upgraded to head, its
    WAL checkpointed into it, closed), then published with ``os.link``, which creates ``path`` only if
    nothing is there: a creation killed midway (kill -9, Ctrl-C, a full disk) leaves no ``path`` at all,
    never a half-made schema that every later command trips over. ``os.replace`` would be atomic too,
    but would replace a database someone else created, and may already be writing to, meanwhile.
    """
    if path.exists():
        return False
    folder = path.parent
    _remove_leftovers(folder)
    temp = folder / f"{_CREATING}-{_host_tag()}-{os.getpid()}-{secrets.token_hex(4)}.db"
    try:
        engine = make_engine(f"sqlite:///{temp}", shown_as=path)
        try:
            upgrade(engine)
            with engine.connect() as conn:  # everything into the file itself: its WAL is not published
                conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            engine.dispose()
        try:
            os.link(temp, path)
        except FileExistsError:
            return False  # another process published first: its database is the one to open
        except OSError:
            return False  # no hard links here (some FUSE or FAT mounts): created in place, as before
        sync_folder(folder)  # a crash right after publishing must not lose the new name
        return True
    finally:
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{temp}{suffix}").unlink(missing_ok=True)


def _host_tag() -> str:
    """This host, in 8 hex digits: a leftover's pid means something only on the host that made it."""
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def _remove_leftovers(folder: Path) -> None:
    """Remove temporary files of creations that this host's processes started and did not finish
    (their process is gone: killed). Another host's, or a live process's, are left alone."""
    tag = _host_tag()
    try:
        names = [p.name for p in folder.iterdir() if p.name.startswith(_CREATING)]
    except OSError:
        return
    for name in names:
        found = _CREATING_NAME.match(name)
        if found is None or found.group(1) != tag or pid_alive(int(found.group(2))):
            continue
        # A leftover killed after publishing is a second name of the database: removing it removes a name.
        (folder / name).unlink(missing_ok=True)
