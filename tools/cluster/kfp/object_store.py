"""The KFP tier's S3 store, a host process: SeaweedFS (what KFP 2.17's manifests ship), or moto to go back.

`KUBETRAIN_KFP_S3` picks it: `seaweedfs` (the default) runs `weed server -s3`, built from the pinned
wrapper module by tools/seaweedfs/build.sh; `moto` runs moto's S3 server from the services venv, the
store the tier used before. Either answers S3 on the same address (the pod bridge's gateway,
port backend.S3_PORT), path-style, with KFP's test keys, so nothing else changes with the choice:
the steps reach it as `seaweedfs.kubeflow:9000` through a host Service, the API server, Argo's
log archive and the UI server by its address. The bucket is made by the API server at its start
(KFP's ensureBucketExists), as in a cluster.

SeaweedFS is one `weed server` process running a master, a volume server, a filer and the S3
gateway. Each of their ports is set here (the defaults, 8080/18080 and 8888/18888, collide with
the tier's own), and the extras it would otherwise open (Iceberg and Lance catalogs, telemetry to
seaweedfs.com) are off. Its S3 identities come from a config file (`-s3.config`), the file form of
the `s3.configure` upstream's postStart hook runs.

The multi-user tier (issue 47) adds SeaweedFS's standalone IAM API (`WeedPorts.iam`: `-iam
-iam.port=P`, upstream's port 8111), which KFP's sync hook mints each namespace's keys through. That
server knows only the identities stored in the filer, not `-s3.config`'s, so the admin's keys are
put there too (`put_admin_identity`): upstream's postStart does it with `weed shell` `s3.configure
... -apply`, which the trimmed `weed` here leaves out (tools/seaweedfs/main.go); the same identity
file is written through the filer's HTTP API instead. Without `iam` nothing of this changes.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tools.cluster import build_script

REPO_ROOT = Path(__file__).resolve().parents[3]
BUILD_SCRIPT = REPO_ROOT / "tools" / "seaweedfs" / "build.sh"
CHOICE_ENV = "KUBETRAIN_KFP_S3"
SEAWEEDFS = "seaweedfs"
MOTO = "moto"
DEFAULT = SEAWEEDFS
ADMIN_IDENTITY = "kubeflow-admin"  # the name upstream's postStart hook gives the keys' identity
# weed 4.53 never ends on SIGTERM: it stops its volume server, then waits in gRPC's graceful stop
# for its own in-process streams. Its SIGKILL comes after this grace rather than after the
# cluster's (10 s, which every `cluster-down` then spent waiting); the store's data goes with the
# cluster's state anyway.
STOP_GRACE_S = 2.0
# The IAM server reads identities from the entry's inline content only (filer.ReadInsideFiler), and
# the filer's HTTP API keeps a file inline only below this limit (0 by default: never). 4 KiB holds
# an identity file; S3 objects that small are then kept in the filer store instead of a volume,
# which no S3 client can tell.
_IAM_FLAGS = ["-iam", "-filer.saveToFilerLimit=4096"]


class ObjectStoreError(RuntimeError):
    """The store could not be chosen, built or started; the message says which and how to fix it."""


def choice(env: Mapping[str, str] | None = None) -> str:
    """The store `KUBETRAIN_KFP_S3` names (`seaweedfs` when unset)."""
    value = (os.environ if env is None else env).get(CHOICE_ENV, "") or DEFAULT
    if value not in (SEAWEEDFS, MOTO):
        raise ObjectStoreError(f"{CHOICE_ENV}={value!r} is not a store this tier runs: "
                               f"use {SEAWEEDFS!r} (the default) or {MOTO!r}")  # fmt: skip
    return value


@dataclass(frozen=True)
class WeedPorts:
    """Every port one `weed server` binds: HTTP and gRPC of its master, volume server and filer, and S3."""

    s3: int
    master: int
    volume: int
    filer: int
    grpc_offset: int = 10000
    # The standalone IAM API's HTTP port (no gRPC port of its own); None: no IAM server (standalone KFP).
    iam: int | None = None

    def __post_init__(self) -> None:
        bound = self.all()
        if len(set(bound)) != len(bound):
            raise ObjectStoreError(f"WeedPorts: two of SeaweedFS's ports are the same: {self}; give each its own")
        for port in bound:
            if not 0 < port < 65536:
                raise ObjectStoreError(f"WeedPorts: port {port} is outside 1..65535 ({self}); "
                                       "lower the ports or the grpc_offset")  # fmt: skip

    def grpc(self, port: int) -> int:
        """The gRPC port beside an HTTP one."""
        return port + self.grpc_offset

    def all(self) -> list[int]:
        """Every port, HTTP then gRPC."""
        http = [self.s3, self.master, self.volume, self.filer]
        return http + [self.grpc(p) for p in http] + ([self.iam] if self.iam is not None else [])

    def described(self) -> dict[int, str]:
        """{port: what binds it}, for processes.require_free."""
        names = {self.s3: "S3", self.master: "master", self.volume: "volume server", self.filer: "filer"}
        out = {port: f"SeaweedFS ({name} HTTP)" for port, name in names.items()}
        out.update({self.grpc(port): f"SeaweedFS ({name} gRPC)" for port, name in names.items()})
        if self.iam is not None:
            out[self.iam] = "SeaweedFS (IAM API)"
        return out


def s3_config(access_key: str, secret_key: str) -> str:
    """The `-s3.config` file: one identity with the keys, allowed everything (upstream's `-actions Admin`)."""
    identity = {"name": ADMIN_IDENTITY, "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                "actions": ["Admin", "Read", "List", "Tagging", "Write"]}  # fmt: skip
    return json.dumps({"identities": [identity]}, indent=2)


def weed_argv(weed: Path, *, ip: str, data_dir: Path, config: Path, ports: WeedPorts) -> list[str]:
    """`weed server` with its filer and S3 gateway on `ip`, data under `data_dir`, identities from `config`."""
    return [
        str(weed), "server", f"-ip={ip}", f"-ip.bind={ip}", f"-dir={data_dir}", f"-master.dir={data_dir}",
        "-filer", "-s3", f"-s3.config={config}",
        f"-s3.port={ports.s3}", f"-s3.port.grpc={ports.grpc(ports.s3)}",
        f"-master.port={ports.master}", f"-master.port.grpc={ports.grpc(ports.master)}",
        f"-volume.port={ports.volume}", f"-volume.port.grpc={ports.grpc(ports.volume)}",
        f"-filer.port={ports.filer}", f"-filer.port.grpc={ports.grpc(ports.filer)}",
        # Sockets beside the data rather than in /tmp, where two stores would share the names.
        f"-filer.localSocket={data_dir / 'filer.sock'}", f"-s3.localSocket={data_dir / 's3.sock'}",
        "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false",
        # Volumes are sparse files; 1 GiB each and as many as the disk holds keeps a small disk usable.
        "-master.volumeSizeLimitMB=1024", "-volume.max=0", "-master.volumePreallocate=false",
    ] + ([*_IAM_FLAGS, f"-iam.port={ports.iam}"] if ports.iam is not None else [])  # fmt: skip


def build_weed(log: Path | None = None) -> Path:
    """The `weed` binary, built first if missing (tools/seaweedfs/build.sh, minutes cold)."""
    try:
        return build_script.build(BUILD_SCRIPT, log) / "weed"
    except build_script.BuildScriptError as e:
        raise ObjectStoreError(str(e)) from e


def built_weed() -> Path | None:
    """The cached `weed` if it is built (for tests that must not build it), else None."""
    bins = build_script.printed_folder(BUILD_SCRIPT, "--print-bin")
    return bins / "weed" if bins is not None and os.access(bins / "weed", os.X_OK) else None


def wait_ready_url(host: str, ports: WeedPorts) -> str:
    """The URL that answers 200 once the S3 gateway serves (upstream's readiness probe)."""
    return f"http://{host}:{ports.s3}/status"


def prepare_seaweedfs(run: Path, weed: Path, *, ip: str, ports: WeedPorts, access_key: str,
                      secret_key: str) -> list[str]:  # fmt: skip
    """Write the identities file and the data folder under `run`; the argv that serves them."""
    data = run / "seaweedfs"
    data.mkdir(parents=True, exist_ok=True)
    config = run / "seaweedfs-s3.json"
    config.write_text(s3_config(access_key, secret_key))
    config.chmod(0o600)  # it holds the secret key
    return weed_argv(weed, ip=ip, data_dir=data, config=config, ports=ports)


def admin_identity(access_key: str, secret_key: str) -> str:
    """The filer's record of the admin identity, as `s3.configure -user kubeflow-admin -access_key K
    -secret_key S -actions Admin -apply` stores it (weed/credential/filer_etc: one JSON file per identity)."""
    identity = {"name": ADMIN_IDENTITY, "credentials": [{"access_key": access_key, "secret_key": secret_key}],
                "actions": ["Admin"]}  # fmt: skip
    return json.dumps(identity, indent=2)


def admin_identity_url(host: str, ports: WeedPorts) -> str:
    """Where the filer keeps the admin identity (`/etc/iam/identities/<name>.json`), on its HTTP port."""
    return f"http://{host}:{ports.filer}/etc/iam/identities/{ADMIN_IDENTITY}.json"


def put_admin_identity(host: str, ports: WeedPorts, *, access_key: str, secret_key: str) -> None:
    """Store the admin identity in the running filer, so the IAM API (`WeedPorts.iam`) accepts its keys."""
    url = admin_identity_url(host, ports)
    body = admin_identity(access_key, secret_key).encode()
    request = urllib.request.Request(url, data=body, method="PUT", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            status = int(reply.status)
    except (urllib.error.URLError, OSError) as e:
        raise ObjectStoreError(f"storing the {ADMIN_IDENTITY} identity at {url} failed ({e}): is the filer "
                               "up (wait for wait_ready_url first)?") from e  # fmt: skip
    if status not in (200, 201, 204):
        raise ObjectStoreError(f"storing the {ADMIN_IDENTITY} identity at {url}: HTTP {status}")
