"""Admission webhooks for Etcd and EtcdOpsRequest: pure validation (validation.py) and the HTTPS server (server.py)."""
