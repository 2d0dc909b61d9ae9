"""The secret-leak scanner of tests/e2e/test_ops_engine.py (``e2e/leaks.py``) can fail: it finds a planted key.

We test these aspects (fast, no sandbox):
- a private key planted in a log is found in its raw PEM form, in base64, and by a single line of its PEM body
  (a key logged cut, or with its newlines escaped, as JSON logs do);
- a Secret's decoded ``data`` value and a kubeconfig token are found too; the Finding names the place and the
  Secret, and its text never contains the value;
- values shorter than 16 bytes are ignored (they would match by chance), and clean text finds nothing.
"""

from __future__ import annotations

import base64
import json

from e2e import leaks
from opsmanager import pki


def test_a_planted_private_key_is_found_in_every_form_without_printing_it() -> None:
    key = pki.make_ca("planted").key_pem
    secrets = leaks.secret_data([{"metadata": {"namespace": "ns", "name": "db-server-cert"},
                                  "data": {"tls.key": base64.b64encode(key).decode(), "short": "YWJj"}}])
    body_line = key.split(b"\n")[1]
    haystacks = {
        "operator.log": b"2026 INFO loaded " + key,
        "etcd-0.log": json.dumps({"msg": key.decode()}).encode(),  # newlines escaped: body lines stay whole
        "Event ns/x": "annotations: " + base64.b64encode(key).decode(),
        "cut.log": b"...key was " + body_line + b" (cut)",
        "clean.log": b"everything fine, serial 1f2e3d4c5b6a79881726354453627180",
    }
    findings = leaks.scan(haystacks, secrets)
    assert {(f.where, f.form) for f in findings} == {
        ("operator.log", "raw"), ("etcd-0.log", "pem-body"), ("Event ns/x", "base64"), ("cut.log", "pem-body")}
    assert {f.secret for f in findings} == {"Secret ns/db-server-cert tls.key"}
    for f in findings:
        assert body_line.decode() not in str(f) and "PRIVATE KEY" not in str(f)


def test_a_kubeconfig_token_is_found_and_short_values_are_ignored() -> None:
    token = "sandbox-admin-0123456789abcdef0123456789abcdef"
    secrets = leaks.kubeconfig_secrets({"users": [{"name": "admin", "user": {"token": token}}]})
    secrets["tiny"] = b"abc123"
    found = leaks.scan({"sandbox.log": f"GET /api Authorization: Bearer {token}", "x.log": "abc123 abc123"},
                       secrets)
    assert [str(f) for f in found] == ["kubeconfig user admin token (raw form) found in sandbox.log"]
    assert leaks.needles(b"abc123") == []
