"""Rank 0's rendezvous store bound to one address, and where the topology says to bind it."""

from __future__ import annotations

import socket
from datetime import timedelta

import pytest
import torch.distributed as dist

from kubetrain.errors import SpecError, TrainingError
from kubetrain.train.topology import pytorchjob_env, torch_topology_from_env
from kubetrain.train.torch_dist import bound_store

pytestmark = pytest.mark.timeout(60)

# Two replicas of two different local jobs: same port, different loopback addresses.
ADDRESS_A, ADDRESS_B = "127.77.0.1", "127.77.1.1"


def _port_free_everywhere() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return int(s.getsockname()[1])


def test_the_store_listens_on_its_address_only_and_a_second_one_shares_the_port() -> None:
    port = _port_free_everywhere()
    first = bound_store(ADDRESS_A, port, world_size=1, timeout=10)
    # torch's own server would hold the port on every interface and this would fail.
    second = bound_store(ADDRESS_B, port, world_size=1, timeout=10)
    client = dist.TCPStore(ADDRESS_A, port, is_master=False, timeout=timedelta(seconds=10))
    client.set("job", "a")
    assert first.get("job") == b"a"
    assert first.check(["job"]) and not second.check(["job"])  # the key went to the first store only
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
    del client, first, second


def test_a_port_held_on_every_interface_is_an_error_naming_the_address() -> None:
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        port = int(holder.getsockname()[1])
        with pytest.raises(TrainingError, match=rf"{ADDRESS_A}:{port}"):
            bound_store(ADDRESS_A, port, world_size=1, timeout=10)


def _env(master_addr: str, **extra: str) -> dict[str, str]:
    env = pytorchjob_env(replica_index=0, is_master=True, replicas=3, master_addr=master_addr, master_port=23456)
    return {**env, **extra}


def test_bind_address_comes_from_kubetrain_bind_address_first() -> None:
    topo = torch_topology_from_env(_env("127.0.0.1", KUBETRAIN_BIND_ADDRESS="127.4.5.1"))
    assert topo.bind_address == "127.4.5.1"


def test_a_loopback_master_addr_is_bound_and_a_host_name_keeps_the_wildcard() -> None:
    assert torch_topology_from_env(_env("127.0.0.1")).bind_address == "127.0.0.1"
    assert torch_topology_from_env(_env("job-master-0")).bind_address == ""
    assert torch_topology_from_env(_env("10.1.2.3")).bind_address == ""


def test_under_torchrun_the_agent_hosts_the_store_and_nothing_is_bound() -> None:
    env = _env("127.0.0.1", KUBETRAIN_BIND_ADDRESS="127.4.5.1", TORCHELASTIC_RUN_ID="none", PET_NPROC_PER_NODE="1")
    topo = torch_topology_from_env(env)
    assert (topo.launcher, topo.bind_address) == ("torchrun", "")


def test_a_bind_address_that_is_not_an_ip_is_rejected() -> None:
    with pytest.raises(SpecError, match="KUBETRAIN_BIND_ADDRESS"):
        torch_topology_from_env(_env("job-master-0", KUBETRAIN_BIND_ADDRESS="job-master-0"))
