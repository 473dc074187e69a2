"""Benchmark: kubetrain's HTTP download (sha256 on) against curl, on one large loopback file.

    .venv/bin/python bench/download.py [--size-mb 256] [--rounds 7] [--json]

A separate server process serves one file of `--size-mb` MiB from /tmp over 127.0.0.1 with
sendfile(2) (Range supported, like a real static file server). Each round downloads it once with
kubetrain's fetch (the code behind `kubetrain download`: streaming, sha256 while streaming, the
.part file, checksum check and atomic rename into the cache) and once with
`curl -s -f -o FILE URL`, alternating which goes first. Both write into /tmp; every file is
deleted after its round, and `sync` runs before each timed download so neither pays for the
other's write-back. The result is the ratio of median throughputs, kubetrain / curl.
"""

from __future__ import annotations

import argparse
import hashlib
import http.server
import json
import os
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_MIB = 1 << 20


class _FileHandler(http.server.BaseHTTPRequestHandler):
    """GET of the one benchmark file, whole or from a `bytes=N-` range, body via sendfile(2)."""

    protocol_version = "HTTP/1.1"
    path_on_disk: Path

    def log_message(self, format: str, *args: object) -> None:
        del format, args

    def do_GET(self) -> None:
        size = self.path_on_disk.stat().st_size
        start = 0
        m = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
        if m and int(m.group(1)) < size:
            start = int(m.group(1))
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(size - start))
        self.send_header("ETag", f'"{size}"')
        self.end_headers()
        self.wfile.flush()
        with open(self.path_on_disk, "rb") as f:
            self.connection.sendfile(f, offset=start, count=size - start)


def serve(path: Path, port_file: Path) -> None:
    """Serve `path` until killed; write the chosen port to `port_file` once listening."""
    _FileHandler.path_on_disk = path
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FileHandler)
    server.daemon_threads = True
    tmp = port_file.with_suffix(".tmp")
    tmp.write_text(str(server.server_address[1]))
    tmp.rename(port_file)  # atomic: the parent never reads a half-written port
    server.serve_forever()


def _make_file(path: Path, size_mb: int) -> str:
    block = os.urandom(_MIB)
    digest = hashlib.sha256()
    with open(path, "wb") as f:
        for i in range(size_mb):
            # Vary every MiB so nothing along the way can dedupe or compress it.
            chunk = i.to_bytes(8, "little") + block[8:]
            f.write(chunk)
            digest.update(chunk)
    return digest.hexdigest()


def _wait_for_port(port_file: Path, server: subprocess.Popen[bytes], deadline_s: float) -> int:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if port_file.exists():
            port = int(port_file.read_text())
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                return port
        if server.poll() is not None:
            raise SystemExit(f"bench server exited with {server.returncode}")
        time.sleep(0.05)
    raise SystemExit("bench server did not start listening in time")


def _cpu_seconds() -> float:
    """User + system CPU of this process (all threads) plus its waited-for children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _kubetrain(url: str, digest: str, work: Path) -> float:
    from kubetrain.data.fetch import FetchOptions, fetch  # imported (and timed) once: warm-up

    cache = work / "kt-cache"
    start = time.perf_counter()
    got = fetch(url, sha256=digest, options=FetchOptions(cache_dir=cache, quiet=True))
    elapsed = time.perf_counter() - start
    assert got.sha256 == digest
    shutil.rmtree(cache)
    return elapsed


def _curl(url: str, size: int, work: Path) -> float:
    out = work / "curl.out"
    start = time.perf_counter()
    # --noproxy: a proxy named in the environment (as on a CI machine) must not sit on loopback.
    subprocess.run(["curl", "-s", "-f", "--noproxy", "*", "-o", str(out), url], check=True)
    elapsed = time.perf_counter() - start
    assert out.stat().st_size == size
    out.unlink()
    return elapsed


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print a table (or JSON); returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=256, help="file size in MiB (256)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds of kubetrain + curl (7)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--dir", default="/tmp", help="where the served file and downloads go (/tmp)")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--port-file", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve is not None:
        serve(args.serve, args.port_file)
        return 0
    if shutil.which("curl") is None:
        raise SystemExit("curl is not installed; it is the baseline of this benchmark")
    with tempfile.TemporaryDirectory(prefix="kubetrain-bench-download-", dir=args.dir) as tmp:
        work = Path(tmp)
        blob = work / "blob.bin"
        digest = _make_file(blob, args.size_mb)
        size = blob.stat().st_size
        port_file = work / "port"
        # The server's output goes nowhere: a server that outlived this process must not hold the
        # caller's pipes open (a test waiting on them then hangs, whatever this process reported).
        server = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(blob), "--port-file", str(port_file)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            # A Python start-up: well under a second on an idle machine, far longer on a loaded one.
            url = f"http://127.0.0.1:{_wait_for_port(port_file, server, 120)}/blob.bin"
            times: dict[str, list[float]] = {"kubetrain": [], "curl": []}
            cpu: dict[str, list[float]] = {"kubetrain": [], "curl": []}
            runners = {
                "kubetrain": lambda: _kubetrain(url, digest, work),
                "curl": lambda: _curl(url, size, work),
            }
            # Warm-up: the server's page cache holds the file, kubetrain's modules are imported.
            _curl(url, size, work)
            _kubetrain(url, digest, work)
            for r in range(args.rounds):
                order = ["kubetrain", "curl"] if r % 2 == 0 else ["curl", "kubetrain"]
                for tool in order:
                    # Flush dirty pages of earlier rounds so write-back throttling from one
                    # tool's file never lands on the other tool's timing.
                    os.sync()
                    before = _cpu_seconds()
                    times[tool].append(runners[tool]())
                    cpu[tool].append(_cpu_seconds() - before)
        finally:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    rates = {tool: [size / t / 1e6 for t in ts] for tool, ts in times.items()}
    medians = {tool: statistics.median(rs) for tool, rs in rates.items()}
    ratio = medians["kubetrain"] / medians["curl"]
    result = {
        "size_bytes": size,
        "rounds": args.rounds,
        "mb_per_s": {tool: [round(r, 1) for r in rs] for tool, rs in rates.items()},
        "median_mb_per_s": {tool: round(m, 1) for tool, m in medians.items()},
        "ratio_kubetrain_over_curl": round(ratio, 3),
        # Client CPU per GB downloaded: a noise-robust view on a shared machine.
        "cpu_s_per_gb": {tool: round(statistics.median(c) / (size / 1e9), 3) for tool, c in cpu.items()},
        "load_average_1m": round(os.getloadavg()[0], 2),
        "dir": args.dir,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"file: {size / 1e6:.0f} MB over http://127.0.0.1, {args.rounds} rounds, alternating, files in {args.dir}"
        )
        for tool, rs in rates.items():
            each = ", ".join(f"{r:.0f}" for r in rs)
            print(
                f"{tool:>9}: median {medians[tool]:7.0f} MB/s  (rounds: {each}); "
                f"CPU {result['cpu_s_per_gb'][tool]:.2f} s/GB"
            )
        print(f"ratio kubetrain/curl: {ratio:.3f}  (1-min load average {result['load_average_1m']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
