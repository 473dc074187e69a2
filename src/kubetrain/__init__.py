"""kubetrain: distributed training jobs from Kubeflow Pipelines, on a cluster or on one machine."""

__version__ = "0.1.0"
