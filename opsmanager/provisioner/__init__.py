"""opsmanager.provisioner"""
