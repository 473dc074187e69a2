"""Which of the node's image copies the e2e harness makes it forget (tools/cluster/images.stale_refs).

The node pulls a version tag only when it lacks it, so a copy of an earlier build must go before
pods run the new one; a copy of the current build must stay (a pull of 5 GB is minutes).
The listing is `ctr images ls` output as containerd 2 prints it on the real node.
"""

from __future__ import annotations

from tools.cluster.images import stale_refs

LAUNCHER = "ghcr.io/kubetrain/launcher:0.1.0"
PYTORCH = "ghcr.io/kubetrain/pytorch:0.1.0"
OLD, NEW, TORCH = "sha256:" + "a" * 64, "sha256:" + "b" * 64, "sha256:" + "c" * 64
LISTING = f"""REF TYPE DIGEST SIZE PLATFORMS LABELS
{LAUNCHER} application/vnd.oci.image.manifest.v1+json {OLD} 104.0 MiB linux/amd64 io.cri-containerd.image=managed
ghcr.io/kubetrain/launcher@{OLD} application/vnd.oci.image.manifest.v1+json {OLD} 104.0 MiB linux/amd64 -
{PYTORCH} application/vnd.oci.image.manifest.v1+json {TORCH} 5.3 GiB linux/amd64 io.cri-containerd.image=managed
ghcr.io/kubetrain/pytorch@{TORCH} application/vnd.oci.image.manifest.v1+json {TORCH} 5.3 GiB linux/amd64 -
registry.k8s.io/pause:3.10 application/vnd.oci.image.manifest.v1+json {OLD} 300.0 KiB linux/amd64 -
"""


def test_a_copy_of_another_build_goes_with_its_digest_named_ref_and_nothing_else() -> None:
    registry = {LAUNCHER: NEW, PYTORCH: TORCH}
    stale = stale_refs(LISTING, [LAUNCHER, PYTORCH], registry.__getitem__)
    # pause shares the old digest in this listing but is another repository: it stays.
    assert stale == {LAUNCHER: [LAUNCHER, f"ghcr.io/kubetrain/launcher@{OLD}"]}


def test_the_current_build_and_images_the_node_never_pulled_stay() -> None:
    registry = {LAUNCHER: OLD, PYTORCH: TORCH, "ghcr.io/kubetrain/ps:0.1.0": NEW}
    assert stale_refs(LISTING, [LAUNCHER, PYTORCH, "ghcr.io/kubetrain/ps:0.1.0"], registry.__getitem__) == {}


def test_a_tag_the_registry_no_longer_holds_is_forgotten_too() -> None:
    # The node's copy would otherwise run on as if it were the registry's.
    assert list(stale_refs(LISTING, [PYTORCH], lambda ref: None)) == [PYTORCH]
