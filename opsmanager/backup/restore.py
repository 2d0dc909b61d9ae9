"""Restore one etcd member from a snapshot in the object store: ``opsmanager restore-member``, the init container
each member pod of an Etcd with backups runs (the operator's own image) before etcd starts.

**The plan** (:class:`RestorePlan`, JSON, written by the engine into a ConfigMap mounted as an optional volume at
:data:`DEFAULT_PLAN_PATH`): which object to restore (``endpoint``, ``bucket``, ``key``, ``region``, ``prefix``,
``caFile``), what it must be (``sha256``, ``revision``), the new cluster (``initialCluster``, ``token``, every
member's ``peerURLs``), where the member's data lives (``dataDir``) and which etcd writes it (``etcdVersion``: the
``etcdutl`` of that minor restores). The S3 credentials come from the environment (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, from a Secret), never from the plan, and are never printed.

**What a run does** (:func:`restore_member`):

1. no plan file → nothing (exit 0): the volume is optional, an Etcd that is not being restored has none;
2. the plan's ``id`` already in the marker beside the data dir (``<parent of dataDir>/.restored``) → nothing: this
   member was restored by this plan before (the pod restarted, or etcd has run since and must keep its data);
3. download the object into a work directory beside the data dir (same filesystem, so the final rename is atomic);
4. check it: the file's SHA-256 is the plan's, etcd's sha256 trailer and the bbolt meta pages
   (:func:`~opsmanager.backup.snapshot.verify`), and the revision inside (:func:`~opsmanager.backup.snapshot
   .content_revision`) is the plan's;
5. ``etcdutl snapshot restore`` into the work directory (:func:`etcdutl_argv`): this member's name and peer URL,
   the plan's initial cluster and token — a new cluster ID, the revisions kept exactly (no ``--bump-revision``, so
   no ``--mark-compacted``: both etcd 3.5 and 3.6 allow bumping only together with marking compacted, and a restore
   to the snapshot's own revision needs neither);
6. with ``rootPasswordFile`` (an Etcd with authentication): ``etcdauth set-root`` sets that password as the
   ``root`` user's in the restored database, authentication on (:func:`set_root_password`) — the snapshot's users
   are the ones of the day it was taken, and its root password may be one a RotateAuth has since rotated away;
7. swap: the old data dir renamed into the work directory, the restored one renamed into its place, the marker
   written (atomically), the work directory deleted.

Any failure leaves the old data dir as it was (a swap that fails half-way is rolled back; a run that finds the work
directory of a run that died mid-swap puts the old data dir back first) and raises :class:`RestoreFailed`, whose
message is one line naming what failed and the fix; :func:`main` prints it to stderr and exits 1.

The subprocess calls are :func:`run_etcdutl` and :func:`set_root_password` (parameters of :func:`restore_member`, so
tests can replace them); the download is :func:`download_snapshot` (likewise).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

from opsmanager.backup import snapshot

# The plan's model lives in a module of its own, which the engine imports without this program; named here too.
from opsmanager.backup.restoreplan import PlanError, RestorePlan

if TYPE_CHECKING:
    from opsmanager.backup import store

PLAN_MOUNT: Final = "/etc/opsmanager/restore"
"""Where the init container mounts the plan's ConfigMap (an optional volume)."""
PLAN_FILE: Final = "plan.json"
"""The ConfigMap's key, the file name under :data:`PLAN_MOUNT`."""
DEFAULT_PLAN_PATH: Final = f"{PLAN_MOUNT}/{PLAN_FILE}"
MARKER_NAME: Final = ".restored"
"""The marker file, beside the data dir: JSON with the ``id`` of the plan that restored this member."""
WORK_PREFIX: Final = ".restore-"
"""The work directory beside the data dir: ``.restore-<id>`` (the download, the restored data dir, the old one)."""
ENV_ACCESS_KEY_ID: Final = "AWS_ACCESS_KEY_ID"
ENV_SECRET_ACCESS_KEY: Final = "AWS_SECRET_ACCESS_KEY"
ENV_POD_NAME: Final = "POD_NAME"
ETCDUTL_ENV_PREFIX: Final = "OPSMANAGER_ETCDUTL_"
"""``OPSMANAGER_ETCDUTL_<major>_<minor>``: the etcdutl of that etcd minor (the sandbox sets it)."""
ETCDUTL_IMAGE_PATH: Final = "/usr/local/lib/opsmanager/etcd-{major}.{minor}/etcdutl"
"""Where the operator's image keeps the etcdutl of each supported etcd minor."""
ETCDUTL_TIMEOUT: Final = 3600.0
ETCDAUTH_ENV: Final = "OPSMANAGER_ETCDAUTH"
"""The ``etcdauth`` tool (``tools/etcdauth``; the sandbox sets it)."""
ETCDAUTH_IMAGE_PATH: Final = "/usr/local/lib/opsmanager/etcdauth"
"""Where the operator's image keeps ``etcdauth``."""
ETCDAUTH_TIMEOUT: Final = 60.0  # one bcrypt hash and one bbolt transaction

