"""opsmanager.api"""
