"""The multi-user tier's user-facing identity front: an OIDC provider and oauth2-proxy, as host processes.

docs/design/multi-user.md ("Identity flows") says what each piece does; in short:
- the OIDC provider is zitadel/oidc's `example/server` (tools/identity/build.sh): a login form, the
  code flow, and the users of a USERS_FILE, here the two test users of TEST_USERS. Its issuer is
  `http://localhost:<port>/` (its main hard-codes `localhost`), which the browser and oauth2-proxy
  both reach;
- oauth2-proxy is the only user-facing entry. A request without a session is redirected to the
  login form; after the code flow it holds a session cookie, and every request it passes upstream
  carries `kubeflow-userid` set from the session's `email` claim, whatever value the client sent
  (`preserveRequestValue: false`: oauth2-proxy strips the header, and its `_` spellings, before it
  injects). It binds loopback only: nothing on the pod network can reach it;
- oauth2-proxy also serves `/dashboard_lib.bundle.js`, the stand-in for the Central Dashboard's
  client library that the KFP UI loads in `DEPLOYMENT=KUBEFLOW` mode (dashboard_lib_js).

The builders (users_file, provider_env, alpha_config, proxy_argv, proxy_env, dashboard_lib_js) are
pure; start() writes their files under `<run>/identity/` and starts both processes there, with
their records in that folder, so stop() ends these two and nothing else of the cluster.
"""

from __future__ import annotations

import json
import os
import secrets
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tools.cluster import build_script, operators, processes

REPO_ROOT = Path(__file__).resolve().parents[3]
BUILD_SCRIPT = REPO_ROOT / "tools" / "identity" / "build.sh"
PROXY_BINARY = "oauth2-proxy"
PROVIDER_BINARY = "oidc-provider"
# Beside the UI server's 18390/18391; no other piece of the tier binds these (backend.ports()).
PROXY_PORT = 18400  # oauth2-proxy, the user-facing entry: http://127.0.0.1:18400
PROVIDER_PORT = 18401  # the OIDC provider: issuer http://localhost:18401/
USERID_HEADER = "kubeflow-userid"  # what KFP's API and UI servers read (KUBEFLOW_USERID_HEADER)
# The clients the example provider registers in its main: `web`, a confidential client whose
# secret is fixed in upstream's code (storage.WebClient("web", "secret", ...)).
CLIENT_ID = "web"
CLIENT_SECRET = "secret"
DASHBOARD_LIB = "dashboard_lib.bundle.js"
DIR = "identity"  # under the run folder: configs, logs and the two process records
READY_S = 60


class IdentityError(RuntimeError):
    """The identity front could not be configured, built or started; the message says which and why."""


@dataclass(frozen=True)
class TestUser:
    """A login of the OIDC provider: TEST USERS ONLY, with passwords in this file, for the e2e tier."""

    email: str
    password: str
    first_name: str


# The provider's only users. Their passwords are public (this file): never reuse them anywhere.
TEST_USERS = (
    TestUser(email="alice@example.com", password="alice-e2e-password", first_name="Alice"),
    TestUser(email="bob@example.com", password="bob-e2e-password", first_name="Bob"),
)
# Which profile namespace the UI selects for a signed-in email (the dashboard stand-in's table):
# today each email's local part. The real dashboard asks the Profile controller's KFAM API for the
# namespaces a user owns; change this table together with the profiles the tier creates.
PROFILES: Mapping[str, str] = {"alice@example.com": "alice", "bob@example.com": "bob"}


@dataclass(frozen=True)
class Ports:
    """The two host ports: oauth2-proxy's (on 127.0.0.1) and the OIDC provider's."""

    proxy: int = PROXY_PORT
    provider: int = PROVIDER_PORT

    def __post_init__(self) -> None:
        for name in ("proxy", "provider"):
            port = getattr(self, name)
            if not 0 < port < 65536:
                raise IdentityError(f"Ports.{name}={port} is not a TCP port; give one in 1..65535")
        if self.proxy == self.provider:
            raise IdentityError(f"Ports: oauth2-proxy and the OIDC provider both on {self.proxy}; give each its own")

    def described(self) -> dict[int, str]:
        """{port: what binds it}, for processes.require_free and the backend's port list."""
        return {self.proxy: "oauth2-proxy (the user-facing entry)", self.provider: "the OIDC provider"}


def issuer(ports: Ports) -> str:
    """The provider's issuer URL, as its main builds it: `http://localhost:<port>/`."""
    return f"http://localhost:{ports.provider}/"


def url(ports: Ports) -> str:
    """The entry a person opens: oauth2-proxy on loopback."""
    return f"http://127.0.0.1:{ports.proxy}"


def callback(ports: Ports) -> str:
    """oauth2-proxy's redirect URL, registered with the provider as the `web` client's only one."""
    return f"{url(ports)}/oauth2/callback"


