"""The real Kubeflow Pipelines backend in the e2e cluster."""
