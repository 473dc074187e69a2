"""The multi-user tier's pod-facing guard, as pure builders: hdrproxy's command line and the nftables drop."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tools.cluster import header_proxy, netfilter

ADDRESSES = {
    "listen_http": "10.244.0.1:18880",
    "upstream_http": "127.0.0.1:18888",
    "listen_grpc": "10.244.0.1:18881",
    "upstream_grpc": "127.0.0.1:18887",
}


def test_argv_names_both_listeners_and_each_extra_header() -> None:
    argv = header_proxy.argv(Path("/bin/hdrproxy"), **ADDRESSES, strip_headers=["x-goog-authenticated-user-email"])
    assert argv == [
        "/bin/hdrproxy",
        "--listen-http=10.244.0.1:18880",
        "--upstream-http=127.0.0.1:18888",
        "--listen-grpc=10.244.0.1:18881",
        "--upstream-grpc=127.0.0.1:18887",
        "--strip-header=x-goog-authenticated-user-email",
    ]


@pytest.mark.parametrize(
    ("field", "value"),
    [("upstream_http", "127.0.0.1"), ("upstream_grpc", "127.0.0.1:0"), ("listen_http", ":18880"),
     ("listen_grpc", "10.244.0.1:65536"), ("upstream_http", "localhost:http")],
)  # fmt: skip
def test_argv_refuses_an_address_that_is_not_host_and_port(field: str, value: str) -> None:
    flag = "--" + field.replace("_", "-")
    with pytest.raises(header_proxy.HeaderProxyError, match=f"{flag}='{value}': expected HOST:PORT"):
        header_proxy.argv(Path("/bin/hdrproxy"), **{**ADDRESSES, field: value})


@pytest.mark.parametrize("name", ["", "kubeflow userid", "x-user\r\nx-evil"])
def test_argv_refuses_a_strip_header_that_is_no_header_name(name: str) -> None:
    with pytest.raises(header_proxy.HeaderProxyError, match=r"--strip-header=.*not an HTTP header name"):
        header_proxy.argv(Path("/bin/hdrproxy"), **ADDRESSES, strip_headers=[name])


def test_drop_from_bridge_drops_pod_tcp_to_the_listed_ports_only() -> None:
    script = netfilter.drop_from_bridge([18888, 18390, 18887, 18888])
    rules = [line.strip() for line in script.splitlines() if "drop" in line]
    assert rules == ['iifname "kubetrain0" tcp dport { 18390, 18887, 18888 } drop']
    assert "type filter hook input priority filter; policy accept;" in script  # the host's own sockets
    assert script.startswith(
        f"table inet {netfilter.POD_GUARD_TABLE} {{}}\ndelete table inet"
    )  # replaces, never doubles


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"ports": []}, "ports=\\[\\]: expected one or more TCP ports"),
     ({"ports": [0]}, "ports=\\[0\\]"), ({"ports": [True]}, "ports=\\[True\\]"),
     ({"ports": [18888], "bridge": 'kubetrain0" accept'}, "bridge='kubetrain0\" accept': expected an interface"),
     ({"ports": [18888], "table": "x; flush ruleset"}, "table='x; flush ruleset'")],
)  # fmt: skip
def test_drop_from_bridge_refuses_bad_input(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(netfilter.NetfilterError, match=message):
        netfilter.drop_from_bridge(**kwargs)  # type: ignore[arg-type]


def test_drop_from_bridge_is_a_script_nft_accepts() -> None:
    nft = shutil.which("nft") or "/usr/sbin/nft"
    if not Path(nft).exists():
        pytest.skip("nft is not installed (Debian's nftables; make node-packages installs it)")
    done = subprocess.run(
        [nft, "-c", "-f", "/dev/stdin"],
        check=False,
        input=netfilter.drop_from_bridge([18888]),
        capture_output=True,
        text=True,
    )
    if "Operation not permitted" in done.stderr:
        pytest.skip("nft -c needs CAP_NET_ADMIN here")
    assert done.returncode == 0, done.stderr
