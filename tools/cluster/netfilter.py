"""The host's firewall before the real node started, and putting it back exactly afterwards.

The kubelet (KUBE-FIREWALL, KUBE-KUBELET-CANARY), kube-proxy (KUBE-SERVICES and friends) and the
CNI portmap plugin (CNI-HOSTPORT-*) add tables, chains and rules through iptables-nft. `snapshot`
records the ruleset as `nft -j` prints it; `restore` deletes every rule, chain and table that was
not in it, newest first, and leaves everything that was, so a host with its own rules keeps them
untouched. Rule handles are unique within a table and never reused while it exists, which is what
tells an added rule from a kept one.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

Key = tuple[str, ...]


class NetfilterError(RuntimeError):
    """nft is missing or refused a command; the message says which."""


def _nft(*args: str) -> str:
    nft = shutil.which("nft") or "/usr/sbin/nft"
    try:
        done = subprocess.run([nft, *args], capture_output=True, text=True, check=False, timeout=60)
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
