"""Multi-user Kubeflow Pipelines: two profiles, KFP's own authorization, kubetrain as `default-editor`.

The multi-user API server (tools/cluster/kfp/multiuser.py: `MULTIUSER=true`, a SubjectAccessReview
on every call) beside the standalone one, and two profiles, `alice` and `bob`, made as Kubeflow's
profile controller makes them (tools/cluster/kfp/profiles.py). Each scenario is what a user of a
shared cluster relies on:

- alice's runs of every shipped component (the demo pipeline that holds them all) and of her own
  pipeline succeed through `kfp.Client` with her token, their steps as `default-editor`, the jobs,
  pods and artifacts in her namespace; she runs `mnist_ps` in the UI too;
- bob cannot list, read, terminate or retry them (the API server's 403), by token or by header;
- bob's identity cannot create, patch or delete a job in alice's namespace (the kube-apiserver's
  RBAC), and bob's step that names alice's namespace is refused before anything is submitted.

The tokens are what KFP documents for programmatic access in a profile: the profile's
`default-editor` service account, audience `pipelines.kubeflow.org` (`kubectl create token`).
The header cases talk to the server's host port, where only the trusted front may (pods cannot).
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kfp
import pytest
from kfp_server_api.exceptions import ApiException  # type: ignore[import-untyped]
from playwright.sync_api import expect

from kubetrain.images import image_ref
from kubetrain.names import LABEL_RUN_ID
from tests import ui_browser
from tests.cluster import kfp_runs
from tests.cluster.concurrent import Scenarios, scenarios
from tests.cluster.kfp_pipelines import by_name_pipeline, check_shipped_run
from tests.cluster.kfp_runs import KfpBackend
from tests.cluster.kfp_ui import KfpUI
from tools.cluster import images, node_config
from tools.cluster.controlplane import STATE, Cluster, ControlPlaneError
from tools.cluster.kfp import backend, identity, multiuser, services_venv
from tools.cluster.node import paths as node_paths

pytestmark = pytest.mark.timeout(2400)
HOST = f"http://127.0.0.1:{multiuser.PORTS.http}"
ALICE, BOB = "alice", "bob"
OWNERS = {ALICE: "alice@example.com", BOB: "bob@example.com"}
# The shipped pipeline that holds every shipped component (its three trainings are the three
# single-framework pipelines' steps), at the UI scenarios' size (tests/cluster/test_kfp_ui.py, which
# runs each shipped pipeline on the backend). Each single-framework pipeline as alice added three runs
# and about 30 pods and showed nothing more about namespaces, accounts or artifacts (issue 44).
SHIPPED = {"compare_frameworks": {"pytorch_epochs": 6}}
DEFAULT_EDITOR = "default-editor"


def token(cluster: Cluster, profile: str) -> str:
    """A token of the profile's `default-editor`, audience pipelines.kubeflow.org (what KFP documents)."""
    return cluster.kubectl("create", "token", DEFAULT_EDITOR, "-n", profile, "--audience",
                           multiuser.TOKEN_AUDIENCE, "--duration", "2h").strip()  # fmt: skip


def client_of(cluster: Cluster, profile: str) -> kfp.Client:
    """kfp.Client on the multi-user server, as the profile's `default-editor`."""
    return kfp.Client(host=HOST, namespace=profile, existing_token=token(cluster, profile))


@pytest.fixture(scope="module")
def users(cluster: Cluster) -> dict[str, KfpBackend]:
    """alice and bob, each with a kfp.Client of their own, every kubetrain image pushed."""
    if not multiuser.running(STATE):
        pytest.fail("the multi-user KFP tier is not running (KUBETRAIN_KFP_MULTIUSER=0?)")
    built = images.ensure(["launcher", "pytorch", "chainermn", "ps"], STATE / "images.log",
                          node=node_paths(STATE, cluster.bin_dir))  # fmt: skip
    found = {}
    for profile in (ALICE, BOB):
        client = client_of(cluster, profile)
        client.create_experiment(kfp_runs.EXPERIMENT, namespace=profile)
        found[profile] = KfpBackend(cluster, client, built.seconds, profile=profile)
    return found


