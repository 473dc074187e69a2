"""`kubetrain submit`: upload a pipeline (or a new version of it) to Kubeflow Pipelines and start a run.

Talks to the KFP API through `kfp.Client`, after one health check of its own (:func:`preflight`)
that turns an unreachable or wrong host into one line naming the host and the cause. A shipped
pipeline or a user's `.py` is compiled afresh, so what runs is the pipeline as the code defines
it; a user's compiled `.yaml` is uploaded as it is. A pipeline is found by its display name: the
first submit uploads it, later ones add a version, and the run uses exactly the version just
uploaded. Authentication: a bearer token (`token`), a token file re-read on every request
(`token_file`, e.g. a projected service-account token, as kfp's
ServiceAccountTokenVolumeCredentials does), or whatever `kfp.Client` does by default (IAP client
ids from the KF_PIPELINES_* variables, a GCP token for a `*.googleusercontent.com` host, the kube
config, or no authentication for a port-forward).
"""

from __future__ import annotations

import datetime
import os
import re
import socket
import ssl
import tempfile
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from kubetrain import __version__
from kubetrain.errors import BackendError, InvalidInputError
from kubetrain.tooling.run_wait import RunEnd, wait_for_run
from kubetrain.tooling.sources import LoadedPipeline
from kubetrain.urls import has_userinfo, redact_credentials, redact_url

ClientFactory = Callable[..., Any]
TOKEN_ENV = "KUBETRAIN_KFP_TOKEN"
# Where a user who cannot reach the API finds which URL to give and how (port-forward, ingress, pod).
REACHING_DOC = "docs/cluster.md#reaching-the-kfp-api"


def clean_token(value: str, source: str) -> str:
    """`value` without surrounding whitespace (a Secret's or `echo`'s trailing newline); one line of text.

    A line break or another control character inside would be sent as a broken `Authorization`
    header (http.client refuses it with the whole header in the message), so it is refused here in
    words that never include the token. `source` names where the token came from.
    """
    token = value.strip()
    if not token:
        raise InvalidInputError(f"{source}: the token is empty; expected a bearer token")
    if any(ord(c) < 0x21 or ord(c) > 0x7E for c in token):
        breaks = any(c in "\r\n" for c in token)
        what = "a line break inside it" if breaks else "a space, control or non-ASCII character inside it"
        raise InvalidInputError(
            f"{source}: the token has {what} (not shown); expected one line of printable ASCII, "
            "as a Kubernetes or OIDC token is"
        )
    return token


def read_token_file(path: str) -> str:
    """The bearer token in the file at `path` (checked as :func:`clean_token` checks it)."""
    where = f"--token-file {path}"
    file = Path(path)
    if file.is_dir():
        raise InvalidInputError(f"{where}: is a directory; expected a file holding a bearer token")
    if not file.exists():
        raise InvalidInputError(f"{where}: does not exist; expected a file holding a bearer token")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InvalidInputError(f"{where}: is not text (byte {e.start} is not UTF-8); expected a bearer token") from e
    except OSError as e:
        raise InvalidInputError(f"{where}: cannot be read ({e.strerror}); expected a readable token file") from e
    if not text.strip():
        raise InvalidInputError(f"{where}: is empty; expected a file holding a bearer token")
    return clean_token(text, where)


@dataclass(frozen=True, kw_only=True)
class SubmitRequest:
    """What to submit where."""

    pipeline: LoadedPipeline
    host: str
    experiment: str
    params: Mapping[str, Any]
    token: str | None = None
    token_file: str | None = None
    namespace: str | None = None
    run_name: str | None = None
    version_name: str | None = None
    ca_cert: str | None = None  # a CA bundle that signed the host's TLS certificate

    def __post_init__(self) -> None:
        if not self.host.startswith(("http://", "https://")):
            raise InvalidInputError(
                f"--host: got {redact_url(self.host)!r}; expected the KFP API URL, http(s)://HOST[:PORT]"
            )
        if has_userinfo(self.host):
            raise InvalidInputError(
                f"--host: got {redact_url(self.host)!r}: credentials in the URL are not sent; drop USER:PASSWORD@ "
                f"and pass a bearer token with --token-file PATH or ${TOKEN_ENV}"
            )
        if self.token is not None:
            object.__setattr__(self, "token", clean_token(self.token, f"--token (or ${TOKEN_ENV})"))
        if not self.experiment.strip():
            raise InvalidInputError("--experiment: got an empty name")
        if self.token and self.token_file:
            raise InvalidInputError("--token and --token-file: give one of them")
        if self.ca_cert is not None:
            check_ca_cert(self.ca_cert)


