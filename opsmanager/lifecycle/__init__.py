"""Certificate lifecycle (issue 11): what each member really serves, expiry alerts, auto-renew.

``verdict`` is the pure decision core; the scan (TLS handshakes), the status/Event writers and the auto-renew
request creation are I/O shells around it.
"""
