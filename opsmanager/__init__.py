"""etcd ops-manager: a Kubernetes operator for day-2 operations on etcd clusters (ReconfigureTLS first)."""

__version__ = "0.1.0"