def _alices_runs(users: dict[str, KfpBackend], tmp_path: Path) -> dict[str, str]:
    """alice's runs of the shipped demo pipeline and her own, all succeeded; {pipeline: run id}."""
    alice = users[ALICE]
    packages = {name: kfp_runs.REPO_ROOT / "pipelines" / f"{name}.yaml" for name in SHIPPED}
    packages["own"] = by_name_pipeline(tmp_path, "own", """
        @dsl.pipeline(name="alices-own")
        def pipeline() -> None:
            data = claim(download_dataset(source="builtin:digits"))
            claim(pytorch_train(dataset=data.outputs["dataset"], workers=1, epochs=5))
    """)  # fmt: skip
    runs = {name: alice.start(package, SHIPPED.get(name, {}), f"alice-{name}-{uuid.uuid4().hex[:6]}")
            for name, package in packages.items()}  # fmt: skip
    for name, run_id in runs.items():
        run = alice.wait(run_id)
        assert str(run.state) == "SUCCEEDED", (name, run.state, alice.workflow_tail(run_id))
    return runs


def _bob_is_refused_alices_runs(users: dict[str, KfpBackend], alices: Scenarios) -> list[str]:
    """Every call bob makes on alice's runs is the API server's 403; what each said."""
    run_id = next(iter(_wait_alices(alices).values()))
    bob = users[BOB].client
    refused = []
    calls: dict[str, Callable[[], object]] = {
        "list": lambda: bob.list_runs(namespace=ALICE),
        "get": lambda: bob.get_run(run_id),
        "terminate": lambda: bob.terminate_run(run_id),
        "retry": lambda: bob._run_api.run_service_retry_run(run_id),  # kfp.Client has no retry_run
        "archive": lambda: bob.archive_run(run_id),
    }
    for verb, call in calls.items():
        with pytest.raises(ApiException) as denied:
            call()
        assert denied.value.status == 403, (verb, denied.value.status, denied.value.body)
        refused.append(f"{verb}: {json.loads(denied.value.body)['message'][:160]}")
    # As a person through the trusted front: bob's email in the header, no token.
    request = urllib.request.Request(f"{HOST}/apis/v2beta1/runs/{run_id}",
                                     headers={multiuser.USERID_HEADER: OWNERS[BOB]})  # fmt: skip
    with pytest.raises(urllib.error.HTTPError) as by_header:
        urllib.request.urlopen(request, timeout=30)
    assert by_header.value.code == 403
    # alice still sees her run, by token and by header.
    assert users[ALICE].client.get_run(run_id).run_id == run_id
    own = urllib.request.Request(request.full_url, headers={multiuser.USERID_HEADER: OWNERS[ALICE]})
    with urllib.request.urlopen(own, timeout=30) as reply:
        assert json.loads(reply.read())["run_id"] == run_id
    return refused


def _wait_alices(alices: Scenarios) -> dict[str, str]:
    found = alices.result("alice-runs")
    assert isinstance(found, dict)
    return found


