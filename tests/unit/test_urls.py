"""kubetrain.urls: what a stored or printed URL keeps, and what it loses."""

from __future__ import annotations

import pytest

from kubetrain.urls import REDACTED, has_userinfo, redact_credentials, redact_text, redact_url, redact_values

PRESIGNED = (
    "https://bucket.s3.amazonaws.com/data/mnist.npz?X-Amz-Algorithm=AWS4-HMAC-SHA256"
    "&X-Amz-Credential=AKIAEXAMPLE%2F20261126%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20261126T000000Z"
    "&X-Amz-Expires=3600&X-Amz-Security-Token=FwoGZXIvYXdzEXAMPLETOKEN&X-Amz-SignedHeaders=host"
    "&X-Amz-Signature=0123456789abcdef0123456789abcdef"
)


def test_a_presigned_urls_signature_credential_and_token_are_redacted_and_the_rest_kept() -> None:
    shown = redact_url(PRESIGNED)
    for secret in ("AKIAEXAMPLE", "FwoGZXIvYXdzEXAMPLETOKEN", "0123456789abcdef0123456789abcdef"):
        assert secret not in shown
    assert shown.startswith("https://bucket.s3.amazonaws.com/data/mnist.npz?X-Amz-Algorithm=AWS4-HMAC-SHA256&")
    assert "X-Amz-Expires=3600" in shown and "X-Amz-Date=20261126T000000Z" in shown
    assert f"X-Amz-Signature={REDACTED}" in shown
    assert "X-Amz-SignedHeaders=host" in shown  # harmless parameters keep their values


@pytest.mark.parametrize(
    ("url", "secret"),
    [
        ("https://acct.blob.core.windows.net/c/x.npz?sv=2022-11-02&sig=AzureSig%3D", "AzureSig"),
        ("https://h/x.npz?token=tok123", "tok123"),
        ("https://h/x.npz?access_token=tok456&x=1", "tok456"),
        ("https://h/x.npz?key=apikey789", "apikey789"),
        ("https://h/x.npz?AWSAccessKeyId=AKIA1&Expires=1&Signature=sig2", "AKIA1"),
        ("https://h/x.npz?AWSAccessKeyId=AKIA1&Expires=1&Signature=sig2", "sig2"),
        ("https://alice:hunter2@h/x.npz", "hunter2"),
        ("https://ghp_tokenonly@h/x.npz", "ghp_tokenonly"),
        ("https://h/x.npz#access_token=frag1", "frag1"),
        # Secrets under names no list of secret names covers: every unknown value goes.
        ("https://h/x.npz?jwt=eyJplanted", "eyJplanted"),
        ("https://h/x.npz?code=oauthcode1", "oauthcode1"),
        ("https://h/x.npz?pass=pass1&user=me", "pass1"),
        ("https://h/x.npz?pw=pw1", "pw1"),
        ("https://h/x.npz?hmac=hmac1&expires=1", "hmac1"),
        ("https://cdn.example/x.npz?hdnts=exp%3D1~acl%3D%2F*~hmac%3Dakamai1", "akamai1"),
        ("https://h/x.npz?hash=hash1", "hash1"),
        ("https://h/x.npz?TOKENWITHOUTNAME", "TOKENWITHOUTNAME"),
        ("https://proxy/fetch?url=https%3A%2F%2Fb.s3.amazonaws.com%2Fx%3FX-Amz-Signature%3Dnested1", "nested1"),
    ],
)
def test_each_kind_of_secret_is_redacted(url: str, secret: str) -> None:
    assert secret not in redact_url(url)
    assert redact_url(url).startswith(url.split("://", maxsplit=1)[0] + "://")


def test_a_url_without_secrets_comes_back_unchanged() -> None:
    for url in (
        "https://h/x.npz",
        "https://h/x.npz?Expires=1&version=2",
        "https://acct.blob.core.windows.net/c/x.npz?sv=2022-11-02&se=2026-12-01&sp=r",
        "/data/run#1/x.npz?",
        "http://127.0.0.1:8080/#/runs/details/0a1b2c",  # the KFP UI's route, printed by submit
        "https://h/x.npz#sha256=" + "a" * 64,
        "/data/x.npz",
        "builtin:digits",
        "http://h/?",
    ):
        assert redact_url(url) == url


def test_userinfo_is_detected_and_urls_inside_text_are_redacted() -> None:
    assert has_userinfo("http://u:p@h/x") and not has_userinfo("http://h/x") and not has_userinfo("/a@b")
    text = f"{PRESIGNED}: HTTP 403 Forbidden (see 'http://u:pw@mirror/x.npz?sig=zz')"
    shown = redact_text(text)
    assert "0123456789abcdef" not in shown and "pw@" not in shown and "sig=zz" not in shown
    assert shown.endswith(": HTTP 403 Forbidden (see 'http://REDACTED@mirror/x.npz?sig=REDACTED')")


