"""What the launcher components declare alike: their image, the TaskConfig passthroughs, the registry.

Imports only the standard library, kfp and kubetrain.images (itself standard library only), as
the components do: the Kubeflow hub's import guard, so importing a component stays light.
"""

from typing import Any

from kfp import dsl

from kubetrain.images import DEFAULT_REGISTRY, IMAGE_REGISTRY, LAUNCHER_IMAGE, REGISTRY_ENV

# Settings made on a training task go to the training pods, not to the launcher pod (KFP ≥ 2.15):
# resources (GPUs above all: the launcher must not reserve them), node selectors, tolerations and
# node affinity (kfp.kubernetes.add_node_affinity: the launcher need not run on the GPU nodes).
# Env and volumes are applied to the launcher pod as well: the launcher reads the workspace
# volume, and env such as proxies is wanted on both.
__all__ = ["LAUNCHER_IMAGE", "TRAINING_PASSTHROUGHS", "carry_registry"]

TRAINING_PASSTHROUGHS = [
    dsl.TaskConfigField.RESOURCES,
    dsl.TaskConfigField.KUBERNETES_NODE_SELECTOR,
    dsl.TaskConfigField.KUBERNETES_TOLERATIONS,
    dsl.TaskConfigField.KUBERNETES_AFFINITY,
    dsl.TaskConfigPassthrough(field=dsl.TaskConfigField.ENV, apply_to_task=True),
    dsl.TaskConfigPassthrough(field=dsl.TaskConfigField.KUBERNETES_VOLUMES, apply_to_task=True),
]


def carry_registry(component: Any) -> None:
    """Compiled for another registry (KUBETRAIN_REGISTRY), a training component takes it to its launcher pod.

    Its base image already names that registry; the launcher pod reads KUBETRAIN_REGISTRY from the
    container's env to pick the training images there too. Nothing is added for the default one.
    """
    if IMAGE_REGISTRY != DEFAULT_REGISTRY:
        container = component.component_spec.implementation.container
        container.env = {**(container.env or {}), REGISTRY_ENV: IMAGE_REGISTRY}
