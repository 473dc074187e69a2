"""A local pod's volumes never reach outside themselves, whatever links the file system holds.

The manifest's names and paths are checked at submission (`test_local_validate.py`); what only the
file system can tell is checked when the container is translated, as the kubelet does when it
mounts: these tests translate a pod (no process starts) and look at what was created where.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from kubetrain.backends.local.podspec import ContainerTranslator, PodContext, PodPlan, PodStartError, main_container


def _translator(
    root: Path, volumes: list[dict[str, Any]], mounts: list[dict[str, Any]], **ctx: Any
) -> ContainerTranslator:
    # The program finds each mount through $MOUNT<i>, rewritten to the local directory as a literal env value.
    env = [{"name": f"MOUNT{i}", "value": m["mountPath"]} for i, m in enumerate(mounts)]
    container = {"name": "pytorch", "image": "img", "command": [sys.executable], "env": env, "volumeMounts": mounts}
    template = {"spec": {"containers": [container], "volumes": volumes}}
    plan = PodPlan(
        name="j-master-0",
        hostname="j-master-0",
        replica_type="Master",
        index=0,
        address="127.0.0.2",
        prefix="master-0",
        uid="uid",
        template=template,
        labels={},
        annotations={},
        container_name="pytorch",
        image="img",
    )
    context = PodContext(
        kind="PyTorchJob",
        job_name="j",
        namespace="default",
        job_dir=root / "jobs" / "j",
        claims_dir=root / "claims",
        hosts={},
        secrets={},
        config_maps=ctx.pop("config_maps", {}),
        base_env={"PATH": os.environ.get("PATH", "")},
        cwd=root,
        sink=None,
        max_grace_seconds=1.0,
        probe_period_seconds=1.0,
        event=lambda *_: None,
        wake=lambda: None,
    )
    return ContainerTranslator(plan, context, main_container(template, "pytorch"), context.job_dir / "pods" / plan.name)


CLAIM = [{"name": "work", "persistentVolumeClaim": {"claimName": "work"}}]


def _mounted(translator: ContainerTranslator) -> list[Path]:
    """Start (translate) the container; where each of its mounts is on this machine."""
    _, env, _ = translator.launch()
    return [Path(value) for key, value in sorted(env.items()) if key.startswith("MOUNT")]


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A user's directory beside the local root, which no pod may write into."""
    path = tmp_path / "users-files"
    path.mkdir()
    return path


def test_a_subpath_through_a_link_out_of_the_claim_is_refused_as_the_kubelet_does(
    tmp_path: Path, outside: Path
) -> None:
    root = tmp_path / "root"
    claim = root / "claims" / "work"
    claim.mkdir(parents=True)
    (claim / "link").symlink_to(outside)
    translator = _translator(root, CLAIM, [{"name": "work", "mountPath": "/data", "subPath": "link/x"}])
    with pytest.raises(PodStartError) as refused:
        translator.launch()
    assert (
        'failed to prepare subPath for volumeMount "work" of container "pytorch": '
        f'subPath "link/x": it resolves to {outside.resolve()}, outside the volume'
    ) in str(refused.value)
    assert list(outside.iterdir()) == []  # nothing was created through the link


@pytest.mark.parametrize("target", ["dangling", "loop"])
def test_dangling_and_looping_links_in_a_subpath_are_refused(tmp_path: Path, outside: Path, target: str) -> None:
    root = tmp_path / "root"
    claim = root / "claims" / "work"
    claim.mkdir(parents=True)
    (claim / "link").symlink_to(claim / "link" if target == "loop" else outside / "missing" / "deeper")
    translator = _translator(root, CLAIM, [{"name": "work", "mountPath": "/data", "subPath": "link/x"}])
    with pytest.raises(PodStartError, match='failed to prepare subPath for volumeMount "work"'):
        translator.launch()
    assert list(outside.iterdir()) == []


def test_subpaths_inside_the_volume_are_created_and_may_use_links_that_stay_inside(tmp_path: Path) -> None:
    root = tmp_path / "root"
    claim = root / "claims" / "work"
    (claim / "real").mkdir(parents=True)
    (claim / "inner").symlink_to(claim / "real")
    mounts = [
        {"name": "work", "mountPath": "/nested", "subPath": "a/b/c"},
        {"name": "work", "mountPath": "/linked", "subPath": "inner/d"},
    ]
    assert _mounted(_translator(root, CLAIM, mounts)) == [claim / "a" / "b" / "c", claim / "inner" / "d"]
    assert (claim / "a" / "b" / "c").is_dir()
    assert (claim / "real" / "d").is_dir()


def test_a_link_left_in_a_config_map_volume_is_never_followed_on_restart(tmp_path: Path, outside: Path) -> None:
    """A container may replace its projected file by a link; the next start writes a fresh volume."""
    root = tmp_path / "root"
    precious = outside / "bashrc"
    precious.write_text("the user's own\n")
    volumes = [{"name": "settings", "configMap": {"name": "cm"}}]
    translator = _translator(
        root, volumes, [{"name": "settings", "mountPath": "/etc/app"}], config_maps={"cm": {"app.conf": "x=1\n"}}
    )
    projected = _mounted(translator)[0] / "app.conf"
    assert projected.read_text() == "x=1\n"
    projected.unlink()
    projected.symlink_to(precious)  # what the container did before it exited
    translator.launch()  # restarted in place
    assert precious.read_text() == "the user's own\n"
    assert not projected.is_symlink() and projected.read_text() == "x=1\n"


@pytest.mark.parametrize(
    ("volume", "message"),
    [
        # Both would be tmp_path/escaped: pod_dir/volumes/NAME and claims_dir/CLAIM.
        (
            {"name": "../../../../../../escaped", "emptyDir": {}},
            'spec.volumes: Invalid value: "../../../../../../escaped": a lowercase RFC 1123',
        ),
        (
            {"name": "work", "persistentVolumeClaim": {"claimName": "../../escaped"}},
            'volume "work": no PersistentVolumeClaim can be named "../../escaped"',
        ),
    ],
)
def test_names_that_are_paths_are_refused_even_where_nothing_validated_the_template(
    tmp_path: Path, volume: dict[str, Any], message: str
) -> None:
    """Templates can come from elsewhere than a validated manifest (a TrainJob's runtime)."""
    root = tmp_path / "root"
    translator = _translator(root, [volume], [{"name": volume["name"], "mountPath": "/data"}])
    with pytest.raises(PodStartError) as refused:
        translator.launch()
    assert message in str(refused.value)
    assert not (tmp_path / "escaped").exists()
