"""The multi-user tier's identity front without its binaries (tools/cluster/kfp/identity.py).

The OIDC provider's users file, oauth2-proxy's alpha config and command line, the dashboard
stand-in script run in Node.js against a fake page, and start()'s refusals before anything runs.
tests/integration/test_identity_front.py runs the real pair with a browser.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tools.cluster import processes
from tools.cluster.kfp import identity

PORTS = identity.Ports(proxy=28400, provider=28401)
UPSTREAM = "http://127.0.0.1:18390"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def _config(tmp_path: Path) -> dict[str, Any]:
    return identity.alpha_config(PORTS, upstream=UPSTREAM, static_dir=tmp_path)


def test_the_users_file_logs_each_test_user_in_by_email_with_a_verified_email() -> None:
    users = json.loads(identity.users_file())
    assert sorted((u["Username"], u["Password"], u["Email"]) for u in users.values()) == sorted(
        (u.email, u.password, u.email) for u in identity.TEST_USERS
    )
    assert all(u["EmailVerified"] for u in users.values())  # oauth2-proxy refuses unverified emails
    assert all(key == u["ID"] for key, u in users.items())


def test_every_test_user_has_a_profile_namespace_of_their_own() -> None:
    profiles = [identity.PROFILES[u.email] for u in identity.TEST_USERS]
    assert len(set(profiles)) == len(profiles)
    assert all(DNS_LABEL.match(p) for p in profiles)
    assert identity.PROFILES["alice@example.com"] == "alice"


def test_the_provider_accepts_only_oauth2_proxys_callback() -> None:
    env = identity.provider_env({"PATH": "/bin"}, PORTS, Path("/x/users.json"))
    assert env == {"PATH": "/bin", "PORT": "28401", "USERS_FILE": "/x/users.json",
                   "REDIRECT_URI": "http://127.0.0.1:28400/oauth2/callback"}  # fmt: skip
    assert identity.issuer(PORTS) == "http://localhost:28401/"  # what the provider's main announces


def test_the_proxy_sets_the_userid_header_from_the_email_claim_and_drops_the_clients_own(tmp_path: Path) -> None:
    config = _config(tmp_path)
    assert config["injectRequestHeaders"] == [{
        "name": "kubeflow-userid", "preserveRequestValue": False, "values": [{"claimSource": {"claim": "email"}}],
    }]  # fmt: skip
    (provider,) = config["providers"]
    assert provider["provider"] == "oidc"
    assert provider["oidcConfig"]["issuerURL"] == identity.issuer(PORTS)
    assert provider["oidcConfig"]["emailClaim"] == "email"


def test_the_proxy_listens_on_loopback_only_and_sends_the_rest_upstream(tmp_path: Path) -> None:
    config = _config(tmp_path)
    assert config["server"] == {"bindAddress": "127.0.0.1:28400"}
    upstreams = {u["id"]: u for u in config["upstreamConfig"]["upstreams"]}
    assert upstreams["upstream"] == {"id": "upstream", "path": "/", "uri": UPSTREAM}
    lib = upstreams["dashboard-lib"]
    assert lib["uri"] == f"file://{tmp_path}/"
    # A regex path (with the rewrite): exactly the script, nothing that merely starts or ends like it.
    pattern = re.compile(lib["path"])
    assert pattern.search("/dashboard_lib.bundle.js")
    for other in ("/dashboard_lib.bundle.jsx", "/x/dashboard_lib.bundle.js", "/dashboard_libXbundle.js", "/"):
        assert not pattern.search(other), other


@pytest.mark.parametrize("upstream", ["127.0.0.1:18390", "file:///etc", "http://", ""])
def test_an_upstream_that_is_not_an_http_url_is_refused_naming_it(tmp_path: Path, upstream: str) -> None:
    with pytest.raises(identity.IdentityError, match=re.escape(f"upstream={upstream!r}")):
        identity.alpha_config(PORTS, upstream=upstream, static_dir=tmp_path)


def test_the_cookie_secret_stays_off_the_command_line() -> None:
    secret = "0123456789abcdef0123456789abcdef"
    argv = identity.proxy_argv(Path("/bin/oauth2-proxy"), Path("/x/oauth2-proxy.yaml"), PORTS)
    assert not any(secret in a or "cookie-secret" in a for a in argv)
    assert "--redirect-url=http://127.0.0.1:28400/oauth2/callback" in argv
    assert "--alpha-config=/x/oauth2-proxy.yaml" in argv
    assert identity.proxy_env({"A": "1"}, secret) == {"A": "1", "OAUTH2_PROXY_COOKIE_SECRET": secret}
    with pytest.raises(identity.IdentityError, match="17 bytes"):
        identity.proxy_env({}, "x" * 17)


@pytest.mark.parametrize(("proxy", "provider", "message"), [
    (0, 18401, "Ports.proxy=0"), (18400, 70000, "Ports.provider=70000"), (18400, 18400, "both on 18400"),
])  # fmt: skip
def test_bad_ports_are_refused(proxy: int, provider: int, message: str) -> None:
    with pytest.raises(identity.IdentityError, match=re.escape(message)):
        identity.Ports(proxy=proxy, provider=provider)


# --- the dashboard stand-in, in Node.js ---------------------------------------------------------------

_PAGE = """
const calls = [];
globalThis.window = {location: {search: process.argv[1]}};
globalThis.fetch = (url) => {
  calls.push(url);
  return Promise.resolve({json: () => Promise.resolve({email: process.argv[2]})});
};
globalThis.console = {warn: (m) => calls.push("warn: " + m)};
require(process.argv[3]);
window.centraldashboard.CentralDashboardEventHandler.init((handler, iframed) => {
  calls.push("cb iframed=" + iframed);
  handler.onNamespaceSelected = (ns) => calls.push("selected " + ns);
});
setTimeout(() => process.stdout.write(JSON.stringify(calls)), 0);
"""


def _run_stub(tmp_path: Path, search: str, email: str) -> list[str]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed (the KFP UI needs it: apt-get install nodejs)")
    script = tmp_path / identity.DASHBOARD_LIB
    script.write_text(identity.dashboard_lib_js())
    done = subprocess.run([node, "-e", _PAGE, search, email, str(script)], capture_output=True, text=True,
                          check=False, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    calls: list[str] = json.loads(done.stdout)
    return calls


def test_the_stand_in_selects_the_signed_in_users_profile(tmp_path: Path) -> None:
    assert _run_stub(tmp_path, "", "alice@example.com") == ["cb iframed=false", "/oauth2/userinfo", "selected alice"]
    assert _run_stub(tmp_path, "", "bob@example.com")[-1] == "selected bob"


def test_the_ns_parameter_overrides_the_profile_without_asking_who_is_signed_in(tmp_path: Path) -> None:
    assert _run_stub(tmp_path, "?ns=bob", "alice@example.com") == ["cb iframed=false", "selected bob"]


def test_an_email_without_a_profile_selects_nothing_and_says_so(tmp_path: Path) -> None:
    calls = _run_stub(tmp_path, "", "mallory@example.com")
    assert not any(c.startswith("selected") for c in calls)
    assert calls[-1] == "warn: dashboard_lib stand-in: no profile for this user"


# --- start() refuses before it runs anything -------------------------------------------------------------


def test_start_refuses_a_bad_upstream_before_anything_is_written_or_started(tmp_path: Path) -> None:
    with pytest.raises(identity.IdentityError, match="upstream="):
        identity.start(tmp_path, upstream="127.0.0.1:18390", ports=PORTS, bins=tmp_path)
    assert not (tmp_path / identity.DIR).exists()


def test_start_names_the_process_holding_a_port_before_starting_anything(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(processes.PortTakenError, match=f"port {port}, needed by oauth2-proxy"):
            identity.start(tmp_path, upstream=UPSTREAM, ports=identity.Ports(proxy=port, provider=28401),
                           bins=tmp_path)  # fmt: skip
    assert processes.records(tmp_path) == []


def test_a_provider_that_exits_at_its_start_fails_at_once_with_its_log(tmp_path: Path) -> None:
    bins = tmp_path / "bin"
    bins.mkdir()
    for name in (identity.PROVIDER_BINARY, identity.PROXY_BINARY):
        (bins / name).write_text("#!/bin/sh\necho 'listen tcp :28401: bind: address already in use' >&2\nexit 1\n")
        (bins / name).chmod(0o755)
    with socket.socket() as a, socket.socket() as b:  # two ports nothing else holds
        a.bind(("127.0.0.1", 0))
        b.bind(("127.0.0.1", 0))
        ports = identity.Ports(proxy=a.getsockname()[1], provider=b.getsockname()[1])
    with pytest.raises(identity.IdentityError, match=r"oidc-provider exited at its start(.|\n)*address already in use"):
        identity.start(tmp_path / "run", upstream=UPSTREAM, ports=ports, bins=bins)
    assert processes.records(tmp_path / "run") == []
    users = tmp_path / "run" / identity.DIR / "users.json"
    assert users.stat().st_mode & 0o077 == 0  # the test users' passwords: this user's alone
