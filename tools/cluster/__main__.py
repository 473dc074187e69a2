"""`python -m tools.cluster up|down|status`: the e2e cluster (`make cluster-up`, `make cluster-down`)."""

from __future__ import annotations

import argparse
import sys

from kubetrain.presets import IMAGE_NAMES
from tools.cluster import controlplane, images, node
from tools.cluster.kfp import backend, ui


def main(argv: list[str] | None = None) -> int:
    """up: start (or find) the cluster and print its kubeconfigs; down: stop everything; status: what runs."""
    parser = argparse.ArgumentParser(prog="python -m tools.cluster", description=__doc__)
    parser.add_argument("action", choices=("up", "down", "status"))
    parser.add_argument(
        "--no-real-node",
        action="store_true",
        help="up: kwok nodes only, no real node (no root needed; also KUBETRAIN_REAL_NODE=0)",
    )
    parser.add_argument(
        "--no-kfp",
        action="store_true",
        help="up: no Kubeflow Pipelines backend on the real node (also KUBETRAIN_KFP=0)",
    )
    parser.add_argument(
        "--images",
        action="store_true",
        help="up: also build kubetrain's four images and push them to the real node's registry (the e2e "
        "session builds the ones it needs on demand; unchanged sources take seconds)",
    )
    args = parser.parse_args(argv)
    if args.images and args.no_real_node:
        parser.error("--images needs the real node (its registry): drop --no-real-node")
    reported: tuple[type[BaseException], ...] = (*controlplane.start_errors(), images.ImageBuildError)
    try:
        if args.action == "down":
            ended = controlplane.down()
            print(f"cluster down: {len(ended)} process(es) ended; nothing of the cluster is running")
        elif args.action == "status":
            print("\n".join(controlplane.status()))
        else:
            real_node = False if args.no_real_node else None
            kfp = False if args.no_kfp or args.no_real_node else None
            cluster = controlplane.up(real_node=real_node, kfp=kfp)
            print(f"admin kubeconfig:    {cluster.kubeconfig}")
            print(f"launcher kubeconfig: {cluster.launcher_kubeconfig}")
            if backend.running(controlplane.STATE):
                print(f"KFP API (kfp.Client host): http://127.0.0.1:{backend.API_HTTP_PORT}")
                page = ui.read_url(controlplane.STATE)
                if page is not None:
                    print(f"KFP UI:              {page}")
            if args.images:
                if not node.running(controlplane.STATE):
                    raise images.ImageBuildError("--images: no real node runs in this cluster (KUBETRAIN_REAL_NODE=0?)")
                built = images.ensure(
                    list(IMAGE_NAMES),
                    controlplane.STATE / "images.log",
                    node=node.paths(controlplane.STATE, cluster.bin_dir),
                )
                print(f"images on the node's registry: {', '.join(built.names)} ({built.seconds:.0f} s)")
    except reported as e:
        print(f"cluster {args.action}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
