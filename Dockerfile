# The trainer image for Vertex AI custom jobs and local `docker run`.
#
# Vertex AI's prebuilt TensorFlow training images stop before the TensorFlow
# this project pins, so the job runs in this custom container. The base image's
# TensorFlow must be the version pinned in constraints.txt
# (tests/test_dockerfile.py checks it): then installing the pins keeps the
# image's GPU build of TensorFlow with the CUDA libraries it was built against
# instead of replacing it.
#
# BASE_IMAGE is the TensorFlow GPU runtime image, tag 2.21.0-gpu (Ubuntu 22.04,
# Python 3.11). Pin it by digest where Docker Hub can be reached:
#   docker buildx imagetools inspect tensorflow/tensorflow:2.21.0-gpu
# and append "@sha256:<digest>" below (the static test accepts and checks it).
# scripts/container_check.py builds this file unchanged except for BASE_IMAGE,
# which it points at a local Debian bookworm stand-in with the same Python.
ARG BASE_IMAGE=tensorflow/tensorflow:2.21.0-gpu
FROM ${BASE_IMAGE}

# Log lines reach Cloud Logging when they are written, not when a buffer fills.
# The packages go into the image's own Python, next to its TensorFlow; newer
# pips refuse that (PEP 668) unless told it is intended.
ENV PYTHONUNBUFFERED=1 \
    PIP_BREAK_SYSTEM_PACKAGES=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The user the trainer runs as. It owns only its home (Keras and TFDS caches)
# and /app/runs (relative --model_dir defaults); everything else stays root's.
RUN useradd --create-home --uid 1000 --user-group trainer

# Relative paths such as the default flagfile resolve against this directory.
WORKDIR /app

# The dependencies first, read from setup.cfg (the ranges) and
# constraints.txt (the exact versions CI tests) alone: a code change reuses
# this layer instead of reinstalling TensorFlow: the core ones (the quick
# start's digits ship with the trainer, in trainer/bundled_data/).
COPY setup.cfg constraints.txt /app/
RUN python -c 'import configparser; c = configparser.ConfigParser(); \
c.read("setup.cfg"); print(c["options"]["install_requires"])' \
      > /tmp/requirements.txt \
 && python -m pip install -c constraints.txt -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt

# Then the code, installed without touching the dependencies.
COPY . /app
RUN python -m pip install --no-deps . \
 && rm -rf build ./*.egg-info \
 && install -d -o trainer -g trainer /app/runs

USER trainer

# Exec form: python is PID 1 and gets SIGTERM itself when Vertex AI preempts or
# stops a replica, so the trainer can save a checkpoint before it exits.
ENTRYPOINT ["python", "-m", "trainer.task"]
# Vertex AI's containerSpec.args replace this default command line.
CMD ["--flagfile=configs/cassava_resnet50.cfg"]
