"""Print a KFP run's output artifacts as JSON: what ML Metadata records and what the object store holds.

Run by the services venv's python (tools/cluster/kfp/services_venv.py): it needs ml_metadata and
boto3, which the project venv does not have. This is how the Kubeflow UI finds a run's artifacts
(the run's context in MLMD, then each artifact's URI in the store), so the e2e tests check the
same path. For each artifact: its type, display name, URI, custom properties, and every object
under the URI with its size and, for small text objects, their content.

    python run_artifacts.py --run-id ID --mlmd HOST:PORT --s3 http://HOST:PORT --access-key K --secret-key S
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import Any

import boto3
from google.protobuf.json_format import MessageToDict
from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2

TEXT_LIMIT = 256 * 1024


def _properties(artifact: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in artifact.custom_properties.items():
        if key == "store_session_info":
            continue  # the store's connection settings, not an output
        as_dict = MessageToDict(value)
        kind, raw = next(iter(as_dict.items()), ("", None))
        if kind == "structValue" and isinstance(raw, dict) and len(raw) == 1 and set(raw) <= {"list", "struct"}:
            raw = next(iter(raw.values()))  # how KFP's launcher stores a list or dict metadata value
        out[key] = raw
    return out


def _objects(s3: Any, uri: str) -> dict[str, dict[str, Any]]:
    scheme, _, rest = uri.partition("://")
    if scheme not in ("minio", "s3"):
        return {}
    bucket, _, prefix = rest.partition("/")
    found: dict[str, dict[str, Any]] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            relative = item["Key"][len(prefix) :].lstrip("/") or "."
            entry: dict[str, Any] = {"size": item["Size"]}
            if item["Size"] <= TEXT_LIMIT:
                body = s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
                with contextlib.suppress(UnicodeDecodeError):  # binary (model.pt): sizes only
                    entry["text"] = body.decode()
            found[relative] = entry
    return found


def main(argv: list[str] | None = None) -> int:
    """Print the artifacts of one run; exit 2 when MLMD has no such run."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--mlmd", required=True, help="HOST:PORT of the MLMD gRPC server")
    parser.add_argument("--s3", required=True, help="the object store's endpoint URL")
    parser.add_argument("--access-key", required=True)
    parser.add_argument("--secret-key", required=True)
    args = parser.parse_args(argv)
    host, _, port = args.mlmd.rpartition(":")
    store = metadata_store.MetadataStore(metadata_store_pb2.MetadataStoreClientConfig(host=host, port=int(port)))
    context = store.get_context_by_type_and_name("system.PipelineRun", args.run_id)
    if context is None:
        print(f"run_artifacts: MLMD has no pipeline run {args.run_id}", file=sys.stderr)
        return 2
    s3 = boto3.client("s3", endpoint_url=args.s3, aws_access_key_id=args.access_key,
                      aws_secret_access_key=args.secret_key, region_name="us-east-1")  # fmt: skip
    types = {t.id: t.name for t in store.get_artifact_types()}
    artifacts = [
        {"type": types.get(a.type_id, str(a.type_id)), "uri": a.uri, "properties": _properties(a),
         "name": a.custom_properties["display_name"].string_value if "display_name" in a.custom_properties else "",
         "objects": _objects(s3, a.uri)}
        for a in store.get_artifacts_by_context(context.id)
    ]  # fmt: skip
    json.dump({"run_id": args.run_id, "artifacts": artifacts}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
