"""What KFP's clients do with their S3 store, done with boto3 against one store: `python s3_client_check.py SCENARIO`.

Run by tests/integration/test_seaweedfs_store.py in an interpreter that has boto3 (the KFP services
venv): the project venv has none. The store's address and keys come from S3_ENDPOINT,
S3_ACCESS_KEY and S3_SECRET_KEY. Each scenario raises on the first thing that differs from what a
client needs and prints `ok SCENARIO` at the end. The clients it stands for:
- KFP's API server: HeadBucket, then CreateBucket when missing (ensureBucketExists), objects;
- KFP's launcher (gocloud over the AWS SDK, path-style): uploads of files and directories, big
  files in parts, a directory read back by listing its prefix;
- Argo's executor (minio-go): the step's log archived under the Workflow's key format;
- the UI server (minio-js): HEAD for the size, GET of the whole object and of its first bytes.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Callable
from typing import Any

import boto3
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

BUCKET = "mlpipeline"
MiB = 2**20


# Any: boto3 ships no types (mypy skips it, pyproject.toml).
def client(*, secret: str | None = None, endpoint: str | None = None, proxy: str | None = None) -> Any:
    """A path-style S3 client with the store's keys (or another secret), optionally through an HTTP proxy."""
    config = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                    proxies={"http": proxy} if proxy else None)  # fmt: skip
    return boto3.client(
        "s3", endpoint_url=endpoint or os.environ["S3_ENDPOINT"], region_name="us-east-1",
        aws_access_key_id=os.environ["S3_ACCESS_KEY"],
        aws_secret_access_key=secret if secret is not None else os.environ["S3_SECRET_KEY"], config=config,
    )  # fmt: skip


def error_code(call: Callable[[], object]) -> str | None:
    """The S3 error code `call` fails with, or None when it succeeds."""
    try:
        call()
    except ClientError as e:
        return str(e.response["Error"]["Code"])
    return None


def ensure_bucket(s3: Any) -> None:
    """KFP's API server at start: HEAD the bucket, create it when it is missing."""
    try:
        s3.head_bucket(Bucket=BUCKET)
    except ClientError as e:
        if e.response["Error"]["Code"] not in ("404", "NoSuchBucket", "NotFound"):
            raise
        s3.create_bucket(Bucket=BUCKET)
    s3.head_bucket(Bucket=BUCKET)


def objects() -> None:
    s3 = client()
    ensure_bucket(s3)
    ensure_bucket(s3)  # a second API server start finds it
    # minio-go (Argo) and minio-js (the UI server) ask the bucket's region before their first request.
    s3.get_bucket_location(Bucket=BUCKET)
    root = "v2/artifacts/probe/run-1/train"
    files = {f"{root}/model/model.pt": os.urandom(4096), f"{root}/model/metrics.json": b'{"test_accuracy": 0.97}',
             f"{root}/report": b"<html><body>report</body></html>"}  # fmt: skip
    for key, body in files.items():
        s3.put_object(Bucket=BUCKET, Key=key, Body=body)
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{root}/model/")
    names = sorted(o["Key"] for o in listed.get("Contents", []))
    assert names == sorted(k for k in files if "/model/" in k), names
    for key, body in files.items():
        head = s3.head_object(Bucket=BUCKET, Key=key)
        assert head["ContentLength"] == len(body), (key, head["ContentLength"])
        got = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        assert got == body, key
    peek = s3.get_object(Bucket=BUCKET, Key=f"{root}/report", Range="bytes=0-5")["Body"].read()
    assert peek == b"<html>", peek
    delimited = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{root}/", Delimiter="/")
    prefixes = [p["Prefix"] for p in delimited.get("CommonPrefixes", [])]
    assert prefixes == [f"{root}/model/"], prefixes
    missing = error_code(lambda: s3.get_object(Bucket=BUCKET, Key=f"{root}/missing"))
    assert missing == "NoSuchKey", f"a missing key was answered with {missing}"
    log = "private-artifacts/kubeflow/run-abc/run-abc-system-container-impl-1/main.log"
    s3.put_object(Bucket=BUCKET, Key=log, Body=b"launcher: submitted PyTorchJob\n")
    assert s3.get_object(Bucket=BUCKET, Key=log)["Body"].read().startswith(b"launcher:")


def multipart() -> None:
    from boto3.s3.transfer import TransferConfig

    s3 = client()
    ensure_bucket(s3)
    body = os.urandom(13 * MiB)  # three parts of 5 MiB (the SDKs' smallest), the last one short
    path = f"/tmp/s3-check-{os.getpid()}.bin"
    with open(path, "wb") as out:
        out.write(body)
    try:
        parts = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB)
        key = "v2/artifacts/probe/run-1/train/model/big.bin"
        s3.upload_file(path, BUCKET, key, Config=parts)
        head = s3.head_object(Bucket=BUCKET, Key=key)
        assert head["ContentLength"] == len(body), head["ContentLength"]
        assert head["ETag"].strip('"').endswith("-3"), f"not stored as a 3-part upload: ETag {head['ETag']}"
        got = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        assert hashlib.sha256(got).hexdigest() == hashlib.sha256(body).hexdigest(), "the parts came back changed"
    finally:
        os.unlink(path)


def service_name() -> None:
    # Pods address the store as seaweedfs.kubeflow:9000 (the Host header, signed): going through an
    # HTTP proxy sends exactly that host to the store, whatever address it listens on.
    endpoint = os.environ["S3_ENDPOINT"]
    s3 = client(endpoint="http://seaweedfs.kubeflow.svc:9000", proxy=endpoint)
    ensure_bucket(s3)
    s3.put_object(Bucket=BUCKET, Key="by-name/x", Body=b"named")
    assert client().get_object(Bucket=BUCKET, Key="by-name/x")["Body"].read() == b"named"


def credentials() -> None:
    ensure_bucket(client())
    for secret in ("not-the-secret", ""):
        wrong = client(secret=secret)
        code = error_code(lambda: wrong.list_objects_v2(Bucket=BUCKET))  # noqa: B023
        assert code in ("SignatureDoesNotMatch", "AccessDenied", "InvalidAccessKeyId"), (secret, code)
    anonymous = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT"], region_name="us-east-1",
                             config=Config(signature_version=UNSIGNED))  # fmt: skip
    code = error_code(lambda: anonymous.list_objects_v2(Bucket=BUCKET))
    assert code == "AccessDenied", f"an unsigned request was answered with {code}"


SCENARIOS: dict[str, Callable[[], None]] = {
    "objects": objects, "multipart": multipart, "service_name": service_name, "credentials": credentials,
}  # fmt: skip

if __name__ == "__main__":
    SCENARIOS[sys.argv[1]]()
    print(f"ok {sys.argv[1]}")
