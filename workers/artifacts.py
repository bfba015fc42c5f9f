"""Content-addressed artifact cache and the ELF facts used to guard uploads."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

# e_machine values of the ELF header -> uname -m names
_ELF_MACHINES = {
    3: "i686",
    8: "mips",
    20: "ppc",
    21: "ppc64",
    40: "armv7l",
    62: "x86_64",
    183: "aarch64",
    243: "riscv64",
}


def elf_arch(data: bytes) -> str | None:
    """Architecture of an ELF image from its header, or None if it is not ELF."""
    if len(data) < 20 or data[:4] != b"\x7fELF":
        return None
    byteorder = "little" if data[5] == 1 else "big"
    machine = int.from_bytes(data[18:20], byteorder)
    return _ELF_MACHINES.get(machine, f"elf-machine-{machine}")


def arch_compatible(artifact_arch: str | None, board_arch: str | None) -> bool:
    """Whether an artifact can load on a board; unknown on either side is not refused."""
    if not artifact_arch or not board_arch:
        return True
    normal = {"arm64": "aarch64", "armv7": "armv7l", "armv8l": "armv7l", "armhf": "armv7l", "amd64": "x86_64"}
    return normal.get(artifact_arch, artifact_arch) == normal.get(board_arch, board_arch)


class ArtifactCache:
    """Files named by their sha256 under one folder; writes are atomic, reads verify the hash."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, sha256: str) -> Path:
        return self.root / sha256[:2] / f"{sha256}.so"

    def put(self, data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        target = self.path(sha)
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".part")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, target)
            except BaseException:  # a full disk, an interrupt: no half-written .part left to fill it further
                Path(tmp).unlink(missing_ok=True)
                raise
        return sha

    def get(self, sha256: str) -> bytes | None:
        """The artifact's bytes, or None when missing or corrupted (so the caller rebuilds)."""
        target = self.path(sha256)
        try:
            data = target.read_bytes()
        except FileNotFoundError:
            return None
        if hashlib.sha256(data).hexdigest() != sha256:
            target.unlink(missing_ok=True)
            return None
        return data

    def has(self, sha256: str) -> bool:
        return self.path(sha256).is_file()
