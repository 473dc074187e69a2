"""`kubetrain download SOURCE --out DIR [--sha256 HEX] [--shards N]`: fetch a data set."""

from __future__ import annotations

import argparse
import sys
import threading

from kubetrain.data.archives import MAX_UNPACKED_BYTES
from kubetrain.data.download import download
from kubetrain.data.errors import DownloadCancelledError
from kubetrain.data.fetch import default_cache_dir
from kubetrain.data.http import RetryPolicy
from kubetrain.launcher.signals import CancelGuard, Cancelled

__all__ = ["register", "run"]

_EPILOG = """\
SOURCE is builtin:digits; an http(s), s3://, gs:// (fsspec), file:// URL or a path to an .npz or
a tar/zip/gz archive; a base URL ending in / (or a directory) holding the MNIST idx files; or
several URLs of the MNIST files (separate arguments or comma-separated; append #sha256=HEX to
verify each). The output directory appears only when complete."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `download` subcommand."""
    p = subparsers.add_parser(
        "download",
        help="download a data set and write it in the sharded dataset format",
        description=__doc__,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("source", nargs="+", metavar="SOURCE", help="where the data comes from")
    p.add_argument("--out", required=True, metavar="DIR", help="dataset directory to write")
    p.add_argument("--sha256", metavar="HEX", help="expected sha256 of a single-file source")
    p.add_argument("--shards", type=int, default=1, metavar="N", help="training shards (1)")
    p.add_argument(
        "--cache-dir",
        metavar="DIR",
        help=f"where downloads are cached and resumed (default {default_cache_dir()})",
    )
    p.add_argument("--refresh", action="store_true", help="ignore cached downloads")
    p.add_argument("--retries", type=int, default=6, metavar="N", help="tries per file (6)")
    p.add_argument(
        "--speed-limit",
        type=float,
        default=RetryPolicy.min_speed,
        metavar="BYTES",
        help=f"give up on an attempt slower than BYTES per second over --speed-time ({RetryPolicy.min_speed:g})",
    )
    p.add_argument(
        "--speed-time",
        type=float,
        default=RetryPolicy.speed_window,
        metavar="SECONDS",
        help=f"the window --speed-limit is measured over ({RetryPolicy.speed_window:g})",
    )
    p.add_argument(
        "--max-unpacked-bytes",
        type=int,
        default=MAX_UNPACKED_BYTES,
        metavar="N",
        help=f"refuse an archive, .gz or npz that unpacks to more than N bytes ({MAX_UNPACKED_BYTES}: 1 GiB)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Download, then print one summary line per split; errors propagate to the dispatcher.

    SIGTERM and SIGINT (Ctrl-C) stop the download where it is, through its clean-up (the cache
    entry's lock is removed, the partial file kept for the next run to resume, --out untouched),
    and end it with exit code 5. Killed by the default action instead, it left its lock behind.
    """
    retry = RetryPolicy(attempts=args.retries, min_speed=args.speed_limit, speed_window=args.speed_time)
    guard = CancelGuard(threading.Event())
    try:
        with guard, guard.interruptible():
            info = download(
                args.source,
                args.out,
                sha256=args.sha256,
                shards=args.shards,
                cache_dir=args.cache_dir,
                refresh=args.refresh,
                retry=retry,
                quiet=args.quiet,
                max_unpacked_bytes=args.max_unpacked_bytes,
            )
    except Cancelled as e:
        raise DownloadCancelledError(
            f"stopped by {e.signal_name}; {args.out} was not written; run the same command again to resume"
        ) from None
    for split in info.splits:
        print(
            f"{args.out}: {info.name} {split}: {info.num_records(split)} records in "
            f"{len(info.shards(split))} shard(s), features {list(info.feature_shape)}",
            file=sys.stdout,
        )
    return 0
