"""Certificate lifecycle: what each member really serves, expiry alerts, metrics, auto-renew.

``verdict`` is the pure decision core; ``metrics`` the Prometheus metrics it feeds; the scan (TLS handshakes), the
status/Event writers and the auto-renew request creation are I/O shells around it.
"""
