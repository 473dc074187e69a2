"""The host's firewall before the real node started, and putting it back exactly afterwards.

The kubelet (KUBE-FIREWALL, KUBE-KUBELET-CANARY), kube-proxy (KUBE-SERVICES and friends) and the
CNI portmap plugin (CNI-HOSTPORT-*) add tables, chains and rules through iptables-nft. `snapshot`
records the ruleset as `nft -j` prints it; `restore` deletes every rule, chain and table that was
not in it, newest first, and leaves everything that was, so a host with its own rules keeps them
untouched. Rule handles are unique within a table and never reused while it exists, which is what
tells an added rule from a kept one.

`drop_from_bridge` builds the one rule set of our own: the multi-user tier's drop of pod traffic to
the host ports that must be reached only through the header-stripping proxy (tools/hdrproxy). It is
loaded after `snapshot`, so `restore` removes it on `down` like the rest.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tools.cluster.node_config import BRIDGE

Key = tuple[str, ...]
# The table `drop_from_bridge` fills: ours alone, so loading it again replaces only what we made.
POD_GUARD_TABLE = "kubetrain_pod_guard"
# A Linux interface name (IFNAMSIZ: 15 characters), and the names nft takes for a table.
_IFNAME = re.compile(r"[A-Za-z0-9_.-]{1,15}")
_TABLE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


class NetfilterError(RuntimeError):
    """nft is missing or refused a command; the message says which."""


def _nft(*args: str, stdin: str | None = None) -> str:
    nft = shutil.which("nft") or "/usr/sbin/nft"
    try:
        done = subprocess.run([nft, *args], input=stdin, capture_output=True, text=True, check=False, timeout=60)
    except OSError as e:
        raise NetfilterError(f"nft could not run ({e}); install Debian's nftables") from e
    if done.returncode != 0:
        raise NetfilterError(f"nft {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def ruleset() -> list[dict[str, Any]]:
    """The current ruleset as `nft -j list ruleset` objects."""
    objects: list[dict[str, Any]] = json.loads(_nft("-j", "list", "ruleset"))["nftables"]
    return objects


def snapshot(path: Path) -> None:
    """Record the current ruleset in `path` (once: a second call keeps the first record)."""
    if not path.exists():
        path.write_text(json.dumps(ruleset()))


def keys(objects: list[dict[str, Any]]) -> dict[str, set[Key]]:
    """Tables, chains and rules of a ruleset, each as a tuple that names it."""
    found: dict[str, set[Key]] = {"table": set(), "chain": set(), "rule": set()}
    for obj in objects:
        if "table" in obj:
            t = obj["table"]
            found["table"].add((t["family"], t["name"]))
        elif "chain" in obj:
            c = obj["chain"]
            found["chain"].add((c["family"], c["table"], c["name"]))
        elif "rule" in obj:
            r = obj["rule"]
            found["rule"].add((r["family"], r["table"], r["chain"], str(r["handle"])))
    return found


def added(baseline: list[dict[str, Any]], now: list[dict[str, Any]]) -> dict[str, set[Key]]:
    """What `now` has that `baseline` had not: the rules, chains and tables to delete."""
    before, after = keys(baseline), keys(now)
    return {kind: after[kind] - before[kind] for kind in after}


def restore(path: Path) -> list[str]:
    """Delete whatever was added since `snapshot(path)`; what was deleted, one line each."""
    if not path.exists():
        return []
    extra = added(json.loads(path.read_text()), ruleset())
    done: list[str] = []
    kept_tables = keys(json.loads(path.read_text()))["table"]
    for family, table, chain, handle in sorted(extra["rule"]):
        if (family, table) in extra["table"]:
            continue  # goes with its table
        _nft("delete", "rule", family, table, chain, "handle", handle)
        done.append(f"rule {family} {table} {chain} #{handle}")
    # Chains jump to each other: flush them all first, then delete.
    chains = sorted(c for c in extra["chain"] if (c[0], c[1]) in kept_tables)
    for family, table, chain in chains:
        _nft("flush", "chain", family, table, chain)
    for family, table, chain in chains:
        _nft("delete", "chain", family, table, chain)
        done.append(f"chain {family} {table} {chain}")
    for family, table in sorted(extra["table"]):
        _nft("delete", "table", family, table)
        done.append(f"table {family} {table}")
    return done


def drop_from_bridge(ports: Iterable[int], *, bridge: str = BRIDGE, table: str = POD_GUARD_TABLE) -> str:
    """An `nft -f` script that drops TCP from pods (arriving on `bridge`) to these host ports.

    The bridge CNI enforces no NetworkPolicy, and the API and UI servers bind every interface, so
    without it a pod could dial them at the bridge's gateway and forge `kubeflow-userid`. Traffic
    that pods send through the stripping proxy reaches its own port, which is not listed. The
    script replaces `table` (inet: IPv4 and IPv6) whole, so loading it twice leaves one rule.
    """
    wanted = list(ports)
    bad = [p for p in wanted if isinstance(p, bool) or not isinstance(p, int) or not 0 < p < 65536]
    if not wanted or bad:
        raise NetfilterError(f"drop_from_bridge ports={wanted!r}: expected one or more TCP ports 1-65535")
    if not _IFNAME.fullmatch(bridge):
        raise NetfilterError(f"drop_from_bridge bridge={bridge!r}: expected an interface name, e.g. {BRIDGE}")
    if not _TABLE.fullmatch(table):
        raise NetfilterError(f"drop_from_bridge table={table!r}: expected a letter then letters, digits or '_'")
    listed = ", ".join(str(p) for p in sorted(set(wanted)))
    # Declaring the table before deleting it makes the delete succeed when it does not exist yet;
    # nft -f applies the file as one transaction, so no packet sees the table half made.
    return (
        f"table inet {table} {{}}\n"
        f"delete table inet {table}\n"
        f"table inet {table} {{\n"
        f"\tchain input {{\n"
        f"\t\ttype filter hook input priority filter; policy accept;\n"
        f'\t\tiifname "{bridge}" tcp dport {{ {listed} }} drop\n'
        f"\t}}\n"
        f"}}\n"
    )


def load(script: str) -> None:
    """Apply an `nft -f` script (such as `drop_from_bridge`'s) in one transaction."""
    _nft("-f", "/dev/stdin", stdin=script)
