# The app image of docker-compose.yml (gpulab/app): the API server (`gpulab serve`) and the docker-pair and GPU
# workers (`gpulab worker`). Learner code never runs in it: those workers grade with GPULAB_SANDBOX=docker, in
# containers of the grading image (Dockerfile.gpu) that they start through the host's Docker engine. The
# default CPU worker, the grading host, is docker/grading-host/Dockerfile: this image's venv on the grading image.
#
# Build it with docker/build-images, which fills the wheelhouse docker/wheels/app first (requirements.lock
# without torch, TensorFlow and the dev tools, resolved on the host: pip's own config, PyPI or local
# indexes), so the build itself needs no index. BASE: the project's debootstrap image (docker/base-image.sh,
# Debian 12 with its python3.11); a slim Debian base also works, it gets python3 from apt.
ARG BASE=gpulab/base:bookworm

FROM ${BASE} AS python
RUN if ! command -v python3 >/dev/null 2>&1; then \
      apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 \
      && rm -rf /var/lib/apt/lists/*; \
    fi

FROM python AS packages
COPY docker/wheels/app/ /wheels/
# --without-pip: Debian's python3 has no ensurepip; pip comes from its wheel, offline like everything else.
RUN set -eu; \
    pip_wheel=$(ls /wheels/pip-*.whl 2>/dev/null | head -n1); \
    if [ -z "$pip_wheel" ] || [ ! -f /wheels/requirements.txt ]; then \
      echo "no wheelhouse: build with docker/build-images" >&2; exit 1; \
    fi; \
    python3 -m venv --without-pip /opt/venv; \
    /opt/venv/bin/python "$pip_wheel/pip" install -q --no-cache-dir --disable-pip-version-check --no-index \
      --find-links /wheels -r /wheels/requirements.txt -c /wheels/constraints.txt "$pip_wheel" /wheels/setuptools-*.whl

FROM python
RUN useradd --system --uid 999 --home-dir /var/lib/gpulab --create-home gpulab \
    && install -d -o gpulab -g gpulab /var/lib/gpulab/backups  # a fresh volume there is the user's (compose: backup)
# Only the venv travels from the stage above, not the wheelhouse; it stays cached until the pins change.
COPY --from=packages /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH GPULAB_DATA_DIR=/var/lib/gpulab PYTHONUNBUFFERED=1 LANG=C.UTF-8
WORKDIR /srv/gpulab
COPY pyproject.toml README.md ./
COPY migrations migrations
COPY exercises exercises
COPY worker worker
COPY app app
# Editable: the code finds migrations/ and exercises/ next to app/, as in a checkout. Offline: setuptools is in
# the venv already (--no-build-isolation), no index is asked.
RUN pip install -q --no-cache-dir --disable-pip-version-check --no-index --no-build-isolation --no-deps -e . \
    && python -c 'import app.main, app.cli, app.jobs.celery_app, app.jobs.tasks'
# Above: a runtime dependency missing from pyproject.toml fails the build here, not the first request.
# docker/build-images prunes untagged images with this label (never the cached stages above, which lack it).
LABEL gpulab.image=app
# The API runs as this user; docker-compose.yml runs the workers as root (see there why).
USER gpulab
EXPOSE 8000
CMD ["gpulab", "serve", "--host", "0.0.0.0", "--port", "8000"]
