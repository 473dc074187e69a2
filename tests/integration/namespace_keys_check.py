"""A profile's S3 keys against the store, with boto3: `python namespace_keys_check.py bucket|isolation`.

Run by tests/integration/test_kfp_profile_hook.py in the KFP services venv (the project venv has no
boto3). S3_ENDPOINT is the store; S3_ACCESS_KEY/S3_SECRET_KEY the admin's keys, OWN_* and OTHER_*
the keys KFP's sync hook minted for two namespaces OWN and OTHER. Prints `ok SCENARIO` at the end.
- bucket: the admin makes `mlpipeline`, as the API server does at its start (ensureBucketExists);
- isolation: what a step of OWN can do with its keys under `private-artifacts/` and what it cannot.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

BUCKET = "mlpipeline"


# Any: boto3 ships no types (mypy skips it, pyproject.toml).
def client(prefix: str) -> Any:
    """A path-style S3 client with the keys in `<prefix>_ACCESS_KEY` and `<prefix>_SECRET_KEY`."""
    return boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT"], region_name="us-east-1",
                        aws_access_key_id=os.environ[f"{prefix}_ACCESS_KEY"],
                        aws_secret_access_key=os.environ[f"{prefix}_SECRET_KEY"],
                        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))  # fmt: skip


def error_code(call: Callable[[], object]) -> str | None:
    """The S3 error code `call` fails with, or None when it succeeds."""
    try:
        call()
    except ClientError as e:
        return str(e.response["Error"]["Code"])
    return None


def bucket() -> None:
    admin = client("S3")
    if error_code(lambda: admin.head_bucket(Bucket=BUCKET)) is not None:
        admin.create_bucket(Bucket=BUCKET)


def isolation() -> None:
    own_ns, other_ns = os.environ["OWN"], os.environ["OTHER"]
    own, other = client("OWN"), client("OTHER")
    mine = f"private-artifacts/{own_ns}/run-1/model.pt"
    theirs = f"private-artifacts/{other_ns}/run-1/model.pt"
    own.put_object(Bucket=BUCKET, Key=mine, Body=b"mine")
    assert own.get_object(Bucket=BUCKET, Key=mine)["Body"].read() == b"mine"
    listed = own.list_objects_v2(Bucket=BUCKET, Prefix=f"private-artifacts/{own_ns}/")
    assert [o["Key"] for o in listed.get("Contents", [])] == [mine], listed
    other.put_object(Bucket=BUCKET, Key=theirs, Body=b"theirs")  # so a refusal is not NoSuchKey
    refused = {
        "get": error_code(lambda: own.get_object(Bucket=BUCKET, Key=theirs)),
        "put": error_code(lambda: own.put_object(Bucket=BUCKET, Key=f"private-artifacts/{other_ns}/x", Body=b"x")),
        "delete": error_code(lambda: own.delete_object(Bucket=BUCKET, Key=theirs)),
        "list": error_code(lambda: own.list_objects_v2(Bucket=BUCKET, Prefix=f"private-artifacts/{other_ns}/")),
    }  # fmt: skip
    assert refused == dict.fromkeys(refused, "AccessDenied"), f"{own_ns}'s keys in {other_ns}'s prefix: {refused}"
    assert other.get_object(Bucket=BUCKET, Key=theirs)["Body"].read() == b"theirs", "the other's object changed"


SCENARIOS: dict[str, Callable[[], None]] = {"bucket": bucket, "isolation": isolation}

if __name__ == "__main__":
    SCENARIOS[sys.argv[1]]()
    print(f"ok {sys.argv[1]}")
