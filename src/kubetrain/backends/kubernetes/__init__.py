"""The Kubernetes backend: the only package that talks to the Kubernetes API.

`backend` holds the Backend implementation; `config` finds the cluster and the namespace,
`objects` turns API objects into the launcher's records, `retry` retries transient failures,
`errors` maps HTTP statuses to kubetrain's errors, `watch` follows one job, and its pods, across
reconnects, `stream` frames watch and log streams, and `steps` reads what the reaper needs (jobs
that answer to a KFP step pod, and that pod's end).
"""

from kubetrain.backends.kubernetes.backend import KubernetesBackend
from kubetrain.backends.kubernetes.retry import RetryPolicy
from kubetrain.backends.kubernetes.steps import StepJob, StepJobs

__all__ = ["KubernetesBackend", "RetryPolicy", "StepJob", "StepJobs"]
