"""Admission webhooks for Etcd and EtcdOpsRequest: the pure rules (the ``validation`` package), the review envelope
(admission.py), the Etcd lookups over the Kubernetes API (lookup.py) and the HTTPS server (server.py)."""
