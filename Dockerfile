# The operator image: the `opsmanager` package and its runtime dependencies only (no sandbox, test or codegen
# extra, no e2e harness; tests/test_packaging.py checks this file). Default command: `opsmanager run` (the
# operator). The admission webhook runs from the same image with args `webhook serve --host 0.0.0.0 --port 8443 --tls-cert /tls/tls.crt --tls-key /tls/tls.key`
# (deploy/base/webhook/deployment.yaml); the install bundle names this image in one place, deploy/base/kustomization.yaml.
# etcdutl of each supported etcd minor, for the members' restore init container (`opsmanager restore-member`,
# which looks for /usr/local/lib/opsmanager/etcd-<major>.<minor>/etcdutl): built from the same pinned Go modules as
# the test control plane (sandbox/controlplane/etcd-*/go.mod); and etcdauth (tools/etcdauth), which sets the root
# password in a restored member's data (/usr/local/lib/opsmanager/etcdauth); and etcdstop (tools/etcdstop), which the
# members' etcd runs under (/usr/local/lib/opsmanager/etcdstop, copied into each pod by its init container).
FROM golang:1.26 AS etcdutl
WORKDIR /src
COPY sandbox/controlplane/etcd-3.5/go.mod sandbox/controlplane/etcd-3.5/go.sum ./etcd-3.5/
COPY sandbox/controlplane/etcd-3.6/go.mod sandbox/controlplane/etcd-3.6/go.sum ./etcd-3.6/
COPY tools/etcdauth ./etcdauth/
COPY tools/etcdstop ./etcdstop/
RUN cd etcd-3.5 && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/etcd-3.5/etcdutl go.etcd.io/etcd/etcdutl/v3 \
 && cd ../etcd-3.6 && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/etcd-3.6/etcdutl go.etcd.io/etcd/etcdutl/v3 \
 && cd ../etcdauth && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/etcdauth . \
 && cd ../etcdstop && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/etcdstop .

# The product's wheel, from its sources alone.
FROM debian:bookworm-slim AS wheel
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-pip && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY opsmanager ./opsmanager
RUN pip wheel --no-cache-dir --no-deps -w /dist .

# Debian's python3 with the wheel and its runtime dependencies from PyPI. The sandbox builds this same image
# without Docker (opsmanager_sandbox.realnodes.operator_image reads this stage: base, packages, user, entrypoint);
# tests/sandbox/test_operator_image.py keeps the two in step.
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-pip && rm -rf /var/lib/apt/lists/*
COPY --from=wheel /dist /tmp/dist
RUN pip install --no-cache-dir --break-system-packages /tmp/dist/*.whl && rm -rf /tmp/dist
COPY --from=etcdutl /out /usr/local/lib/opsmanager
RUN useradd --system --uid 65532 --no-create-home --shell /usr/sbin/nologin opsmanager
USER 65532:65532
ENV PYTHONUNBUFFERED=1
ENTRYPOINT ["opsmanager"]
CMD ["run"]
