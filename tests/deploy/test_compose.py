"""docker-compose.yml validates, keeps secrets out, and gives the Docker socket to the workers alone.

Needs ``docker compose`` or Debian's ``docker-compose`` (no engine: ``config`` only reads the file). Without
either the tests skip, unless ``GPULAB_REQUIRE_DOCKER=1`` (CI) makes that a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.compose import compose_command
from worker.core.config import REPO_ROOT

COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
PAIRS_FILE = REPO_ROOT / "docker-compose.docker-pair.yml"
SECRETS = {"GPULAB_SECRET_KEY": "s" * 48, "POSTGRES_PASSWORD": "test-password-not-used"}
SOCKET = "/var/run/docker.sock"


def _config(env: dict[str, str], *args: str, pairs: bool = False) -> subprocess.CompletedProcess[str]:
    """Run ``compose config`` on docker-compose.yml (``pairs``: with docker-compose.docker-pair.yml added)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("GPULAB_", "POSTGRES_"))}
    files = ["-f", str(COMPOSE_FILE)] + (["-f", str(PAIRS_FILE)] if pairs else [])
    return subprocess.run(
        [*compose_command(), *files, "--project-directory", str(REPO_ROOT), *args, "config"],
        capture_output=True, text=True, env={**clean, **env}, timeout=60,
    )  # fmt: skip


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    """The resolved configuration with every profile, as compose itself reads it."""
    result = _config(
        SECRETS, "--profile", "gpu", "--profile", "docker-pair", "--profile", "gpu-docker-pair", pairs=True
    )
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


def test_compose_file_validates_with_every_service(config: dict[str, Any]) -> None:
    assert set(config["services"]) == {
        "postgres", "redis", "api", "backup", "worker-cpu", "worker-cpu-docker", "worker-gpu", "worker-gpu-docker",
    }  # fmt: skip
    for name, service in config["services"].items():
        assert "healthcheck" in service, name
    assert {"postgres-data", "redis-data", "gpulab-data", "gpulab-backups"} <= set(config["volumes"])


def test_backups_run_nightly_with_a_retention_rule(config: dict[str, Any]) -> None:
    backup = config["services"]["backup"]
    assert "profiles" not in backup  # on by default
    command = " ".join(backup["command"])
    assert "gpulab backup /var/lib/gpulab/backups --daily-at 03:00 --keep 14" in command
    assert any("gpulab-backups" in str(v) for v in backup["volumes"])
    assert "/var/run/docker.sock" not in str(backup["volumes"])


def test_only_workers_get_the_docker_socket(config: dict[str, Any]) -> None:
    def mounts(service: dict[str, Any]) -> list[str]:
        return [v["source"] if isinstance(v, dict) else v.split(":")[0] for v in service.get("volumes", [])]

    holders = {name for name, service in config["services"].items() if SOCKET in mounts(service)}
    assert holders == {"worker-cpu-docker", "worker-gpu-docker"}  # the docker-pair profiles, never a default
    for name in holders:
        assert config["services"][name]["environment"]["GPULAB_SANDBOX"] == "docker"
    assert config["services"]["worker-cpu-docker"]["profiles"] == ["docker-pair"]
    assert config["services"]["worker-gpu-docker"]["profiles"] == ["gpu-docker-pair"]


def test_the_stack_and_its_gpu_profile_hold_no_docker_socket_anywhere() -> None:
    result = _config(SECRETS, "--profile", "gpu")
    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)
    assert "worker-gpu" in resolved["services"] and "worker-gpu-docker" not in resolved["services"]
    assert SOCKET not in result.stdout and "docker.sock" not in result.stdout
    assert "docker.sock" not in COMPOSE_FILE.read_text()  # only docker-compose.docker-pair.yml names it


@pytest.mark.parametrize(("name", "image"), [("worker-cpu", "gpulab/grading-host:cpu"),
                                             ("worker-gpu", "gpulab/grading-host:gpu")])  # fmt: skip
def test_the_grading_hosts_hold_sys_admin_and_their_seccomp_profile_and_nothing_more(
    config: dict[str, Any], name: str, image: str
) -> None:
    host = config["services"][name]
    assert host["image"] == image and host["init"] is True
    assert ("profiles" not in host) is (name == "worker-cpu")  # the default CPU worker; the GPU one is a profile
    assert host["environment"]["GPULAB_SANDBOX"] == "local"
    assert host["cap_add"] == ["SYS_ADMIN"]
    (option,) = host["security_opt"]
    assert option.replace(":", "=", 1) == "seccomp=./docker/grading-host/seccomp.json"  # docker-compose writes ":"
    assert not host.get("privileged") and not host.get("devices") and "cap_drop" not in host
    assert all(not str(v).startswith(("/var/run", "/sys", "/dev", "/proc")) for v in host.get("volumes", []))
    for other, service in config["services"].items():  # the API and the rest: no privilege at all
        if other not in ("worker-cpu", "worker-gpu"):
            assert not service.get("cap_add") and not service.get("security_opt") and not service.get("privileged")
    profile = json.loads((REPO_ROOT / "docker" / "grading-host" / "seccomp.json").read_text())
    refused = {name for rule in profile["syscalls"] for name in rule["names"] if rule["action"] == "SCMP_ACT_ERRNO"}
    assert {"ptrace", "bpf", "kexec_load", "init_module", "keyctl", "reboot"} <= refused
    assert not {"mount", "pivot_root", "unshare"} & refused  # what building a sandbox takes