class RestoreFailed(Exception):
    """A restore that did not happen; the message is one line: what failed, then the fix. The old data dir is as it
    was."""


def load_plan(path: str | Path) -> RestorePlan | None:
    """The plan at ``path``; None when there is no file (no restore: the optional volume is absent or empty)."""
    try:
        text = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise PlanError(f"{path} is a directory, not a plan file") from None
    return RestorePlan.from_json(text)


# -- etcdutl ----------------------------------------------------------------------------------------------------------


def _find_tool(variable: str, image_path: str, env: Mapping[str, str] | None) -> tuple[str | None, str]:
    """``$variable`` when it names an executable file, else ``image_path`` when it is one; else None and what to
    say about the variable."""
    env = os.environ if env is None else env
    configured = env.get(variable)
    for candidate in ([configured] if configured else []) + [image_path]:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate, ""
    return None, f"${variable}={configured} is not an executable file" if configured else f"${variable} is not set"


def find_etcdutl(version: tuple[int, int], env: Mapping[str, str] | None = None) -> str:
    """The etcdutl of etcd ``major.minor``: ``$OPSMANAGER_ETCDUTL_<major>_<minor>``, else the image's
    :data:`ETCDUTL_IMAGE_PATH`; :class:`RestoreFailed` naming both when neither is an executable file."""
    major, minor = version
    variable = f"{ETCDUTL_ENV_PREFIX}{major}_{minor}"
    image_path = ETCDUTL_IMAGE_PATH.format(major=major, minor=minor)
    found, said = _find_tool(variable, image_path, env)
    if found is None:
        raise RestoreFailed(f"no etcdutl for etcd {major}.{minor}: {said} and {image_path} does not exist; run the "
                            f"operator's image (it ships the etcdutl of every supported etcd minor) or set "
                            f"${variable}")
    return found


def etcdutl_argv(etcdutl: str, snapshot_file: str | Path, plan: RestorePlan, name: str,
                 out_dir: str | Path) -> list[str]:
    """``etcdutl snapshot restore`` for member ``name`` into ``out_dir`` (which must not exist). No
    ``--bump-revision``/``--mark-compacted``: the restored cluster serves the snapshot's revisions exactly. The hash
    check stays on (the file is a ``snapshot save`` with its trailer)."""
    return [etcdutl, "snapshot", "restore", str(snapshot_file), "--name", name,
            "--initial-cluster", plan.initial_cluster, "--initial-cluster-token", plan.token,
            "--initial-advertise-peer-urls", plan.peer_urls[name], "--data-dir", str(out_dir)]


Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def find_etcdauth(env: Mapping[str, str] | None = None) -> str:
    """The ``etcdauth`` tool: ``$OPSMANAGER_ETCDAUTH``, else the image's :data:`ETCDAUTH_IMAGE_PATH`;
    :class:`RestoreFailed` naming both when neither is an executable file."""
    found, said = _find_tool(ETCDAUTH_ENV, ETCDAUTH_IMAGE_PATH, env)
    if found is None:
        raise RestoreFailed(f"no etcdauth (it sets the root password of a restored member): {said} and "
                            f"{ETCDAUTH_IMAGE_PATH} does not exist; run the operator's image or set ${ETCDAUTH_ENV}")
    return found


