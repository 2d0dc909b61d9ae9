"""opsmanager.etcd"""