@pytest.mark.parametrize("name", ["worker-gpu", "worker-gpu-docker"])
def test_gpu_workers_are_profiles_with_an_nvidia_reservation(config: dict[str, Any], name: str) -> None:
    gpu = config["services"][name]
    assert gpu["profiles"] == (["gpu"] if name == "worker-gpu" else ["gpu-docker-pair"])
    (device,) = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    assert gpu["environment"]["GPULAB_GPU_IDS"] and gpu["environment"]["GPULAB_GPUS_PER_JOB"]
    default = _config(SECRETS, "--services")
    assert name not in default.stdout.split()


def test_api_migrates_before_it_serves(config: dict[str, Any]) -> None:
    command = " ".join(config["services"]["api"]["command"])
    assert command.index("gpulab db upgrade") < command.index("gpulab serve --host 0.0.0.0")


def test_secrets_come_from_the_environment_only() -> None:
    missing = _config({"POSTGRES_PASSWORD": "x"})
    assert missing.returncode != 0 and "GPULAB_SECRET_KEY" in missing.stderr
    text = COMPOSE_FILE.read_text()
    assert SECRETS["GPULAB_SECRET_KEY"] not in text
    raw = yaml.safe_load(text)
    for service in raw["services"].values():
        env = service.get("environment", {})
        for key in ("GPULAB_SECRET_KEY", "POSTGRES_PASSWORD"):
            assert key not in env or str(env[key]).startswith("${"), key
    assert str(raw["x-app-env"]["GPULAB_SECRET_KEY"]).startswith("${GPULAB_SECRET_KEY:?")


def test_dockerignore_keeps_the_checkout_out_of_build_contexts() -> None:
    rules = [line for line in (REPO_ROOT / ".dockerignore").read_text().splitlines() if line and line[0] != "#"]
    assert rules[0] == "*"  # everything out, then only what the images use back in
    assert not {"!.venv", "!.venv/", "!.git", "!.git/", "!.data", "!.data/"} & set(rules)


def test_grading_image_recipe_names_its_contract() -> None:
    text = (REPO_ROOT / "Dockerfile.gpu").read_text()
    assert "ARG BASE=" in text and "USER 10001:10001" in text and "COPY worker/runner /opt/gpulab/runner" in text
    assert Path(REPO_ROOT / "docker" / "build-image").stat().st_mode & 0o111


def test_every_image_is_built_here_from_the_projects_base(config: dict[str, Any]) -> None:
    expected = {"postgres": "gpulab/postgres:15", "redis": "gpulab/redis:7", "worker-cpu": "gpulab/grading-host:cpu",
                "worker-gpu": "gpulab/grading-host:gpu"}  # fmt: skip
    for name, service in config["services"].items():
        assert service["image"] == expected.get(name, "gpulab/app:latest"), name  # nothing from Docker Hub
        if name in ("worker-cpu", "worker-gpu"):  # the grading image with the app's venv: both built on the base
            flavor = name.removeprefix("worker-")
            assert service["build"]["args"] == {"GRADER": f"gpulab/grader:{flavor}", "APP": "gpulab/app:latest"}
            continue
        if name.endswith("-docker"):  # docker-compose.docker-pair.yml's: the app image the stack builds, no recipe
            assert "build" not in service, name
            continue
        assert service["build"]["args"] == {"BASE": "gpulab/base:bookworm"}, name
    for recipe in ("Dockerfile", "docker/postgres/Dockerfile", "docker/redis/Dockerfile"):
        assert "ARG BASE=gpulab/base:bookworm\n" in (REPO_ROOT / recipe).read_text(), recipe
    assert Path(REPO_ROOT / "docker" / "build-images").stat().st_mode & 0o111


def test_only_the_api_is_published_and_on_loopback(config: dict[str, Any]) -> None:
    def host_ips(service: dict[str, Any]) -> list[str]:  # `docker compose` gives dicts, docker-compose strings
        return [p.get("host_ip", "") if isinstance(p, dict) else p.split(":")[0] for p in service.get("ports", [])]

    published = {name: host_ips(s) for name, s in config["services"].items() if s.get("ports")}
    assert published == {"api": ["127.0.0.1"]}  # PostgreSQL and Redis: the compose network only
