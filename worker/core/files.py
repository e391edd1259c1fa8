"""Reading files a sandbox wrote, trusting nothing about them.

Contract: ``read_capped(path, max_bytes)`` returns the bytes of ``path`` only when it is a plain file with one
link, not a symbolic link (never followed), of at most ``max_bytes`` (also when it grows while being read);
``None`` for anything else, a missing file included. It never raises for what the sandbox left there.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def read_capped(path: Path, max_bytes: int) -> bytes | None:
    """Read a plain, singly-linked file without following links; ``None`` if it is anything else or too big."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or info.st_size > max_bytes:
            return None
        chunks: list[bytes] = []
        remaining = max_bytes + 1  # one byte more tells a file that grew after fstat
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        data = b"".join(chunks)
        return None if len(data) > max_bytes else data
    finally:
        os.close(fd)
