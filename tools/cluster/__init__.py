"""The real cluster the e2e tier and the benchmarks run against, on one machine: `python -m tools.cluster`.

- controlplane.py: etcd, kube-apiserver, controller-manager, scheduler and kwok nodes (kwokctl's
  binary runtime), the upstream CRDs, the namespace and users;
- operators.py, webhooks.py, keepalive.py: the real operators as host processes;
- stages.py: kwok's pod stages;
- processes.py: every host process started with a record and a marker, found again and stopped
  whatever state is left, ports checked before anything binds.
"""
