# The app image of docker-compose.yml: the API server (`gpulab serve`) and the Celery grading workers
# (`gpulab worker`). Learner code never runs in it: workers grade with GPULAB_SANDBOX=docker, in containers
# of the grading image (Dockerfile.gpu) that they start through the host's Docker engine.
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}
WORKDIR /srv/gpulab
COPY requirements.lock pyproject.toml README.md ./
# torch and TensorFlow belong to the grading image, not to the server: leave them (and their CUDA wheels) out.
RUN grep -viE '^(torch|tensorflow|tensorboard|keras|nvidia-|triton)' requirements.lock > /tmp/requirements.txt \
    && pip install --no-cache-dir --disable-pip-version-check -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt
COPY app app
COPY worker worker
COPY migrations migrations
COPY exercises exercises
# Editable: the code finds migrations/ and exercises/ next to app/, as in a checkout.
RUN pip install --no-cache-dir --disable-pip-version-check --no-deps -e . \
    && useradd --system --uid 999 --home-dir /var/lib/gpulab --create-home gpulab
ENV GPULAB_DATA_DIR=/var/lib/gpulab PYTHONUNBUFFERED=1
# The API runs as this user; docker-compose.yml runs the workers as root (see there why).
USER gpulab
EXPOSE 8000
CMD ["gpulab", "serve", "--host", "0.0.0.0", "--port", "8000"]
