"""The object store of an Etcd's backups (``spec.backup.destination``), opened with its credentials and CA from
their Secrets — for the engine's Backup and Restore steps and the backup schedule.

A missing Secret or key is a :class:`DestinationError` naming the field and the fix; the credentials go to the
store's client and nowhere else.
"""

from __future__ import annotations

from opsmanager import kube
from opsmanager.api import auth
from opsmanager.api import backup as backup_api
from opsmanager.api import etcd as etcd_api
from opsmanager.backup import store

FIELD = "spec.backup.destination"


class DestinationError(ValueError):
    """The destination cannot be used as configured (a Secret or key missing); nothing was sent anywhere."""


async def open_store(k: kube.Kube, db: etcd_api.Etcd) -> store.ObjectStore:
    """The store of ``db``'s backups; close it after use (``with``). Raises :class:`DestinationError`."""
    policy = db.spec.backup
    if policy is None:
        raise DestinationError(f"Etcd {db.metadata.namespace}/{db.metadata.name} has no spec.backup: set "
                               "spec.backup.destination (endpoint, bucket, credentialsSecret)")
    dest = policy.destination
    ns = db.metadata.namespace or "default"
    secret = dest.credentials_secret.name
    data = auth.decode(await k.get("v1", "Secret", ns, secret)) if secret else {}
    if not data:
        raise DestinationError(f"{FIELD}.credentialsSecret: Secret {ns}/{secret} not found; create it with "
                               f"{backup_api.KEY_ACCESS_KEY_ID} and {backup_api.KEY_SECRET_ACCESS_KEY}")
    missing = [key for key in (backup_api.KEY_ACCESS_KEY_ID, backup_api.KEY_SECRET_ACCESS_KEY) if not data.get(key)]
    if missing:
        raise DestinationError(f"{FIELD}.credentialsSecret: Secret {ns}/{secret} has no {' and no '.join(missing)}")
    ca: bytes | None = None
    if dest.ca is not None:
        ca_text = auth.decode(await k.get("v1", "Secret", ns, dest.ca.name)).get(dest.ca.key)
        if not ca_text:
            raise DestinationError(f"{FIELD}.ca: Secret {ns}/{dest.ca.name} has no key {dest.ca.key!r} with a PEM "
                                   "CA bundle")
        ca = ca_text.encode()
    try:
        return store.ObjectStore(dest.endpoint, dest.bucket, access_key_id=data[backup_api.KEY_ACCESS_KEY_ID],
                                 secret_access_key=data[backup_api.KEY_SECRET_ACCESS_KEY], prefix=dest.prefix,
                                 region=dest.region, ca_bundle=ca, field=FIELD)
    except ValueError as err:
        raise DestinationError(str(err)) from err
