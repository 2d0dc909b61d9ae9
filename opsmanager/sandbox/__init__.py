"""opsmanager.sandbox"""
