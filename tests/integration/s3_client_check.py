"""What KFP's clients do with their S3 store, done with boto3 against one store: `python s3_client_check.py SCENARIO`.

Run by tests/integration/test_seaweedfs_store.py in an interpreter that has boto3 (the KFP services
venv): the project venv has none. The store's address and keys come from S3_ENDPOINT,
S3_ACCESS_KEY and S3_SECRET_KEY. Each scenario raises on the first thing that differs from what a
client needs and prints `ok SCENARIO` at the end. The clients it stands for:
- KFP's API server: HeadBucket, then CreateBucket when missing (ensureBucketExists), objects;
- KFP's launcher (gocloud over the AWS SDK, path-style): uploads of files and directories, big
  files in parts, a directory read back by listing its prefix;
- Argo's executor (minio-go): the step's log archived under the Workflow's key format;
- the UI server (minio-js): HEAD for the size, GET of the whole object and of its first bytes,
  a directory listed a page at a time;
- a link handed out presigned, and a forged one refused;
- KFP's multi-user sync hook (issue 47): a namespace's keys minted through the IAM API
  (S3_IAM_ENDPOINT) and scoped to its prefix, the bucket's policy and lifecycle set.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import urllib.error
import urllib.request
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
    config = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}, signature_version="s3v4",
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


def http_status(url: str) -> int:
    """The HTTP status a plain GET of `url` is answered with (no credentials but the URL's)."""
    try:
        with urllib.request.urlopen(url, timeout=30) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as e:
        return e.code


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
    # Deleting a run's artifacts: one object, then a batch.
    s3.delete_object(Bucket=BUCKET, Key=f"{root}/report")
    gone = error_code(lambda: s3.head_object(Bucket=BUCKET, Key=f"{root}/report"))
    assert gone in ("404", "NoSuchKey"), f"a deleted key was answered with {gone}"
    batch = s3.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": k} for k in files if "/model/" in k]})
    assert not batch.get("Errors"), batch["Errors"]
    left = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{root}/").get("Contents", [])
    assert left == [], [o["Key"] for o in left]


def paging() -> None:
    # The UI server lists an artifact directory a page at a time (minio-js listObjectsV2Query with
    # a continuation token), and the launcher reads a directory back the same way.
    s3 = client()
    ensure_bucket(s3)
    root = "v2/artifacts/probe/run-2/split/shards"
    keys = [f"{root}/part-{i:03d}" for i in range(7)]
    for key in keys:
        s3.put_object(Bucket=BUCKET, Key=key, Body=key.encode())
    seen: list[str] = []
    token: dict[str, str] = {}
    while True:
        page = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{root}/", MaxKeys=3, **token)
        seen += [o["Key"] for o in page.get("Contents", [])]
        if not page.get("IsTruncated"):
            break
        token = {"ContinuationToken": page["NextContinuationToken"]}
    assert seen == keys, seen


def presigned() -> None:
    # A link handed to a browser or a step: signed in the URL, no credentials with the request.
    s3 = client()
    ensure_bucket(s3)
    key = "v2/artifacts/probe/run-3/train/model/presigned.bin"
    body = os.urandom(2048)
    put_url = s3.generate_presigned_url("put_object", Params={"Bucket": BUCKET, "Key": key}, ExpiresIn=300)
    with urllib.request.urlopen(urllib.request.Request(put_url, data=body, method="PUT"), timeout=30) as reply:
        assert reply.status == 200, reply.status
    get_url = s3.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": key}, ExpiresIn=300)
    with urllib.request.urlopen(get_url, timeout=30) as reply:
        assert reply.read() == body
    forged = client(secret="not-the-secret").generate_presigned_url(
        "get_object", Params={"Bucket": BUCKET, "Key": key}, ExpiresIn=300
    )
    assert http_status(forged) == 403, "a URL signed with the wrong secret was not refused"


def iam() -> None:
    # KFP's multi-user sync hook (pipelines-profile-controller/sync.py) gives each namespace its own
    # keys through SeaweedFS's IAM API, scoped by a user policy, and sets the bucket's list policy
    # and lifecycle with the admin keys. S3_IAM_ENDPOINT is the S3 port's embedded IAM API (writable
    # with -s3.iam.readOnly=false), which knows the identities of -s3.config; upstream's manifests
    # run the standalone one (`-iam`), which in 4.53 knows only the filer's identities.
    admin = client()
    ensure_bucket(admin)
    iam_api = boto3.client("iam", endpoint_url=os.environ["S3_IAM_ENDPOINT"], region_name="us-east-1",
                           aws_access_key_id=os.environ["S3_ACCESS_KEY"],
                           aws_secret_access_key=os.environ["S3_SECRET_KEY"])  # fmt: skip
    namespace = "team-a"
    # SeaweedFS 4.53 wants the user first (NoSuchEntity otherwise); sync.py, written against 4.34's
    # standalone IAM server, calls CreateAccessKey alone.
    iam_api.create_user(UserName=namespace)
    key = iam_api.create_access_key(UserName=namespace)["AccessKey"]
    allowed = f"arn:aws:s3:::{BUCKET}/private-artifacts/{namespace}/*"
    policy = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["s3:Put*", "s3:Get*", "s3:List*", "s3:DeleteObject"], "Resource": [allowed]},
    ]}  # fmt: skip
    iam_api.put_user_policy(UserName=namespace, PolicyName=f"KubeflowProject{namespace}",
                            PolicyDocument=json.dumps(policy))  # fmt: skip
    team = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT"], region_name="us-east-1",
                        aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"],
                        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))  # fmt: skip
    own = f"private-artifacts/{namespace}/run-1/model.pt"
    team.put_object(Bucket=BUCKET, Key=own, Body=b"mine")
    assert team.get_object(Bucket=BUCKET, Key=own)["Body"].read() == b"mine"
    other = error_code(lambda: team.put_object(Bucket=BUCKET, Key="private-artifacts/team-b/x", Body=b"x"))
    assert other == "AccessDenied", f"another namespace's prefix was answered with {other}"
    statement = {"Sid": "probe", "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
                 "Resource": f"arn:aws:s3:::{BUCKET}/shared/*"}  # fmt: skip
    admin.put_bucket_policy(Bucket=BUCKET, Policy=json.dumps({"Version": "2012-10-17", "Statement": [statement]}))
    assert "shared/" in admin.get_bucket_policy(Bucket=BUCKET)["Policy"]
    rule = {"ID": "kfp-retention", "Status": "Enabled", "Filter": {"Prefix": "private-artifacts/"},
            "Expiration": {"Days": 30}}  # fmt: skip
    admin.put_bucket_lifecycle_configuration(Bucket=BUCKET, LifecycleConfiguration={"Rules": [rule]})
    rules = admin.get_bucket_lifecycle_configuration(Bucket=BUCKET)["Rules"]
    assert [r["Expiration"]["Days"] for r in rules] == [30], rules


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
    "paging": paging, "presigned": presigned, "iam": iam,
}  # fmt: skip

if __name__ == "__main__":
    SCENARIOS[sys.argv[1]]()
    print(f"ok {sys.argv[1]}")
