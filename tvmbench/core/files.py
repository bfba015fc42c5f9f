"""Durable file operations shared by the store and the farm's state."""

from __future__ import annotations

import os
from pathlib import Path


def sync_folder(folder: Path) -> None:
    """fsync ``folder``, so that a name just created or renamed in it survives a crash; best effort (some file
    systems refuse fsync on a folder, and the name is there all the same)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
