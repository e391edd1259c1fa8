"""A real `gpulab serve` process on SQLite with the real bank, shared by the end-to-end tests of one module."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import httpx
import pytest

from tests.support import child_env, free_port, wait_for

PASSWORD = "a-fine-long-password"
LEARNERS = ("ada@example.com", "bob@example.com")


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Migrate, sync the bank, add two learners, serve on a free port; yield the base URL."""
    data = tmp_path_factory.mktemp("serve")
    env = child_env(mode="dev", data_dir=str(data), secret_key="k" * 48)
    steps: list[tuple[list[str], str | None]] = [(["db", "upgrade"], None), (["exercises", "sync"], None)]
    steps += [(["user", "add", email, "--role", "learner", "--password-stdin"], PASSWORD + "\n") for email in LEARNERS]
    for args, stdin in steps:
        done = subprocess.run(["gpulab", *args], env=env, input=stdin, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
    port = free_port()
    log = data / "serve.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            ["gpulab", "serve", "--port", str(port)], env=env, stdout=sink, stderr=subprocess.STDOUT
        )
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if proc.poll() is not None:
            pytest.fail(log.read_text(errors="replace"))
        try:
            return httpx.get(f"{base}/login", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(up, timeout_s=60, interval_s=0.3)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=20)
