"""Toolchain specs as a sweep file or the CLI gives them: a release, a wheel's path, or an interpreter."""

from __future__ import annotations

import hashlib
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers.toolchains.toolchain import ToolchainError

# A PEP 440 release such as 0.26.0, 0.25.0.post1, 0.28.0rc1 (no path separators, starts with a digit).
_RELEASE = re.compile(r"^\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?$")


@dataclass(frozen=True)
class ToolchainSpec:
    """A parsed spec: ``kind`` is "release", "wheel" or "interpreter"; ``value`` the release or the path."""

    kind: str
    value: str

    def name(self, tvm_version: str = "") -> str:
        """The toolchain's name: the release itself; for a wheel its version; for an interpreter the TVM it
        imports (``tvm_version``) and a hash of its path (two builds of one version stay apart)."""
        if self.kind == "release":
            return self.value
        if self.kind == "wheel":
            return "wheel-" + re.sub(r"[^A-Za-z0-9._-]+", "-", wheel_version(Path(self.value)))
        digest = hashlib.sha256(str(Path(self.value).absolute()).encode()).hexdigest()[:8]
        return f"python-{re.sub(r'[^A-Za-z0-9._-]+', '-', tvm_version)}-{digest}"


def parse(spec: Any) -> ToolchainSpec:
    """A spec from a release string, a wheel's path, or ``{"python": PATH}`` (ToolchainError when malformed).

    Nothing is checked on disk or on the index here: see ``check_wheel`` and ``provision``.
    """
    if isinstance(spec, dict):
        if set(spec) != {"python"} or not isinstance(spec["python"], str) or not spec["python"].strip():
            raise ToolchainError(f'toolchain {spec!r}: an interpreter is written {{ python = "/path/to/bin/python" }}')
        return ToolchainSpec("interpreter", spec["python"].strip())
    if not isinstance(spec, str) or not spec.strip():
        raise ToolchainError(f'toolchain {spec!r}: give a release ("0.26.0"), a wheel\'s path or {{ python = PATH }}')
    text = spec.strip()
    if _RELEASE.match(text):
        return ToolchainSpec("release", text)
    if text.endswith(".whl") or "/" in text or Path(text).exists():
        return ToolchainSpec("wheel", text)
    raise ToolchainError(
        f"toolchain {text!r} is neither a TVM release (such as 0.26.0) nor a path to a wheel: name a release, "
        "a .whl file, or an interpreter with --python"
    )


def wheel_version(path: Path) -> str:
    """The apache-tvm version a wheel's file name carries (apache_tvm-0.26.0-cp39-abi3-....whl -> 0.26.0)."""
    parts = path.name.split("-")
    return parts[1] if len(parts) >= 5 else path.stem


# PEP 427: {distribution}-{version}(-{build})?-{python}-{abi}-{platform}.whl, no part holding a space or "-".
_WHEEL_NAME = re.compile(
    r"^[A-Za-z0-9_.]+-[A-Za-z0-9_.!+]+(-\d[A-Za-z0-9_.]*)?-[A-Za-z0-9_.]+-[A-Za-z0-9_.]+-[A-Za-z0-9_.]+\.whl$"
)


def same_version(a: str, b: str) -> bool:
    """Whether two version texts are one PEP 440 version (packaging's comparison; text where it cannot read)."""
    try:
        from packaging.version import InvalidVersion, Version
    except ImportError:
        return a == b
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def check_wheel(path: Path) -> str:
    """The TVM version of a wheel file (ToolchainError when it is missing, not a wheel, or not apache-tvm).

    Everything pip would refuse about the file itself is refused here, before a venv is made for it.
    """
    if not path.exists():
        raise ToolchainError(f"wheel {path} does not exist: give the path of an apache-tvm .whl file")
    if not path.is_file() or path.suffix != ".whl" or not zipfile.is_zipfile(path):
        raise ToolchainError(f"{path} is not a wheel (a .whl zip archive): give the path of an apache-tvm .whl file")
    if not _WHEEL_NAME.match(path.name):
        raise ToolchainError(
            f"wheel {path}: {path.name!r} is not a wheel file name pip accepts "
            "(NAME-VERSION-PYTHON-ABI-PLATFORM.whl, as built: apache_tvm-0.26.0-cp39-abi3-linux_x86_64.whl); "
            "give the file its built name"
        )
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            infos = [n for n in names if n.endswith(".dist-info/METADATA")]
            if not infos:
                raise ToolchainError(
                    f"{path} is not a wheel (no .dist-info/METADATA inside): give an apache-tvm .whl file"
                )
            meta = archive.read(infos[0]).decode(errors="replace")
            has_wheel_file = infos[0].replace("/METADATA", "/WHEEL") in names
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, RuntimeError, OSError, EOFError) as exc:
        # A damaged archive (a bad CRC, a truncated download) or one zipfile cannot read (encrypted).
        raise ToolchainError(
            f"wheel {path} is damaged ({type(exc).__name__}: {exc}): download or build it again"
        ) from None
    name = re.search(r"^Name: *(.+)$", meta, re.M)
    version = re.search(r"^Version: *(.+)$", meta, re.M)
    if not name or name.group(1).strip().lower().replace("_", "-") != "apache-tvm" or not version:
        found = name.group(1).strip() if name else "no name"
        raise ToolchainError(f"wheel {path} is {found}, not apache-tvm: give an apache-tvm .whl file")
    if not has_wheel_file:
        raise ToolchainError(f"{path} is not a wheel (no .dist-info/WHEEL inside): give an apache-tvm .whl file")
    version_text = version.group(1).strip()
    if not same_version(wheel_version(path), version_text):
        # pip refuses it too ("inconsistent version"), after the venv was made.
        raise ToolchainError(
            f"wheel {path}: its file name says version {wheel_version(path)!r}, its METADATA {version_text!r}: "
            "give the file its built name"
        )
    return version_text