def read_root_password(plan: RestorePlan) -> str | None:
    """The root password the plan's ``rootPasswordFile`` holds; None when the plan names none.
    :class:`RestoreFailed` when it names one that is missing or empty (the auth Secret's volume is optional, so a
    missing Secret shows here, before anything is downloaded)."""
    if plan.root_password_file is None:
        return None
    path = Path(plan.root_password_file)
    try:
        raw = path.read_bytes()  # exactly, no newline translation: the operator logs in with the value as stored
    except OSError as err:
        raise RestoreFailed(f"the root password file {path} cannot be read ({err.strerror}): the Etcd's "
                            "spec.authSecret Secret must exist with a 'password' key (it is mounted from it)") from None
    try:
        password = raw.decode()
    except UnicodeDecodeError:
        raise RestoreFailed(f"the root password file {path} is not UTF-8 text: the operator cannot log in with it "
                            "either; put a text password into the Etcd's spec.authSecret Secret") from None
    if not password:
        raise RestoreFailed(f"the root password file {path} is empty: the Etcd's spec.authSecret Secret must hold a "
                            "non-empty 'password'")
    return password


RootSetter = Callable[[Path, str], str]


def set_root_password(etcdauth: str) -> RootSetter:
    """A :data:`RootSetter` running ``etcdauth set-root --db DB`` with the password on its standard input (never in
    its argv or environment); returns what the tool printed (what it changed, never the password)."""

    def run(db: Path, password: str) -> str:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        try:
            result = subprocess.run([etcdauth, "set-root", "--db", str(db)], input=password,
                                    capture_output=True, text=True, env=env, timeout=ETCDAUTH_TIMEOUT, check=False)
        except subprocess.TimeoutExpired:
            raise RestoreFailed(f"etcdauth set-root did not finish within {ETCDAUTH_TIMEOUT:g} s; the data dir was "
                                "not touched") from None
        except OSError as err:
            raise RestoreFailed(f"cannot run {etcdauth}: {err.strerror}; the operator's image must ship it") from None
        if result.returncode != 0:
            said = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise RestoreFailed(f"setting the root password in the restored data failed: {said}; the data dir was "
                                "not touched")
        return result.stdout.strip()

    return run