def _bob_cannot_touch_jobs_in_alice(users: dict[str, KfpBackend], tmp_path: Path) -> str:
    """bob's identity gets the kube-apiserver's 403 on jobs in alice; bob's step naming alice is refused
    before submission, and nothing appears in alice."""
    cluster = users[BOB].cluster
    bob = f"system:serviceaccount:{BOB}:{DEFAULT_EDITOR}"
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "bobs", "namespace": ALICE},
           "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": {"containers": [
               {"name": "pytorch", "image": "busybox"}]}}}}}}  # fmt: skip
    attempts = {"create": (("create", "-f", "-"), json.dumps(job)),
                "patch": (("patch", "pytorchjob", "any", "--type=merge", "-p", "{}"), None),
                "delete": (("delete", "pytorchjob", "any"), None)}  # fmt: skip
    for verb, (args, stdin) in attempts.items():
        with pytest.raises(ControlPlaneError, match=r"(?i)forbidden"):
            cluster.kubectl("--as", bob, "-n", ALICE, *args, stdin=stdin)
        # kubectl patch reads the object first (refused too): ask the authorizer about the verb itself.
        with pytest.raises(ControlPlaneError):
            cluster.kubectl("--as", bob, "-n", ALICE, "auth", "can-i", verb, "pytorchjobs.kubeflow.org")
    assert (
        cluster.kubectl("--as", bob, "-n", BOB, "auth", "can-i", "create", "pytorchjobs.kubeflow.org").strip() == "yes"
    )
    package = by_name_pipeline(tmp_path, "bobs_cross", f"""
        @dsl.pipeline(name="bobs-cross-namespace")
        def pipeline() -> None:
            data = claim(download_dataset(source="builtin:digits"))
            claim(pytorch_train(dataset=data.outputs["dataset"], workers=0, epochs=1, namespace="{ALICE}"))
    """)  # fmt: skip
    bobs = users[BOB]
    run_id = bobs.start(package, {}, f"bob-cross-{uuid.uuid4().hex[:6]}")
    run = bobs.wait(run_id)
    assert str(run.state) == "FAILED", run.state
    printed = "\n".join(bobs.step_logs(run_id, "pytorch_train"))
    assert "may not create pytorchjobs.kubeflow.org there" in printed and "nothing was submitted" in printed, printed[
        -3000:
    ]
    assert not cluster.kubectl("-n", ALICE, "get", "pytorchjobs", "-l", f"{LABEL_RUN_ID}={run_id}", "-o", "name")
    return next(line for line in printed.splitlines() if "may not create" in line)


# Run in a pod of bob's namespace as bob's default-editor, with the token KFP documents for pods
# (projected, audience pipelines.kubeflow.org): each call's HTTP status, or what stopped it.
IN_POD = """
import json, socket, sys, urllib.error, urllib.request
api, direct, token_path = sys.argv[1:4]
def call(path, headers):
    try:
        with urllib.request.urlopen(urllib.request.Request(api + path, headers=headers), timeout=20) as reply:
            return reply.status
    except urllib.error.HTTPError as e:
        return e.code
token = open(token_path).read().strip()
forged = {"kubeflow-userid": "alice@example.com"}
out = {
    "forged_header": call("/apis/v2beta1/runs?namespace=alice", forged),
    "forged_header_and_own_token": call("/apis/v2beta1/runs?namespace=alice", {**forged, "Authorization": "Bearer " + token}),
    "own_token_own_namespace": call("/apis/v2beta1/runs?namespace=bob", {"Authorization": "Bearer " + token}),
}
host, port = direct.rsplit(":", 1)
try:
    socket.create_connection((host, int(port)), timeout=5).close()
    out["direct_to_server"] = "connected"
except OSError as e:
    out["direct_to_server"] = type(e).__name__
print(json.dumps(out))
"""