def check_ca_cert(path: str) -> None:
    """`path` is a file of PEM CA certificates that ssl can load (so kfp.Client fails on none later)."""
    file = Path(path)
    if not file.is_file():
        what = "is a directory" if file.is_dir() else "does not exist"
        raise InvalidInputError(f"--ca-cert: {path} {what}; expected a PEM file of CA certificates")
    try:
        ssl.create_default_context(cafile=path)
    except ssl.SSLError as e:
        raise InvalidInputError(
            f"--ca-cert: {path} holds no certificate ssl can load ({e.reason or e}); "
            "expected PEM CA certificates (-----BEGIN CERTIFICATE-----)"
        ) from e
    except OSError as e:
        raise InvalidInputError(f"--ca-cert: {path} cannot be read ({e.strerror})") from e


@dataclass(frozen=True, kw_only=True)
class SubmitResult:
    """Where the run is."""

    pipeline_name: str
    pipeline_id: str
    version_id: str
    uploaded: str  # "pipeline" (first upload) or "version"
    experiment_id: str
    run_id: str
    run_url: str

    def to_json(self) -> dict[str, str]:
        """A JSON-ready dict."""
        return dict(self.__dict__)


def _reason(error: BaseException) -> str:
    """The cause of a failed connection, in words, from urllib's error or its reason."""
    reason = getattr(error, "reason", error)
    if isinstance(reason, ssl.SSLCertVerificationError):
        return f"its TLS certificate is not trusted ({reason.verify_message}); pass --ca-cert PATH"
    if isinstance(reason, ssl.SSLError):
        return f"the TLS handshake failed ({reason.reason or reason})"
    if isinstance(reason, socket.gaierror):
        return f"the host name does not resolve ({reason.strerror})"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused (nothing listens there; is the port-forward running?)"
    if isinstance(reason, TimeoutError):
        return "no answer in time"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror
    return str(reason)


# kfp.Client's own test (Client._is_inverse_proxy_host) for a Google-hosted Kubeflow Pipelines
# behind the inverse proxy, for which it fetches a GCP access token by itself.
_INVERSE_PROXY_HOST = re.compile(r"\S+.googleusercontent.com/{0,1}$")


def fetches_own_token(host: str) -> bool:
    """Whether kfp.Client, given no token, gets one of its own for `host` (so a 401/403 without it means nothing).

    It does with an IAP OAuth client id (KF_PIPELINES_IAP_OAUTH2_CLIENT_ID), and for a host behind
    Google's inverse proxy (`*.googleusercontent.com`).
    """
    return bool(os.environ.get("KF_PIPELINES_IAP_OAUTH2_CLIENT_ID")) or bool(
        _INVERSE_PROXY_HOST.match(host.rstrip("/"))
    )


def preflight(host: str, token: str | None, *, ca_cert: str | None = None, timeout: float = 10.0) -> None:
    """One healthz request, so an unreachable host, a wrong URL or refused credentials fail at once, in one line.

    kfp.Client itself retries healthz five times, five seconds apart, logging each failure with its
    traceback, and then reports a timeout whatever the cause was.
    """
    url = f"{host.rstrip('/')}/apis/v2beta1/healthz"
    shown = redact_url(host)
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    context = ssl.create_default_context(cafile=ca_cert) if host.startswith("https://") else None
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            response.read()
    except urllib.error.HTTPError as e:
        if e.code in (401, 403) and not token and fetches_own_token(host):
            return  # kfp.Client gets a token of its own for this host; it reports a refusal itself
        if e.code == 404:
            raise BackendError(
                f"{shown}: no KFP API there (HTTP 404 for {redact_url(url)}); expected the API endpoint, "
                f"e.g. a port-forward to svc/ml-pipeline-ui or svc/ml-pipeline ({REACHING_DOC})"
            ) from e
        raise _translate(e, host) from e
    except (urllib.error.URLError, OSError) as e:
        raise BackendError(f"{shown}: cannot reach the KFP API: {_reason(e)}; see {REACHING_DOC}") from e


def _client(request: SubmitRequest, factory: ClientFactory | None) -> Any:
    import kfp

    kwargs: dict[str, Any] = {"host": request.host.rstrip("/")}
    if request.ca_cert:
        kwargs["ssl_ca_cert"] = request.ca_cert
    token = request.token
    if request.token:
        kwargs["existing_token"] = request.token
    elif request.token_file:
        from kfp.client import ServiceAccountTokenVolumeCredentials

        token = read_token_file(request.token_file)  # checked here; kfp re-reads the file on each request
        kwargs["credentials"] = ServiceAccountTokenVolumeCredentials(path=request.token_file)
    preflight(request.host, token, ca_cert=request.ca_cert)
    with warnings.catch_warnings():
        # kfp.Client warns on every construction that it needs KFP ≥ 2.0.0-beta.2; that is known.
        warnings.filterwarnings(
            "ignore", message="This client only works with Kubeflow Pipeline", category=FutureWarning
        )
        try:
            return (factory or kfp.Client)(**kwargs)
        except TimeoutError as e:
            # kfp.Client's healthz retries gave up (the host went away since the preflight, or
            # credentials of kfp's own were refused).
            raise BackendError(
                f"{redact_url(request.host)}: the KFP API did not answer its health check ({e}); see {REACHING_DOC}"
            ) from e
        except _api_errors() as e:
            raise _translate(e, request.host) from e


