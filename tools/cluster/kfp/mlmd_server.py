"""An ML Metadata gRPC server (`ml_metadata.MetadataStoreService`) over the real MLMD C++ library.

KFP's driver and launcher reach MLMD at metadata-grpc-service:8080. No MLMD server binary can be
built here, but the ml-metadata wheel ships the C++ store behind a pybind extension with one function
per RPC, serialized request in, serialized response and a canonical status code out. This server
hands gRPC's raw bytes to those functions untouched. The three RPCs the extension lacks
(GetParentContextsByContexts, GetChildrenContextsByContexts, GetLineageGraph; KFP uses none) answer
UNIMPLEMENTED. It runs on the services venv's python (services_venv.py): ml-metadata needs protobuf 4.
With `--grpc-web HOST:PORT` it also answers the KFP UI's gRPC-web calls there (grpcweb.py), with the
same handlers: what Envoy does in front of MLMD in a cluster.

    python tools/cluster/kfp/mlmd_server.py --host 0.0.0.0 --port 8080 --sqlite /path/metadata.sqlite \
        [--grpc-web 127.0.0.1:18391]
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from ml_metadata.metadata_store.pywrap.metadata_store_extension import metadata_store as _ext
from ml_metadata.proto import metadata_store_pb2, metadata_store_service_pb2

if TYPE_CHECKING:  # the same file, by the name mypy gives it from the repository root
    from tools.cluster.kfp import grpcweb
else:
    import grpcweb  # beside this file: run as a script, its folder is on sys.path

SERVICE = "ml_metadata.MetadataStoreService"
GRACE_S = 5.0  # how long RPCs in flight at SIGTERM/SIGINT get to finish; new ones are refused
# Put* requests carry whole artifact lists with their properties; gRPC's 4 MiB default would refuse a big one.
MAX_MESSAGE_BYTES = 64 * 2**20
_CODES = {code.value[0]: code for code in grpc.StatusCode}  # absl and gRPC share the canonical numbers
Handler = Callable[[bytes, Any], bytes]


def status(code: int) -> Any:
    """The grpc.StatusCode with MLMD's canonical status `code`; UNKNOWN for a number gRPC does not define."""
    return _CODES.get(code, grpc.StatusCode.UNKNOWN)


def open_store(args: argparse.Namespace) -> tuple[Any, str]:
    """Open (and create or upgrade the schema of) the store `args` names; return it and a description."""
    config = metadata_store_pb2.ConnectionConfig()
    if args.mysql_host:
        mysql = config.mysql
        mysql.host, mysql.port, mysql.database, mysql.user = (
            args.mysql_host, args.mysql_port, args.mysql_database, args.mysql_user)  # fmt: skip
        if args.mysql_password_file:
            mysql.password = Path(args.mysql_password_file).read_text().strip()
        where = f"mysql {args.mysql_user}@{args.mysql_host}:{args.mysql_port}/{args.mysql_database}"
    else:
        config.sqlite.filename_uri = str(Path(args.sqlite).resolve())
        config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE_OPENCREATE
        where = f"sqlite {config.sqlite.filename_uri}"
    migration = metadata_store_pb2.MigrationOptions(enable_upgrade_migration=True)
    return _ext.CreateMetadataStore(config.SerializeToString(), migration.SerializeToString()), where


def handlers(store: Any) -> dict[str, Handler]:
    """One raw-bytes handler per method of the service descriptor, all calling `store` under one lock."""
    # One store object is one database connection, and MLMD does not document it as thread-safe
    # (its own server opens a connection per request), so calls are serialized; gRPC's pool still
    # accepts and queues requests while one runs.
    lock = threading.Lock()

    def forward(name: str, fn: Any) -> Handler:
        def call(request: bytes, context: Any) -> bytes:
            with lock:
                response, message, code = fn(store, request)
            if code != 0:
                text = message.decode("utf-8", "replace")
                context.set_code(status(code))
                context.set_details(text if code in _CODES else f"{text} (MLMD status code {code})")
                line = " ".join(text.split())[:300]  # MLMD quotes protos over many lines; one line per failure
                print(f"mlmd_server: {name}: {status(code).name}: {line}", file=sys.stderr, flush=True)
                return b""
            return bytes(response)

        return call

    def unimplemented(name: str) -> Handler:
        def call(request: bytes, context: Any) -> bytes:
            context.set_code(grpc.StatusCode.UNIMPLEMENTED)
            context.set_details(f"{SERVICE}/{name} is not implemented by this server: the ml-metadata library "
                                "it wraps has no binding for it")  # fmt: skip
            return b""

        return call

    methods = metadata_store_service_pb2.DESCRIPTOR.services_by_name["MetadataStoreService"].methods
    return {
        m.name: forward(m.name, getattr(_ext, m.name)) if hasattr(_ext, m.name) else unimplemented(m.name)
        for m in methods
    }


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM or SIGINT, then stop gracefully and return 0; 2 if the store or port fails."""
    parser = argparse.ArgumentParser(description=f"Serve {SERVICE} over the MLMD C++ library.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080, help="0 picks a free one (printed on stderr)")
    backend = parser.add_mutually_exclusive_group(required=True)
    backend.add_argument("--sqlite", metavar="PATH", help="the SQLite file (created if missing)")
    backend.add_argument("--mysql-host", help="a MySQL/MariaDB server instead of SQLite")
    parser.add_argument("--mysql-port", type=int, default=3306)
    parser.add_argument("--mysql-database", default="metadb")
    parser.add_argument("--mysql-user", default="root")
    parser.add_argument("--mysql-password-file", metavar="PATH")
    parser.add_argument("--grpc-web", metavar="HOST:PORT", help="also serve gRPC-web (for the KFP UI) there")
    args = parser.parse_args(argv)

    try:
        store, where = open_store(args)
    except (RuntimeError, OSError) as e:
        print(f"mlmd_server: cannot open the metadata store: {e}", file=sys.stderr)
        return 2
    # grpc sets SO_REUSEPORT by default: a second server on the same port would start and share it.
    options = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES), ("grpc.so_reuseport", 0)]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=options)
    raw = handlers(store)
    rpcs = {name: grpc.unary_unary_rpc_method_handler(fn) for name, fn in raw.items()}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, rpcs),))
    try:
        port = server.add_insecure_port(f"{args.host}:{args.port}")
    except RuntimeError as e:  # the pinned grpcio raises (older ones returned 0)
        print(f"mlmd_server: cannot listen on {args.host}:{args.port} (port taken?): {e}", file=sys.stderr)
        return 2

    web = None
    if args.grpc_web:
        web_host, _, web_port = args.grpc_web.rpartition(":")
        try:
            web = grpcweb.server(web_host, int(web_port), SERVICE, raw)
        except (OSError, ValueError) as e:
            print(f"mlmd_server: cannot serve gRPC-web on {args.grpc_web} (port taken?): {e}", file=sys.stderr)
            return 2

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    server.start()
    print(f"mlmd_server: serving {SERVICE} on {args.host}:{port} ({where})", file=sys.stderr, flush=True)
    if web is not None:
        grpcweb.serve_in_background(web, "mlmd_server")
    stop.wait()
    if web is not None:
        web.shutdown()
    server.stop(GRACE_S).wait()
    print("mlmd_server: stopped", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
