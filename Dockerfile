# The trainer image for Vertex AI custom jobs and local `docker run`.
#
# Vertex AI's prebuilt TensorFlow training images stop before the TensorFlow
# this project pins, so the job runs in this custom container. The base image's
# TensorFlow must be the version pinned in setup.cfg (tests/test_dockerfile.py
# checks it): then `pip install .` keeps the image's GPU build of TensorFlow
# with the CUDA libraries it was built against instead of replacing it.
FROM tensorflow/tensorflow:2.21.0-gpu

# Log lines reach Cloud Logging when they are written, not when a buffer fills.
# The package goes into the image's own Python, next to its TensorFlow; newer
# pips refuse that (PEP 668) unless told it is intended.
ENV PYTHONUNBUFFERED=1 \
    PIP_BREAK_SYSTEM_PACKAGES=1

# Relative paths such as the default flagfile resolve against this directory.
WORKDIR /app
COPY . /app
RUN python -m pip install --no-cache-dir .

# Exec form: python is PID 1 and gets SIGTERM itself when Vertex AI preempts or
# stops a replica, so the trainer can save a checkpoint before it exits.
ENTRYPOINT ["python", "-m", "trainer.task"]
# Vertex AI's containerSpec.args replace this default command line.
CMD ["--flagfile=configs/cassava_resnet50.cfg"]