TOKEN = "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.eyJzdWIiOiJzeXN0ZW06c2EifQ.c2lnbmF0dXJlcGxhbnRlZA"


@pytest.mark.parametrize(
    ("body", "secret"),
    [
        (f"GET /apis HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer {TOKEN}\r\n", TOKEN),
        ("authorization: Bearer opaque-token-1234", "opaque-token-1234"),
        ("Proxy-Authorization: Basic YWxpY2U6aHVudGVyMg==", "YWxpY2U6aHVudGVyMg"),
        ('{"headers": {"Authorization": ["Bearer opaque-token-5678"]}}', "opaque-token-5678"),
        ("map[Accept:[*/*] Authorization:[Bearer opaque-token-9abc]]", "opaque-token-9abc"),
        ("{'authorization': 'Bearer opaque-token-def0'}", "opaque-token-def0"),
        ("users:\n- name: me\n  user:\n    token: kubeconfig-static-token\n", "kubeconfig-static-token"),
        ("client-key-data: LS0tLS1CRUdJTiBSU0Egplanted", "LS0tLS1CRUdJTiBSU0Egplanted"),
        ('{"password": "hunter2-planted", "user": "alice"}', "hunter2-planted"),
        ("x-api-key=apikey-planted&page=2", "apikey-planted"),
        ("Cookie: theme=dark; session=cookie-planted", "cookie-planted"),
        (f"the token {TOKEN} was refused", TOKEN),
        ("id AKIAIOSFODNN7EXAMPLE used", "AKIAIOSFODNN7EXAMPLE"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpkeyplanted\n-----END RSA PRIVATE KEY-----", "MIIEpkeyplanted"),
        ("-----BEGIN PRIVATE KEY-----\nMIIEcutshort", "MIIEcutshort"),
        ("upstream https://h/x?X-Amz-Signature=sigplanted failed", "sigplanted"),
    ],
)
def test_an_echoed_body_loses_every_known_credential_shape(body: str, secret: str) -> None:
    shown = redact_credentials(body)
    assert secret not in shown
    assert REDACTED in shown


@pytest.mark.parametrize(
    "body",
    [
        '{"code": 13, "message": "internal error: etcdserver: request timed out", "details": []}',
        # The API server's validation messages name field paths that look like credentials' names.
        'PyTorchJob.kubeflow.org "demo" is invalid: spec.pytorchReplicaSpecs.Master.template.spec.containers[0]'
        ".env[0].valueFrom.secretKeyRef.name: Required value",
        'spec.template.spec.automountServiceAccountToken: Invalid value: "yes": must be a boolean',
        "401 Unauthorized: Basic authentication required; a bearer token was expected",
        'secrets "ssh-key" is forbidden: User "system:serviceaccount:team-a:pipeline-runner" cannot get resource',
    ],
)
def test_an_echoed_body_keeps_what_says_what_went_wrong(body: str) -> None:
    assert redact_credentials(body) == body


def test_an_echoed_header_keeps_its_name_and_scheme() -> None:
    shown = redact_credentials("Authorization: Bearer abcdefgh12345678\nHost: api.example:6443")
    assert shown == f"Authorization: Bearer {REDACTED}\nHost: api.example:6443"


def test_a_url_is_redacted_as_written_even_when_malformed_or_taken_for_a_path() -> None:
    # pathlib and OSError print a URL given as a path with one slash: still a URL's secrets.
    assert redact_text("No such file: 'https:/h/m.yaml?sig=s1'") == f"No such file: 'https:/h/m.yaml?sig={REDACTED}'"
    assert redact_url("http://[::1/x.npz?sig=s2") == f"http://[::1/x.npz?sig={REDACTED}"  # urlsplit refuses it
    assert redact_url("https://u:s3@h/p@q?v=1") == f"https://{REDACTED}@h/p@q?v={REDACTED}"
    assert (
        redact_url("https://h/a%20b/?version=2#sha256=" + "0" * 64) == "https://h/a%20b/?version=2#sha256=" + "0" * 64
    )


def test_nested_run_arguments_are_redacted_and_other_values_kept() -> None:
    value = {"source": "https://h/x?sig=s4", "list": ["http://h/?k=s5", 3], "flag": True, "n": None}
    assert redact_values(value) == {
        "source": f"https://h/x?sig={REDACTED}",
        "list": [f"http://h/?k={REDACTED}", 3],
        "flag": True,
        "n": None,
    }