def users_file(users: tuple[TestUser, ...] = TEST_USERS) -> str:
    """The provider's USERS_FILE (storage.StoreFromFile: id -> User); the login name is the email."""
    out: dict[str, dict[str, Any]] = {}
    for i, user in enumerate(users, start=1):
        out[f"id{i}"] = {
            "ID": f"id{i}", "Username": user.email, "Password": user.password, "FirstName": user.first_name,
            "LastName": "Test", "Email": user.email, "EmailVerified": True, "Phone": "", "PhoneVerified": False,
            "PreferredLanguage": "en", "IsAdmin": False,
        }  # fmt: skip
    return json.dumps(out, indent=2)


def provider_env(base: Mapping[str, str], ports: Ports, users: Path) -> dict[str, str]:
    """The provider's environment (its config.FromEnvVars): port, users file, the callback it accepts."""
    return {**base, "PORT": str(ports.provider), "USERS_FILE": str(users), "REDIRECT_URI": callback(ports)}


def alpha_config(ports: Ports, *, upstream: str, static_dir: Path) -> dict[str, Any]:
    """oauth2-proxy's `--alpha-config`: where it listens, the provider, the upstreams and the injected header.

    `upstream` is where authenticated requests go (the KFP UI server); `static_dir` holds
    DASHBOARD_LIB, served at `/DASHBOARD_LIB` (a file upstream with a rewrite: without one,
    oauth2-proxy strips the whole path and would list the folder).
    """
    parsed = urllib.parse.urlsplit(upstream)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise IdentityError(f"upstream={upstream!r}: give the URL authenticated requests go to, e.g. "
                            "http://127.0.0.1:18390 (the KFP UI server)")  # fmt: skip
    lib = DASHBOARD_LIB.replace(".", r"\.")
    return {
        "server": {"bindAddress": f"127.0.0.1:{ports.proxy}"},
        "providers": [{
            "id": "oidc", "provider": "oidc", "name": "kubetrain test OIDC provider",
            "clientID": CLIENT_ID, "clientSecret": CLIENT_SECRET, "scope": "openid email profile",
            "code_challenge_method": "S256",  # PKCE, which the provider offers
            "oidcConfig": {"issuerURL": issuer(ports), "emailClaim": "email", "audienceClaims": ["aud"]},
        }],
        "upstreamConfig": {"upstreams": [
            {"id": "dashboard-lib", "path": f"^/{lib}$", "rewriteTarget": f"/{DASHBOARD_LIB}",
             "uri": f"file://{static_dir}/"},
            {"id": "upstream", "path": "/", "uri": upstream},
        ]},
        # The identity KFP trusts: the session's email, never the client's own header.
        "injectRequestHeaders": [{"name": USERID_HEADER, "preserveRequestValue": False,
                                  "values": [{"claimSource": {"claim": "email"}}]}],
    }  # fmt: skip


def proxy_argv(binary: Path, config: Path, ports: Ports) -> list[str]:
    """oauth2-proxy with the alpha config; the cookie secret comes in proxy_env, off the command line."""
    return [
        str(binary), f"--alpha-config={config}",
        f"--redirect-url={callback(ports)}",
        "--email-domain=*",  # every user the provider knows (its users file is the allow list)
        "--skip-provider-button=true",  # no session: straight to the login form
        "--cookie-secure=false",  # plain HTTP on loopback
        "--cookie-name=_kubetrain_oauth2_proxy",
        "--silence-ping-logging=true",
    ]  # fmt: skip


def proxy_env(base: Mapping[str, str], cookie_secret: str) -> dict[str, str]:
    """oauth2-proxy's environment: `base` and the cookie secret (16, 24 or 32 bytes)."""
    if len(cookie_secret) not in (16, 24, 32):
        raise IdentityError(f"cookie secret of {len(cookie_secret)} bytes: oauth2-proxy needs 16, 24 or 32")
    return {**base, "OAUTH2_PROXY_COOKIE_SECRET": cookie_secret}


_DASHBOARD_LIB_JS = """\
// kubetrain's stand-in for the Central Dashboard's client library (docs/design/multi-user.md,
// tools/cluster/kfp/identity.py), served by oauth2-proxy: it selects the signed-in user's profile.
(function () {
  var PROFILES = %s;
  function init(cb) {
    var handler = {};
    cb(handler, false);  // not iframed in a dashboard
    var asked = new URLSearchParams(window.location.search).get("ns");
    var found = asked ? Promise.resolve(asked) : fetch("/oauth2/userinfo", {credentials: "same-origin"})
      .then(function (r) { return r.json(); }).then(function (u) { return PROFILES[u.email]; });
    found.then(function (ns) {
      if (ns && handler.onNamespaceSelected) { handler.onNamespaceSelected(ns); }
      else if (!ns) { console.warn("dashboard_lib stand-in: no profile for this user"); }
    });
  }
  window.centraldashboard = {CentralDashboardEventHandler: {init: init}};
})();
"""


