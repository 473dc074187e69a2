"""The multi-user tier's nftables drop, loaded for real by nft in a network namespace of its own
(`unshare -n`: an empty ruleset, and the host's left alone): loading it twice leaves one rule, and
the firewall restore that `down` runs removes it. Needs root (or CAP_NET_ADMIN) and Debian's nftables;
skips otherwise. Whether packets from a pod are dropped is the e2e tier's check (a pod on the bridge).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from tools.cluster import netfilter
    record = Path(sys.argv[1])
    netfilter.snapshot(record)
    script = netfilter.drop_from_bridge([18888, 18887])
    netfilter.load(script)
    netfilter.load(script)
    rules = [o["rule"] for o in netfilter.ruleset() if "rule" in o]
    removed = netfilter.restore(record)
    print(json.dumps({"rules": rules, "removed": removed, "after": netfilter.ruleset()}))
""")


def test_the_drop_loads_once_however_often_and_down_removes_it(tmp_path: Path) -> None:
    if not shutil.which("unshare") or not (shutil.which("nft") or Path("/usr/sbin/nft").exists()):
        pytest.skip("needs unshare and nft (Debian's util-linux and nftables)")
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a network namespace here: {probe.stderr.strip()}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        ["unshare", "-n", sys.executable, "-c", SCRIPT, str(tmp_path / "ruleset.json")],
        capture_output=True, text=True, check=False, env=env, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    [rule] = out["rules"]
    assert (rule["family"], rule["table"], rule["chain"]) == ("inet", "kubetrain_pod_guard", "input")
    text = json.dumps(rule["expr"])
    assert '"kubetrain0"' in text and "18887" in text and "18888" in text and '"drop"' in text
    assert out["removed"] == ["table inet kubetrain_pod_guard"]
    assert [o for o in out["after"] if "table" in o or "rule" in o] == []
