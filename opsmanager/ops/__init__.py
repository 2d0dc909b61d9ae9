"""opsmanager.ops"""
