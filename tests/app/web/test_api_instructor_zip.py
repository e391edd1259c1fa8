"""Safe zip uploads: every refusal has its own clear message, and nothing unsafe is ever read."""

from __future__ import annotations

import io
import stat
import zipfile

import pytest

from tests.conftest import tiny_files
from worker.bank.folders import MAX_RATIO, MAX_ZIP_BYTES, read_zip
from worker.core.errors import InvalidInput

FILES = tiny_files(prompt_md="Add.\n", queue="cpu", tag="zip")


def make_zip(entries: dict[str, bytes | str], *, modes: dict[str, int] | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in entries.items():
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_DEFLATED
            if modes and name in modes:
                info.external_attr = modes[name] << 16
            archive.writestr(info, content)
    return buffer.getvalue()


def test_a_folder_zip_is_unwrapped_and_names_the_slug() -> None:
    folder = read_zip(make_zip({f"my-exercise/{p}": c for p, c in FILES.items()} | {"my-exercise/.DS_Store": "x"}))
    assert folder.slug_hint == "my-exercise"
    assert folder.files == FILES


@pytest.mark.parametrize(
    ("entries", "modes", "needle"),
    [
        ({"../evil.py": "x"}, None, "'..' is not allowed"),
        ({"ok/../../evil.py": "x"}, None, "'..' is not allowed"),
        ({"/etc/passwd.txt": "x"}, None, "absolute paths"),
        ({"C:/x.py": "x"}, None, "absolute paths"),
        ({"a\\b.py": "x"}, None, "backslashes"),
        ({"link.py": "/etc/passwd"}, {"link.py": stat.S_IFLNK | 0o777}, "symbolic link"),
        ({"dev.py": ""}, {"dev.py": stat.S_IFCHR | 0o600}, "device"),
        ({"fifo.py": ""}, {"fifo.py": stat.S_IFIFO | 0o600}, "device, FIFO"),
        ({"image.png": "x"}, None, "unsupported file type"),
        ({"latin.py": b"\xe9\xff"}, None, "not UTF-8"),
        ({"big.py": "x" * (256 * 1024 + 1)}, None, "larger than 256 KiB"),
    ],
)
def test_unsafe_members_are_refused(entries: dict[str, str | bytes], modes: dict[str, int] | None, needle: str) -> None:
    with pytest.raises(InvalidInput, match=needle.replace("(", r"\(")):
        read_zip(make_zip(entries, modes=modes))


def test_a_zip_bomb_is_refused_by_ratio() -> None:
    bomb = make_zip({"bomb.py": "\n" * (200 * 1024)})
    with pytest.raises(InvalidInput, match=f"inflates more than {MAX_RATIO} times"):
        read_zip(bomb)


def test_too_many_files_and_too_big_archives_are_refused() -> None:
    with pytest.raises(InvalidInput, match="entries; at most"):
        read_zip(make_zip({f"f{i}.py": "" for i in range(400)}))
    with pytest.raises(InvalidInput, match="larger than 2 MB"):
        read_zip(b"PK" + b"\0" * MAX_ZIP_BYTES)
    with pytest.raises(InvalidInput, match="not a valid zip"):
        read_zip(b"this is not a zip")


def test_total_uncompressed_size_is_bounded() -> None:
    import random

    rng = random.Random(1)
    # Two-letter random text compresses about 7:1: under the ratio limit, and 34 x 250 KiB fits in 2 MB zipped.
    entries = {f"f{i}.txt": "".join(rng.choices("ab", k=250 * 1024)) for i in range(34)}
    data = make_zip(entries)
    assert len(data) <= MAX_ZIP_BYTES
    with pytest.raises(InvalidInput, match="unpacks to more than 8 MB"):
        read_zip(data)