def run_etcdutl(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """Run etcdutl (output captured; no S3 credentials in its environment; bounded by :data:`ETCDUTL_TIMEOUT`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return subprocess.run(list(argv), capture_output=True, text=True, env=env, timeout=ETCDUTL_TIMEOUT,
                          stdin=subprocess.DEVNULL, check=False)


def _tool_error(result: subprocess.CompletedProcess[str]) -> str:
    """etcdutl's own complaint: its last line of output that says something (its logs are JSON lines)."""
    for line in reversed((result.stderr + "\n" + result.stdout).strip().splitlines()):
        line = line.strip()
        if not line:
            continue
        with contextlib.suppress(ValueError, AttributeError):
            entry = json.loads(line)
            line = str(entry.get("error") or entry.get("msg") or line)
        return line.removeprefix("Error: ")[:400]
    return f"exit status {result.returncode}, no output"


# -- the download ------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Credentials:
    """The S3 access key pair; ``repr`` shows neither."""

    access_key_id: str = dataclasses.field(repr=False)
    secret_access_key: str = dataclasses.field(repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Credentials:
        env = os.environ if env is None else env
        missing = [v for v in (ENV_ACCESS_KEY_ID, ENV_SECRET_ACCESS_KEY) if not env.get(v)]
        if missing:
            raise RestoreFailed(f"no S3 credentials: {' and '.join(missing)} not set; the init container takes them "
                                "from spec.backup.destination.credentialsSecret (keys accessKeyId, secretAccessKey)")
        return cls(env[ENV_ACCESS_KEY_ID], env[ENV_SECRET_ACCESS_KEY])


Fetcher = Callable[[RestorePlan, Path], None]


def download_snapshot(credentials: Credentials) -> Fetcher:
    """A fetcher that downloads the plan's object to a path with :class:`~opsmanager.backup.store.ObjectStore`
    (bounded timeouts and attempts; :class:`RestoreFailed` with the store's message, which names the setting)."""

    def fetch(plan: RestorePlan, dest: Path) -> None:
        from opsmanager.backup import store  # boto3: only when a restore runs

        ca_bundle = None
        if plan.ca_file:
            try:
                ca_bundle = Path(plan.ca_file).read_bytes()
            except OSError as err:
                raise RestoreFailed(f"the CA bundle of the store {plan.ca_file}: {err.strerror}; check "
                                    "spec.backup.destination.ca (the Secret and key must exist)") from None
        try:
            with store.ObjectStore(plan.endpoint, plan.bucket, access_key_id=credentials.access_key_id,
                                   secret_access_key=credentials.secret_access_key, prefix=plan.prefix,
                                   region=plan.region, ca_bundle=ca_bundle) as s3:
                try:
                    s3.download(plan.key, dest)
                except store.AccessDenied as err:
                    raise _diagnosed(s3, err) from None
        except store.ObjectNotFound:
            raise RestoreFailed(f"downloading {plan.bucket}/{plan.key}: no such object at {plan.endpoint}; restore a "
                                "snapshot the store holds (the Restore request's source)") from None
        except store.StoreError as err:
            raise RestoreFailed(f"downloading {plan.bucket}/{plan.key}: {err}") from None
        except ValueError as err:  # a bad endpoint or CA bundle: the plan's values
            raise RestoreFailed(f"downloading {plan.bucket}/{plan.key}: {err}") from None

    return fetch


def _diagnosed(s3: store.ObjectStore, err: store.AccessDenied) -> store.StoreError:
    """A HEAD or GET refused with a bare 403 does not say whether the keys are wrong or only lack a permission; a
    listing's answer does (``InvalidAccessKeyId``, ``SignatureDoesNotMatch``): the error it raises when it says the
    keys are wrong, else the original."""
    from opsmanager.backup import store

    try:
        s3.check()
    except store.AccessDenied as listed:
        if listed.code in ("InvalidAccessKeyId", "SignatureDoesNotMatch"):
            return listed
    except store.StoreError:
        pass
    return err


# -- the restore ------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RestoreResult:
    """What :func:`restore_member` did: ``restored`` False when the marker said it was done already."""

    restored: bool
    plan_id: str
    data_dir: Path
    revision: int | None = None
    seconds: float = 0.0
    timings: Mapping[str, float] = dataclasses.field(default_factory=dict)


def marker_path(plan: RestorePlan) -> Path:
    return Path(plan.data_dir).parent / MARKER_NAME


def work_dir(plan: RestorePlan) -> Path:
    return Path(plan.data_dir).parent / f"{WORK_PREFIX}{plan.id}"


def restored_id(plan: RestorePlan) -> str | None:
    """The plan id in this member's marker, None when there is none (or it cannot be read as a marker)."""
    try:
        found = json.loads(marker_path(plan).read_text()).get("id")
    except (OSError, ValueError, AttributeError):
        return None
    return found if isinstance(found, str) else None


def restore_member(plan: RestorePlan, name: str, *, fetch: Fetcher, etcdutl: str,
                   run: Runner = run_etcdutl, set_root: RootSetter | None = None,
                   log: Callable[[str], None] | None = None) -> RestoreResult:
    """Restore member ``name``'s data dir from the plan's snapshot (see the module docstring); a no-op when the
    marker holds the plan's id. ``set_root`` sets the root password when the plan has ``rootPasswordFile``
    (required then). :class:`RestoreFailed` on any failure it can explain, :class:`OSError` when the filesystem
    fails it (a full volume, a marker that cannot be written); either way the old data dir is as it was."""
    say = log or (lambda _message: None)
    started = time.monotonic()
    data_dir = Path(plan.data_dir)
    if name not in plan.peer_urls:
        raise RestoreFailed(f"member {name!r} is not in the restore plan (members: {', '.join(sorted(plan.peer_urls))})"
                            "; the plan was written for another Etcd or another size: re-run the Restore request")
    if restored_id(plan) == plan.id:
        return RestoreResult(False, plan.id, data_dir)
    password = _preflight(plan, data_dir, set_root)
    work = work_dir(plan)
    _recover(data_dir, say)
    timings: dict[str, float] = {}
    _make_work_dir(work)
    try:
        downloaded = work / "snapshot.db"
        t0 = time.monotonic()
        fetch(plan, downloaded)
        timings["download"] = time.monotonic() - t0
        t0 = time.monotonic()
        content = _check(plan, downloaded)
        timings["verify"] = time.monotonic() - t0
        restored = work / "data"
        t0 = time.monotonic()
        _etcdutl_restore(run, etcdutl_argv(etcdutl, downloaded, plan, name, restored), etcdutl, restored)
        timings["etcdutl"] = time.monotonic() - t0
        downloaded.unlink()  # room for the swap on a tight volume
        if password is not None and set_root is not None:
            t0 = time.monotonic()
            said = set_root(restored / "member" / "snap" / "db", password)
            timings["auth"] = time.monotonic() - t0
            say(f"root password set in the restored data: {said}")
        t0 = time.monotonic()
        _swap(data_dir, restored, work / "old")
        try:
            _write_marker(plan, content.revision)
        except BaseException:
            _unswap(data_dir, restored, work / "old")
            raise
        timings["swap"] = time.monotonic() - t0
    except BaseException:
        if not data_dir.exists() and (work / "old").is_dir():  # interrupted mid-swap: put the old data back
            os.rename(work / "old", data_dir)
        shutil.rmtree(work, ignore_errors=True)
        raise
    shutil.rmtree(work, ignore_errors=True)
    _fsync_dir(data_dir.parent)
    return RestoreResult(True, plan.id, data_dir, content.revision, time.monotonic() - started, timings)


def _preflight(plan: RestorePlan, data_dir: Path, set_root: RootSetter | None) -> str | None:
    """What a restore needs before it touches anything: the data volume mounted, and etcdauth when the plan sets
    the root password; the root password to set (None: none)."""
    parent = data_dir.parent
    if not parent.is_dir():
        raise RestoreFailed(f"{parent} (the parent of the data dir {data_dir}) does not exist; the data volume must "
                            "be mounted there")
    password = read_root_password(plan)
    if password is not None and set_root is None:
        raise RestoreFailed("the plan asks for the root password to be set and no etcdauth was given")
    return password


def _make_work_dir(work: Path) -> None:
    try:
        work.mkdir(mode=0o700)
    except OSError as err:
        raise RestoreFailed(f"cannot create the work directory {work}: {err.strerror}; the data volume must be "
                            "writable by the init container's user") from None


def _etcdutl_restore(run: Runner, argv: list[str], etcdutl: str, restored: Path) -> None:
    """``etcdutl snapshot restore`` into ``restored``; :class:`RestoreFailed` unless it wrote a member's db."""
    try:
        result = run(argv)
    except subprocess.TimeoutExpired:
        raise RestoreFailed(f"etcdutl snapshot restore did not finish within {ETCDUTL_TIMEOUT:g} s; check the "
                            "data volume's speed and free space") from None
    except OSError as err:
        raise RestoreFailed(f"cannot run {etcdutl}: {err.strerror}; the operator's image must ship it") from None
    if result.returncode != 0:
        raise RestoreFailed(f"etcdutl snapshot restore failed: {_tool_error(result)}; the data dir was not "
                            "touched (check the free space on the data volume, and the plan)")
    if not (restored / "member" / "snap" / "db").is_file():
        raise RestoreFailed(f"etcdutl snapshot restore exited 0 but wrote no {restored}/member/snap/db; the data "
                            "dir was not touched")


def _check(plan: RestorePlan, path: Path) -> snapshot.SnapshotContent:
    where = f"{plan.bucket}/{plan.key}"
    digest = snapshot.sha256_file(path)
    if digest != plan.sha256:
        raise RestoreFailed(f"{where} is not the snapshot the backup recorded: its sha256 is {digest}, the plan's "
                            f"{plan.sha256} (the object was replaced or corrupted in the store); restore another "
                            "snapshot")
    check = snapshot.verify(path)
    if not check.ok:
        raise RestoreFailed(f"{where} is not a complete etcd snapshot: {check.reason}; restore another snapshot")
    try:
        content = snapshot.content_revision(path)
    except snapshot.SnapshotContentError as err:
        raise RestoreFailed(f"{where}: {err}; restore another snapshot") from None
    if content.revision != plan.revision:
        raise RestoreFailed(f"{where} holds revision {content.revision}, the plan says {plan.revision}; the plan does "
                            "not match the snapshot: re-run the Restore request")
    return content


def _recover(data_dir: Path, say: Callable[[str], None]) -> None:
    """Undo what runs that died left behind (``.restore-*`` beside the data dir): the old data dir put back if it
    was moved away and nothing took its place, then the work directories removed."""
    for work in sorted(data_dir.parent.glob(f"{WORK_PREFIX}*")):
        if not work.is_dir() or work.is_symlink():
            continue
        old = work / "old"
        if old.is_dir() and not data_dir.exists():
            os.rename(old, data_dir)
            say(f"put the data dir back from {old} (an earlier run stopped half-way through the swap)")
        shutil.rmtree(work)


def _swap(data_dir: Path, restored: Path, old: Path) -> None:
    """The restored data dir in the place of the old one: rename old away, rename restored in, fsync the parent.
    A failure of the second rename puts the old one back."""
    had_old = data_dir.exists()
    if had_old:
        os.rename(data_dir, old)
    try:
        os.rename(restored, data_dir)
    except OSError:
        if had_old:
            os.rename(old, data_dir)
        raise
    _fsync_dir(data_dir.parent)


def _unswap(data_dir: Path, restored: Path, old: Path) -> None:
    """:func:`_swap` undone: the restored data dir back to ``restored``, the old one (if any) in its place."""
    os.rename(data_dir, restored)
    if old.exists():
        os.rename(old, data_dir)
    _fsync_dir(data_dir.parent)


def _write_marker(plan: RestorePlan, revision: int) -> None:
    marker = marker_path(plan)
    part = marker.with_name(marker.name + ".part")
    text = json.dumps({"id": plan.id, "key": plan.key, "sha256": plan.sha256, "revision": revision,
                       "restoredAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    try:
        with part.open("w") as f:
            f.write(text + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(part, marker)
    except BaseException:
        with contextlib.suppress(OSError):
            part.unlink()
        raise
    _fsync_dir(marker.parent)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# -- the command ------------------------------------------------------------------------------------------------------

PROG: Final = "opsmanager restore-member"


def main(argv: Sequence[str] | None = None) -> int:
    """``opsmanager restore-member [--plan PATH] [--name NAME]``: 0 restored or nothing to do, 1 failed (one line
    on stderr), 2 usage."""
    parser = argparse.ArgumentParser(prog=PROG, description="Restore this etcd member's data dir from the snapshot "
                                     "a restore plan names (an init container; no plan file: nothing to do).")
    parser.add_argument("--plan", default=DEFAULT_PLAN_PATH, help=f"the plan file ({DEFAULT_PLAN_PATH})")
    parser.add_argument("--name", default=None, help=f"this member's name (${ENV_POD_NAME})")
    args = parser.parse_args(list(argv) if argv is not None else None)

    def say(message: str) -> None:
        print(f"{PROG}: {message}", file=sys.stderr, flush=True)

    try:
        plan = load_plan(args.plan)
        if plan is None:
            say(f"no restore plan at {args.plan}: nothing to do")
            return 0
        name = args.name or os.environ.get(ENV_POD_NAME, "")
        if not name:
            raise RestoreFailed(f"no member name: ${ENV_POD_NAME} is not set (the init container sets it from "
                                "metadata.name) and no --name")
        if name in plan.peer_urls and restored_id(plan) == plan.id:
            say(f"member {name} was restored by plan {plan.id} already: nothing to do")
            return 0
        etcdutl = find_etcdutl(plan.etcd_minor)
        set_root = set_root_password(find_etcdauth()) if plan.root_password_file is not None else None
        fetch = download_snapshot(Credentials.from_env())
        result = restore_member(plan, name, fetch=fetch, etcdutl=etcdutl, set_root=set_root, log=say)
    except PlanError as err:
        say(f"the restore plan {args.plan} is invalid: {err}; the operator writes it: re-run the Restore request")
        return 1
    except RestoreFailed as err:
        say(f"failed: {err}")
        return 1
    except OSError as err:
        say(f"failed: {err.strerror or err} ({err.filename or 'no file'}); the data dir was not replaced: check the "
            "data volume's free space and that the init container may write to it")
        return 1
    if not result.restored:
        say(f"member {name} was restored by plan {plan.id} already: nothing to do")
        return 0
    steps = ", ".join(f"{k} {v:.2f} s" for k, v in result.timings.items())
    say(f"restored member {name} from {plan.bucket}/{plan.key} (revision {result.revision}) into {result.data_dir} "
        f"for plan {plan.id} in {result.seconds:.1f} s ({steps})")
    return 0