def _api_errors() -> tuple[type[BaseException], ...]:
    """What kfp.Client raises when the API answers with an error or cannot be reached."""
    from kfp_server_api.exceptions import ApiException  # type: ignore[import-untyped]
    from urllib3.exceptions import HTTPError

    return (cast(type[BaseException], ApiException), HTTPError)


def _latest_version_id(client: Any, pipeline_id: str) -> str:
    response = client.list_pipeline_versions(pipeline_id=pipeline_id, sort_by="created_at desc", page_size=1)
    versions = response.pipeline_versions or []
    if not versions:
        raise BackendError(f"pipeline {pipeline_id} was uploaded but the API lists no version of it")
    return str(versions[0].pipeline_version_id)


def _translate(error: BaseException, host: str) -> Exception:
    status = getattr(error, "status", None) or getattr(error, "code", None)
    if status in (401, 403):
        # Exit 4 like every other answer of the endpoint that stops a submission (the and
        # --help's contract): the host refused us; 2 stays for input kubetrain itself refuses.
        return BackendError(
            f"{redact_url(host)}: the KFP API refused the credentials (HTTP {status}); pass --token or --token-file, "
            f"or set up kfp.Client's default credentials ({REACHING_DOC})"
        )
    body = getattr(error, "body", None) or getattr(error, "reason", None) or str(error)
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    # One line: an API error's body is JSON, a proxy's an HTML page, and either may echo the
    # request's headers (the bearer token): redacted before it is cut, so no cut hides a shape.
    text = " ".join(redact_credentials(str(body)).split())[:300]
    return BackendError(f"{redact_url(host)}: KFP API call failed ({f'HTTP {status}: ' if status else ''}{text})")


def submit(request: SubmitRequest, *, client_factory: ClientFactory | None = None) -> SubmitResult:
    """Upload (or version) the pipeline, ensure the experiment, start the run; returns its URL."""
    pipeline = request.pipeline.pipeline
    name = str(pipeline.name)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    client = _client(request, client_factory)  # first: a wrong host fails before any compiling
    text = request.pipeline.compile_text()
    errors = _api_errors()
    with tempfile.TemporaryDirectory(prefix="kubetrain-submit-") as tmp:
        package = Path(tmp) / f"{request.pipeline.name}.yaml"
        package.write_text(text, encoding="utf-8")
        try:
            pipeline_id = client.get_pipeline_id(name)
            if pipeline_id is None:
                uploaded = client.upload_pipeline(
                    str(package), pipeline_name=name, description=pipeline.description or None
                )
                pipeline_id = str(uploaded.pipeline_id)
                version_id = _latest_version_id(client, pipeline_id)
                what = "pipeline"
            else:
                version = client.upload_pipeline_version(
                    str(package),
                    pipeline_version_name=request.version_name or f"{name}-{__version__}-{stamp}",
                    pipeline_id=pipeline_id,
                )
                version_id = str(version.pipeline_version_id)
                what = "version"
            experiment = client.create_experiment(name=request.experiment, namespace=request.namespace)
            run = client.run_pipeline(
                experiment_id=experiment.experiment_id,
                job_name=request.run_name or f"{name} {stamp}",
                params=dict(request.params),
                pipeline_id=pipeline_id,
                version_id=version_id,
            )
        except errors as e:
            raise _translate(e, request.host) from e
        except ValueError as e:
            # kfp.Client's own checks (several pipelines or experiments with the same name, ...).
            raise InvalidInputError(f"{redact_url(request.host)}: {e}") from e
    return SubmitResult(
        pipeline_name=name,
        pipeline_id=pipeline_id,
        version_id=version_id,
        uploaded=what,
        experiment_id=str(experiment.experiment_id),
        run_id=str(run.run_id),
        run_url=f"{redact_url(request.host).rstrip('/')}/#/runs/details/{run.run_id}",
    )


def follow_run(
    request: SubmitRequest,
    run_id: str,
    *,
    timeout_seconds: float,
    poll_seconds: float = 5.0,
    on_state: Callable[[str], None] = lambda state: None,
    client_factory: ClientFactory | None = None,
) -> RunEnd:
    """`submit --wait`: the run's end, read from the same host with the same credentials."""
    client = _client(request, client_factory)
    try:
        return wait_for_run(
            client, run_id, timeout_seconds=timeout_seconds, poll_seconds=poll_seconds, on_state=on_state
        )
    except _api_errors() as e:
        raise _translate(e, request.host) from e
