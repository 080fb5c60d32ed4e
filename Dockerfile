# olake in a container image: Debian 12's Python 3.11, a Java 17 runtime (Spark's driver) and olake installed
# alone (`pip install ".[kafka]"`: the Kafka client, no test or development tools) in /opt/olake. From a clone:
#
#   docker build -t registry.example.com/olake:0.1.0 .      # or podman build, buildah bud
#   docker run --rm registry.example.com/olake:0.1.0 --version
#
# BASE is any Debian 12 (bookworm) image; the default comes from Docker Hub. The image runs as user `olake`
# (uid 10001) with HOME=/home/olake, where olake keeps its locks, Spark's log and its JVM class archive;
# with a read-only root file system, give HOME and /tmp writable volumes. docs/running-continuously.md
# ("A container image", "As a Kubernetes Deployment") says more; tests/test_container_image.py builds and
# runs it (OLAKE_TEST_IMAGE=1).
ARG BASE=debian:bookworm-slim

FROM ${BASE} AS runtime
RUN apt-get update \
 && mkdir -p /usr/share/man/man1 \
 && apt-get install -y --no-install-recommends python3 python3-venv openjdk-17-jre-headless ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s "/usr/lib/jvm/java-17-openjdk-$(dpkg --print-architecture)" /usr/lib/jvm/java-17

FROM runtime AS build
COPY . /src
RUN python3 -m venv /opt/olake \
 && /opt/olake/bin/pip install --no-cache-dir --upgrade pip \
 && /opt/olake/bin/pip install --no-cache-dir "/src[kafka]"

FROM runtime
COPY --from=build /opt/olake /opt/olake
RUN useradd --create-home --home-dir /home/olake --uid 10001 --user-group olake
ENV PATH=/opt/olake/bin:$PATH JAVA_HOME=/usr/lib/jvm/java-17 HOME=/home/olake PYTHONDONTWRITEBYTECODE=1
USER 10001
WORKDIR /home/olake
ENTRYPOINT ["olake"]
CMD ["--help"]
