# The operator image: the `opsmanager` package and its runtime dependencies only (no sandbox, test or codegen
# extra, no e2e harness; tests/test_packaging.py checks this file). Default command: `opsmanager run` (the
# operator). The admission webhook runs from the same image with args `webhook serve --host 0.0.0.0 --port 8443 --tls-cert /tls/tls.crt --tls-key /tls/tls.key`
# (deploy/base/webhook/deployment.yaml); the install bundle names this image in one place, deploy/base/kustomization.yaml.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY opsmanager ./opsmanager
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
COPY --from=build /install /usr/local
RUN useradd --system --uid 65532 --no-create-home --shell /usr/sbin/nologin opsmanager
USER 65532:65532
ENV PYTHONUNBUFFERED=1
ENTRYPOINT ["opsmanager"]
CMD ["run"]
