"""Filesystem checks and error wording shared by the dataset readers.

Every failure becomes a DatasetError that names the path (and the line when known), so
the pre-flight can show it verbatim.
"""

from __future__ import annotations

import os
from pathlib import Path

from genwire.errors import DatasetError

UTF8_BOM = b"\xef\xbb\xbf"


def require_file(path: Path, kind: str) -> None:
    """Fail early with a clear message instead of a bare OSError from open()."""
    if path.is_dir():
        raise DatasetError(f"{path}: is a directory, expected a {kind} file")
    if not path.exists():
        raise DatasetError(f"{path}: no such file")
    if not os.access(path, os.R_OK):
        raise DatasetError(f"{path}: cannot read (permission denied)")


def require_dir(path: Path) -> None:
    if not path.exists():
        raise DatasetError(f"{path}: no such directory")
    if not path.is_dir():
        raise DatasetError(f"{path}: is not a directory (documents datasets take a directory)")


def os_error(path: Path, exc: OSError) -> DatasetError:
    """Wrap an I/O error raised after the checks above (races, EIO, special files)."""
    reason = exc.strerror or exc.__class__.__name__
    return DatasetError(f"{path}: cannot read: {reason}")


def utf8_error(
    path: Path, data: bytes, exc: UnicodeDecodeError, *, offset: int = 0, first_line: int = 1
) -> DatasetError:
    """Name the line of the first undecodable byte.

    ``offset`` is where the decoded slice starts in ``data``; ``first_line`` is the line
    number of ``data``'s first byte (readers that decode line by line pass their own).
    """
    pos = offset + exc.start
    line = first_line + data.count(b"\n", 0, pos)
    return DatasetError(f"{path}:{line}: not valid UTF-8 (byte 0x{data[pos]:02x}); save the file as UTF-8")


def decode_utf8(path: Path, data: bytes) -> str:
    """Decode a whole file, dropping a leading BOM (editors on Windows add one)."""
    start = len(UTF8_BOM) if data.startswith(UTF8_BOM) else 0
    try:
        return data[start:].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise utf8_error(path, data, exc, offset=start) from None


def read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise os_error(path, exc) from None
