"""kwok's pod and node stages for the e2e cluster, and the log kwok serves for every container.

Pod lifecycle (kwok Stages, built from the stage files in the pinned kwok module plus one of ours):
pods are Pending until scheduled, then Running, then Succeeded after `kubetrain.dev/sim-duration`
(a Go duration, default 2s). MPI workers (owned by the MPIJob) stay Running, as they do under
mpirun, until the operator deletes them. A pod labelled `pod-container-running-failed.stage.kwok.x-k8s.io:
"true"` fails instead, with the annotation `...stage.kwok.x-k8s.io/exit-code` (default 1) after
`...stage.kwok.x-k8s.io/delay` (default 1s); a pod with any `kubetrain.dev/sim` label is left
alone for a test to drive through the status subresource.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

FAILED_LABEL = "pod-container-running-failed.stage.kwok.x-k8s.io"
SIM_LABEL = "kubetrain.dev/sim"
SIM_DURATION = "kubetrain.dev/sim-duration"

# The kwok stage files used as they are (paths inside the kwok module), then ours.
KWOK_STAGES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
    "kustomize/stage/pod/chaos/pod-container-running-failed.yaml",
)


def stages_config(kwok_module: Path, log_file: Path, namespace: str) -> str:
    """kwokctl `--config`: kwok's node and pod stages, and a completion stage for every pod kind.

    kwok's own pod-complete stage only completes pods owned by a batch Job; PyTorchJob and JobSet
    pods need ours. Supplying stages replaces all of kwok's defaults, hence the node stages too.
    A ClusterLogs object makes kwok's kubelet endpoint serve `log_file` as the log of every
    container in `namespace`, so `pods/log` answers through the real API server.
    """
    docs = [(kwok_module / rel).read_text() for rel in KWOK_STAGES]
    complete: dict[str, Any] = yaml.safe_load((kwok_module / "kustomize/stage/pod/fast/pod-complete.yaml").read_text())
    complete["metadata"]["name"] = "kubetrain-pod-complete"
    complete["spec"]["selector"]["matchExpressions"] = [
        {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
        {"key": ".status.phase", "operator": "In", "values": ["Running"]},
        {"key": f'.metadata.labels["{SIM_LABEL}"]', "operator": "DoesNotExist"},
        {"key": f'.metadata.labels["{FAILED_LABEL}"]', "operator": "DoesNotExist"},
        # MPI workers run until the launcher's mpirun ends and the operator deletes them.
        {"key": ".metadata.ownerReferences.[].kind", "operator": "NotIn", "values": ["MPIJob"]},
    ]
    complete["spec"]["delay"] = {
        "durationMilliseconds": 2000,
        "durationFrom": {"expressionFrom": f'.metadata.annotations["{SIM_DURATION}"]'},
    }
    docs.append(yaml.safe_dump(complete))
    manual_free = []
    for doc in docs:
        stage: dict[str, Any] = yaml.safe_load(doc)
        name = stage["metadata"]["name"]
        if name in ("pod-ready", "pod-container-running-failed"):  # a `kubetrain.dev/sim` pod is the test's
            stage["spec"]["selector"]["matchExpressions"].append({"key": f'.metadata.labels["{SIM_LABEL}"]',
                                                                  "operator": "DoesNotExist"})  # fmt: skip
        manual_free.append(yaml.safe_dump(stage))
    # The CRI log format the kubelet reads (timestamp, stream, P/F tag, text), which kwok parses.
    log_file.write_text("2026-01-01T00:00:00.000000000Z stdout F kubetrain e2e: kwok serves this line as the log\n")
    logs = {
        "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "ClusterLogs", "metadata": {"name": "kubetrain-logs"},
        "spec": {"selector": {"matchNamespaces": [namespace]}, "logs": [{"logsFile": str(log_file), "follow": False}]},
    }  # fmt: skip
    manual_free.append(yaml.safe_dump(logs))
    return "---\n".join(manual_free)