def dashboard_lib_js(profiles: Mapping[str, str] = PROFILES) -> str:
    """The stand-in script: `init(cb)` calls `cb(handler, false)`, then `handler.onNamespaceSelected(ns)`.

    `ns` is `?ns=` when the page's URL has one (to try another user's namespace), else the profile
    of the email `/oauth2/userinfo` returns, from `profiles`.
    """
    return _DASHBOARD_LIB_JS % json.dumps(dict(profiles), sort_keys=True)


# --- building and running ---------------------------------------------------------------------------


def build(log: Path | None = None) -> Path:
    """The bin dir of oauth2-proxy and the OIDC provider, built first if missing (minutes cold)."""
    try:
        return build_script.build(BUILD_SCRIPT, log)
    except build_script.BuildScriptError as e:
        raise IdentityError(str(e)) from e


def built() -> Path | None:
    """The cached bin dir if both binaries are built (for tests that must not build them), else None."""
    bins = build_script.printed_folder(BUILD_SCRIPT, "--print-bin")
    ok = bins is not None and all(os.access(bins / b, os.X_OK) for b in (PROXY_BINARY, PROVIDER_BINARY))
    return bins if ok else None


@dataclass(frozen=True)
class Front:
    """A running identity front: the URL a person opens, the provider's issuer, and its folder."""

    url: str
    issuer: str
    folder: Path

    @property
    def logs(self) -> tuple[Path, Path]:
        """oauth2-proxy's log and the provider's."""
        return self.folder / "oauth2-proxy.log", self.folder / "oidc-provider.log"


def _write_private(path: Path, text: str) -> Path:
    """Write `text` to `path`, readable by this user only from its creation on (passwords, the client secret)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    path.chmod(0o600)  # a file left by an earlier start keeps its mode through O_CREAT
    return path


def _serving(record: processes.ProcessRecord, address: str, log: Path) -> bool:
    """Whether `address` answers 200; raises at once if the process has ended (bad flags, a taken port)."""
    if not processes.running(record):
        tail = log.read_text()[-3000:] if log.exists() else ""
        raise IdentityError(f"{record.name} exited at its start; its log ({log}) ends:\n{tail}")
    try:
        with urllib.request.urlopen(address, timeout=3) as reply:
            return int(reply.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def start(run: Path, *, upstream: str, ports: Ports = Ports(), bins: Path | None = None) -> Front:
    """Start the OIDC provider, then oauth2-proxy in front of `upstream`; return once both serve.

    Everything goes under `<run>/identity/`. `bins`: the built binaries' folder (default: build()).
    Raises IdentityError (or processes.PortTakenError) naming what failed and its log.
    """
    folder = run / DIR
    alpha = alpha_config(ports, upstream=upstream, static_dir=folder / "static")  # bad input fails first
    processes.require_free(ports.described())
    bins = build(folder / "build.log") if bins is None else bins
    (folder / "static").mkdir(parents=True, exist_ok=True)
    (folder / "static" / DASHBOARD_LIB).write_text(dashboard_lib_js())
    users = _write_private(folder / "users.json", users_file())
    config = _write_private(folder / "oauth2-proxy.yaml", yaml.safe_dump(alpha, sort_keys=False))
    front = Front(url=url(ports), issuer=issuer(ports), folder=folder)
    proxy_log, provider_log = front.logs
    env = dict(os.environ)
    try:
        provider = processes.start(folder, PROVIDER_BINARY, [str(bins / PROVIDER_BINARY)],
                                   env=provider_env(env, ports, users), log=provider_log, cwd=folder)  # fmt: skip
        # oauth2-proxy reads the provider's discovery document at its start: the provider comes first.
        discovery = f"http://127.0.0.1:{ports.provider}/.well-known/openid-configuration"
        operators.wait_for("the OIDC provider", lambda: _serving(provider, discovery, provider_log), READY_S,
                           provider_log)  # fmt: skip
        proxy = processes.start(folder, PROXY_BINARY, proxy_argv(bins / PROXY_BINARY, config, ports),
                                env=proxy_env(env, secrets.token_hex(16)), log=proxy_log, cwd=folder)  # fmt: skip
        operators.wait_for("oauth2-proxy", lambda: _serving(proxy, f"{front.url}/ping", proxy_log), READY_S, proxy_log)
    except (TimeoutError, processes.ProcessError, IdentityError) as e:
        stop(front)
        raise IdentityError(f"the identity front did not start: {e}") from e
    return front


def stop(front: Front) -> list[int]:
    """End the front's two processes (and only those); the pids ended."""
    return processes.stop_all(front.folder)