def _a_pod_cannot_forge_the_user_header(users: dict[str, KfpBackend]) -> dict[str, object]:
    """A pod sending alice's email as `kubeflow-userid` is no one (the pod-facing proxy deletes the
    header); with its own token it is bob's default-editor and denied alice's runs; the server's own
    port is unreachable from pods (dropped)."""
    cluster = users[BOB].cluster
    name = f"forger-{uuid.uuid4().hex[:6]}"
    token = {"serviceAccountToken": {"path": "token", "audience": multiuser.TOKEN_AUDIENCE, "expirationSeconds": 3600}}
    restricted = {"allowPrivilegeEscalation": False, "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]},
                  "seccompProfile": {"type": "RuntimeDefault"}}  # fmt: skip
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": BOB},
           "spec": {"serviceAccountName": DEFAULT_EDITOR, "automountServiceAccountToken": False, "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": image_ref("launcher"), "imagePullPolicy": "IfNotPresent",
                                    "command": ["python", "-c", IN_POD, f"http://{multiuser.PORTS.service}.kubeflow:8888",
                                                f"{node_config.GATEWAY}:{multiuser.PORTS.http}", "/var/run/secrets/kfp/token"],
                                    "securityContext": restricted,
                                    "volumeMounts": [{"name": "kfp", "mountPath": "/var/run/secrets/kfp"}]}],
                    "volumes": [{"name": "kfp", "projected": {"sources": [token]}}]}}  # fmt: skip
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(pod))
    try:
        cluster.kubectl("-n", BOB, "wait", f"pod/{name}", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=300s")
        found: dict[str, object] = json.loads(cluster.kubectl("-n", BOB, "logs", name).strip().splitlines()[-1])
    finally:
        cluster.kubectl("-n", BOB, "delete", "pod", name, "--wait=false")
    # No identity: KFP answers 401 (Unauthenticated) when neither a header nor a token names the caller.
    assert found["forged_header"] == 401, found
    assert found["forged_header_and_own_token"] == 403 and found["own_token_own_namespace"] == 200, found
    assert found["direct_to_server"] in {"TimeoutError", "timeout"}, found
    return found


def _bobs_job_over_quota(users: dict[str, KfpBackend], tmp_path: Path) -> tuple[str, str]:
    """A training step whose pods ask for more than bob's whole quota fails at once, naming the quota,
    the request and what is left: not at its start timeout (600 s)."""
    bobs = users[BOB]
    cpu = int(multiuser.BOB_QUOTA["requests.cpu"]) * 2
    package = by_name_pipeline(tmp_path, "bobs_too_big", f"""
        @dsl.pipeline(name="bobs-too-big")
        def pipeline() -> None:
            data = claim(download_dataset(source="builtin:digits"))
            claim(pytorch_train(dataset=data.outputs["dataset"], workers=1, epochs=1)).set_cpu_request("{cpu}")
    """)  # fmt: skip
    run_id = bobs.start(package, {}, f"bob-quota-{uuid.uuid4().hex[:6]}")
    run = bobs.wait(run_id)
    assert str(run.state) == "FAILED", run.state
    printed = "\n".join(bobs.step_logs(run_id, "pytorch_train"))
    line = rf"pods refused by ResourceQuota kf-resource-quota in {BOB}: requested requests.cpu={cpu}, used \S+ of 4\."
    assert re.search(line, printed), printed[-3000:]
    # The first timestamped line that shows the refusal (the pod's event, or the job's end).
    refused = re.search(r"^(\d\d:\d\d:\d\d)\.\d+ .*(?:exceeded quota|PodsRefused|refused by ResourceQuota)",
                        printed, re.M)  # fmt: skip
    submitted = re.search(r"^(\d\d:\d\d:\d\d)\.\d+ PyTorchJob \S+ submitted", printed, re.M)
    assert refused and submitted, printed[-3000:]
    seconds = (_clock(refused[1]) - _clock(submitted[1])) % 86400
    assert seconds < 300, f"refused {seconds} s after submission: the start timeout, not the quota, ended it"
    return run_id, f"{seconds} s after submission: {re.search(line, printed)[0]}"  # type: ignore[index]


def _clock(text: str) -> int:
    hours, minutes, seconds = (int(part) for part in text.split(":"))
    return hours * 3600 + minutes * 60 + seconds


def _alice_in_the_ui(users: dict[str, KfpBackend], others: Scenarios, tmp_path: Path) -> str:
    """alice, in Chromium through the identity front (her login on the OIDC form): upload a pipeline,
    run it in her experiment, read its Logs tab and HTML report; bob's namespace is refused to her
    page, and a `kubeflow-userid` her page sends itself changes nothing."""
    front = multiuser.front_url(STATE)
    assert front is not None, "the multi-user tier runs without its UI (KUBETRAIN_KFP_UI=0?)"
    user = next(u for u in identity.TEST_USERS if u.email == OWNERS[ALICE])
    alice = users[ALICE]
    experiment = alice.client.get_experiment(experiment_name=kfp_runs.EXPERIMENT, namespace=ALICE).experiment_id
    ui_log = STATE / "kfp" / f"{multiuser.UI_PROCESS}.log"
    ui_log_start = ui_log.stat().st_size  # what the UI server says from here on
    with ui_browser.page() as opened:
        opened.goto(f"{front}/")
        assert opened.url.startswith(identity.issuer(identity.Ports())), opened.url  # the login form
        opened.locator("#username").fill(user.email)
        opened.locator("#password").fill(user.password)
        opened.get_by_role("button", name="Login").click()
        opened.wait_for_url(re.compile(re.escape(front) + r"/.*"))
        page = KfpUI(opened, front)
        page.upload(kfp_runs.REPO_ROOT / "pipelines" / "mnist_ps.yaml", f"alice-ui-{uuid.uuid4().hex[:6]}")
        run_id = page.start_run({"epochs": "12"}, experiment_id=experiment)
        assert page.wait_state(run_id) == "SUCCEEDED", alice.workflow_tail(run_id)
        assert alice.kubectl("get", "workflows", "-l", f"pipeline/runid={run_id}", "-o", "name"), (
            "not in alice's namespace"
        )
        page.open_run(run_id)
        page.expect_status("Succeeded")
        ui_browser.screenshot(opened, "multi-user-alice-run", tmp_path)
        try:
            logs = page.logs("ps-train")
        except AssertionError:  # the graph's states never came in on a loaded 2-core machine: load it again
            page.open_run(run_id)
            logs = page.logs("ps-train")
        assert re.search(rf"JobSet {ALICE}/\S+ submitted", logs) and "Succeeded" in logs, logs[-3000:]
        page.html_visualization("ps-train")
        ui_browser.screenshot(opened, "multi-user-alice-html-report", tmp_path)
        # Her page's own fetch, with bob's email in the header: the front sets hers, the server refuses.
        status = opened.evaluate(
            "([path, header]) => fetch(path, {headers: header}).then((r) => r.status)",
            ["/apis/v2beta1/runs?namespace=bob", {multiuser.USERID_HEADER: OWNERS[BOB]}],
        )
        assert status == 403, status
        # One of bob's artifacts, asked for through her session: the UI server checks in ML Metadata
        # whose it is (upstream's IDOR check) and that she may read the namespace she names.
        quota_case = others.result("bob-quota")
        assert isinstance(quota_case, tuple)
        bobs_run = str(quota_case[0])
        bobs = next(a for a in users[BOB].artifacts(bobs_run) if a.uri.startswith("minio://mlpipeline/private-"))
        key = bobs.uri.removeprefix("minio://mlpipeline/")
        for namespace in (ALICE, BOB):
            got = opened.evaluate("(path) => fetch(path).then((r) => r.status)",
                                  f"/artifacts/get?source=minio&bucket=mlpipeline&key={key}&namespace={namespace}")  # fmt: skip
            assert got == 403, (namespace, got, key)
        with ui_log.open("rb") as said:
            said.seek(ui_log_start)
            assert b"MLMD proto bundle could not be loaded" not in said.read(), "the UI's artifact check failed open"
        opened.goto(f"{front}/?ns={BOB}#/runs")
        expect(opened.get_by_text("Error: failed to fetch runs")).to_be_visible(timeout=60_000)
        ui_browser.screenshot(opened, "multi-user-alice-denied-bob", tmp_path)
    return run_id


@pytest.fixture(scope="module")
def started(users: dict[str, KfpBackend], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenarios]:
    """alice's runs first (the longest), then the isolation cases side by side."""
    with scenarios() as running:
        running.start("alice-runs", functools.partial(_alices_runs, users, tmp_path_factory.mktemp("alice")))
        running.start("alice-ui", functools.partial(_alice_in_the_ui, users, running, tmp_path_factory.mktemp("ui")))
        running.start("bob-jobs", functools.partial(_bob_cannot_touch_jobs_in_alice, users,
                                                    tmp_path_factory.mktemp("bob")))  # fmt: skip
        running.start("bob-quota", functools.partial(_bobs_job_over_quota, users, tmp_path_factory.mktemp("quota")))
        running.start("pod-forges-header", functools.partial(_a_pod_cannot_forge_the_user_header, users))
        running.start("bob-runs", functools.partial(_bob_is_refused_alices_runs, users, running))
        running.start("bob-artifacts", functools.partial(_bob_cannot_read_alices_artifacts, users, running))
        yield running


def test_alices_runs_of_every_shipped_component_and_her_own_succeed_as_default_editor_in_her_namespace(
    started: Scenarios, users: dict[str, KfpBackend]
) -> None:
    runs = _wait_alices(started)
    alice = users[ALICE]
    for name, run_id in runs.items():
        if name in SHIPPED:
            check_shipped_run(alice, name, run_id)
        pods: list[dict[str, Any]] = json.loads(alice.kubectl("get", "pods", "-l", f"pipeline/runid={run_id}",
                                                              "-o", "json"))["items"]  # fmt: skip
        assert pods and {p["spec"]["serviceAccountName"] for p in pods} == {DEFAULT_EDITOR}, name
        # Each training step names its job (deleted on success since): alice's namespace, always.
        printed = "\n".join(
            log for f in ("pytorch_train", "chainermn_train", "ps_train") for log in alice.step_logs(run_id, f)
        )
        jobs = re.findall(r"(?:PyTorchJob|MPIJob|JobSet|TrainJob) (\S+)/\S+ submitted", printed)
        assert jobs and set(jobs) == {ALICE}, (name, jobs, printed[-2000:])
        for artifact in alice.artifacts(run_id):
            assert artifact.uri.startswith(f"minio://mlpipeline/private-artifacts/{ALICE}/"), (name, artifact.uri)


# In the KFP services venv (boto3): GET one object with each profile's keys; what each got.
S3_GET = """
import json, os, sys
import boto3
from botocore.config import Config
from botocore.exceptions import ClientError
key = sys.argv[1]
out = {}
for who in ("ALICE", "BOB"):
    s3 = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT"], region_name="us-east-1",
                      aws_access_key_id=os.environ[who + "_ACCESS_KEY"], aws_secret_access_key=os.environ[who + "_SECRET_KEY"],
                      config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
    try:
        out[who] = len(s3.get_object(Bucket="mlpipeline", Key=key)["Body"].read())
    except ClientError as e:
        out[who] = e.response["Error"]["Code"]
print(json.dumps(out))
"""


def _bob_cannot_read_alices_artifacts(users: dict[str, KfpBackend], alices: Scenarios) -> dict[str, object]:
    """An artifact of alice's run: her keys read it, bob's get AccessDenied (the policy KFP's hook set)."""
    alice = users[ALICE]
    run_id = _wait_alices(alices)["compare_frameworks"]
    model = next(a for a in alice.artifacts(run_id) if a.type == "system.Model")
    key = model.uri.removeprefix("minio://mlpipeline/") + "/metrics.json"
    keys = {who.upper(): users[who].store_keys() for who in (ALICE, BOB)}
    env = {**services_venv.environment(), "S3_ENDPOINT": f"http://{node_config.GATEWAY}:{backend.S3_PORT}"}
    for who, (access_key, secret_key) in keys.items():
        env[f"{who}_ACCESS_KEY"], env[f"{who}_SECRET_KEY"] = access_key, secret_key
    done = subprocess.run([str(services_venv.python(services_venv.ensure())), "-c", S3_GET, key], env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    got: dict[str, object] = json.loads(done.stdout)
    assert keys["ALICE"] != keys["BOB"] and isinstance(got["ALICE"], int) and got["ALICE"] > 0, got
    assert got["BOB"] == "AccessDenied", got
    return got


def test_bob_cannot_list_read_terminate_or_retry_alices_runs(started: Scenarios) -> None:
    refused = started.result("bob-runs")
    assert isinstance(refused, list)
    print("\n".join(refused))


def test_bob_cannot_create_patch_or_delete_jobs_in_alices_namespace_and_his_step_naming_it_is_refused(
    started: Scenarios,
) -> None:
    print(started.result("bob-jobs"))


def test_a_pod_cannot_forge_the_user_header_nor_reach_the_server_past_its_proxy(started: Scenarios) -> None:
    print(started.result("pod-forges-header"))


def test_bobs_keys_cannot_read_alices_artifacts(started: Scenarios) -> None:
    print(started.result("bob-artifacts"))


def test_a_job_over_bobs_quota_fails_its_step_within_seconds_naming_the_quota(started: Scenarios) -> None:
    print(started.result("bob-quota"))


def test_alice_uploads_and_runs_a_pipeline_in_the_ui_through_her_login_and_cannot_open_bobs_namespace(
    started: Scenarios,
) -> None:
    print(started.result("alice-ui"))
