"""What the compose tests share: finding ``docker compose`` (or Debian's ``docker-compose``) and refusing to skip in CI.

Contract: ``compose_command()`` returns the command line that runs compose; ``unavailable(reason)`` skips the
calling test, or fails it when ``GPULAB_REQUIRE_DOCKER=1`` (CI), where a missing engine is a broken run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import NoReturn

import pytest


def unavailable(reason: str) -> NoReturn:
    """Skip with ``reason``, or fail with it when ``GPULAB_REQUIRE_DOCKER=1``."""
    if os.environ.get("GPULAB_REQUIRE_DOCKER") == "1":
        pytest.fail(f"GPULAB_REQUIRE_DOCKER=1 but {reason}")
    pytest.skip(reason)


def compose_command() -> list[str]:
    """Return ``docker compose`` where the plugin is installed, else ``docker-compose``."""
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    if legacy:
        return [legacy]
    unavailable("neither `docker compose` nor docker-compose is installed (apt-get install docker-compose)")
