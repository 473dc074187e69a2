"""The multi-user tier's identity front on its own: the OIDC provider and oauth2-proxy, logged into in Chromium.

No cluster: tools/cluster/kfp/identity.py starts both binaries (tools/identity/build.sh) in front of
an echo server of this test, which stands where the KFP UI server will stand and records the
`kubeflow-userid` of every request that reaches it. What a user relies on: no session, no
upstream; after the login form, the header is the signed-in user's email, whatever the client
sends; the dashboard stand-in selects the user's profile. Runs only when both binaries are built
(minutes cold; `bash tools/identity/build.sh`) and a browser is installed, and skips otherwise.
"""

from __future__ import annotations

import http.client
import http.server
import json
import socket
import threading
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

from tests import ui_browser
from tools.cluster.kfp import identity

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
BINS = identity.built()
if BINS is None:
    pytest.skip("oauth2-proxy and the OIDC provider are not built: run tools/identity/build.sh",
                allow_module_level=True)  # fmt: skip
if ui_browser.skip_reason():
    pytest.skip(str(ui_browser.skip_reason()), allow_module_level=True)
ALICE, BOB = identity.TEST_USERS
# What the KFP UI's index.html does in KUBEFLOW mode (server/handlers/index-html.ts, KubeflowClient.tsx).
KFP_PAGE = b"""<!doctype html><html><body><p id="ns">none</p>
<script src="/dashboard_lib.bundle.js"></script>
<script>window.centraldashboard.CentralDashboardEventHandler.init(function (h) {
  h.onNamespaceSelected = function (ns) { document.getElementById("ns").textContent = ns; };
});</script></body></html>"""


class _Upstream(http.server.ThreadingHTTPServer):
    seen: list[tuple[str, list[str]]]  # (path, every kubeflow-userid value) per request


class _Echo(http.server.BaseHTTPRequestHandler):
    server: _Upstream

    def do_GET(self) -> None:
        ids = [v for k, v in self.headers.items() if k.lower().replace("_", "-") == identity.USERID_HEADER]
        self.server.seen.append((self.path, ids))
        page = self.path.startswith("/kfp")
        body = KFP_PAGE if page else json.dumps({"path": self.path, "userid": ids}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html" if page else "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def upstream() -> Iterator[_Upstream]:
    server = _Upstream(("127.0.0.1", 0), _Echo)
    server.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def front(upstream: _Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[identity.Front]:
    ports = identity.Ports(proxy=_free_port(), provider=_free_port())
    started = identity.start(tmp_path_factory.mktemp("identity"), upstream=f"http://127.0.0.1:{upstream.server_port}",
                             ports=ports, bins=BINS)  # fmt: skip
    try:
        yield started
    finally:
        identity.stop(started)


def _log_in(page: Any, front: identity.Front, user: identity.TestUser, path: str) -> None:
    """Open `path` on the front, sign in on the provider's form, and land back on `path`."""
    page.goto(f"{front.url}{path}")
    assert page.url.startswith(front.issuer), page.url  # the provider's login form, not the upstream
    page.locator("#username").fill(user.email)
    page.locator("#password").fill(user.password)
    page.get_by_role("button", name="Login").click()
    page.wait_for_url(f"{front.url}{path}")


def _fetch(page: Any, path: str, headers: dict[str, str]) -> dict[str, Any]:
    """A fetch of the page's own, with the session cookie and `headers`: what the upstream saw."""
    reply: dict[str, Any] = page.evaluate(
        "([path, headers]) => fetch(path, {headers}).then((r) => r.json())", [path, headers]
    )
    return reply


def test_without_a_session_the_upstream_is_not_reached(front: identity.Front, upstream: _Upstream) -> None:
    before = len(upstream.seen)
    netloc = urllib.parse.urlsplit(front.url).netloc
    for path in ("/", "/apis/v2beta1/runs", f"/{identity.DASHBOARD_LIB}"):
        conn = http.client.HTTPConnection(netloc, timeout=30)
        conn.request("GET", path, headers={identity.USERID_HEADER: ALICE.email})
        reply = conn.getresponse()
        reply.read()
        conn.close()
        assert reply.status == 302, (path, reply.status)
        assert (reply.getheader("Location") or "").startswith(f"{front.issuer}auth?client_id=web&"), path
    assert upstream.seen[before:] == []


def test_alice_signs_in_and_the_upstream_gets_her_email_whatever_she_sends(
    front: identity.Front, upstream: _Upstream
) -> None:
    before = len(upstream.seen)
    with ui_browser.page() as page:
        _log_in(page, front, ALICE, "/whoami")
        assert json.loads(page.locator("body").inner_text()) == {"path": "/whoami", "userid": [ALICE.email]}
        forged = {identity.USERID_HEADER: BOB.email}
        assert _fetch(page, "/apis/v2beta1/runs", forged)["userid"] == [ALICE.email]
        # oauth2-proxy also strips the `_` spelling, which some servers read as the same header.
        assert _fetch(page, "/apis/x", {"kubeflow_userid": BOB.email})["userid"] == [ALICE.email]
        assert page.request.get(f"{front.url}/oauth2/userinfo").json()["email"] == ALICE.email
        # The dashboard stand-in: served by oauth2-proxy itself, it selects her profile, or what `?ns=` asks for.
        script = page.request.get(f"{front.url}/{identity.DASHBOARD_LIB}")
        assert script.text() == identity.dashboard_lib_js()
        page.goto(f"{front.url}/kfp/")
        page.locator("#ns", has_text=identity.PROFILES[ALICE.email]).wait_for()
        page.goto(f"{front.url}/kfp/?ns={identity.PROFILES[BOB.email]}")
        page.locator("#ns", has_text=identity.PROFILES[BOB.email]).wait_for()
    assert [ids for _, ids in upstream.seen[before:]] == [[ALICE.email]] * (len(upstream.seen) - before)


def test_bob_signs_in_and_gets_his_own_identity_and_profile(front: identity.Front, upstream: _Upstream) -> None:
    with ui_browser.page() as page:
        _log_in(page, front, BOB, "/kfp/")
        page.locator("#ns", has_text=identity.PROFILES[BOB.email]).wait_for()
        assert _fetch(page, "/apis/v2beta1/runs", {identity.USERID_HEADER: ALICE.email})["userid"] == [BOB.email]


def test_a_wrong_password_stays_on_the_login_form(front: identity.Front, upstream: _Upstream) -> None:
    before = len(upstream.seen)
    with ui_browser.page() as page:
        page.goto(f"{front.url}/")
        page.locator("#username").fill(ALICE.email)
        page.locator("#password").fill(BOB.password)
        page.get_by_role("button", name="Login").click()
        page.get_by_text("username or password wrong").wait_for()
        assert page.url.startswith(front.issuer)
    assert upstream.seen[before:] == []
