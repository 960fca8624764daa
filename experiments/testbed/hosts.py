"""Where the testbed's instances run: hosts, racks and the placement rule (issue 26).

With ``TestbedConfig.hosts`` = H, hosts are numbered 0..H-1 and host h sits on rack
``h // hosts_per_rack`` (``hosts_per_rack`` None: every host on rack 0). Metric rows name a host
``host-<h>`` (``host_name``), as an engine names a TaskManager or a node.

**The placement rule** (``slot_host``), Flink-like: slot sharing puts instance l of every
operator into slot l (so a job uses as many slots as its largest parallelism), and slots are
spread round-robin over the hosts, slot by slot: slot l's home host is ``l % H``. Hosts the
placement avoids (``excluded``: lost hosts and hosts the operator moved instances off) give
their slots away: the displaced slots, in slot order, go round-robin over the remaining hosts in
host order. The rule depends only on l, H and the excluded set, never on the parallelism, so a
rescale moves no instance of an operator it does not restart, and excluding a host moves the
instances on it plus, at most, displaced slots that were already away from home. The testbed
applies it to every instance it (re)starts: at the start, on a rescale (the restarted
operators), at a failover and on ``move_off_host``; instances it does not restart keep their host.
"""

from __future__ import annotations

from typing import Collection


def host_name(host: int) -> str:
    """The ``host`` column's text for host index ``host``."""
    return f"host-{int(host)}"


def rack_of(host: int, hosts_per_rack: int | None) -> int:
    """The rack of host ``host`` (0 when ``hosts_per_rack`` is None: one rack)."""
    return 0 if hosts_per_rack is None else int(host) // int(hosts_per_rack)


def hosts_of_rack(rack: int, hosts: int, hosts_per_rack: int | None) -> list[int]:
    """The hosts on rack ``rack``, in order (empty for a rack beyond the last host)."""
    return [h for h in range(hosts) if rack_of(h, hosts_per_rack) == rack]


def slot_host(slot: int, hosts: int, excluded: Collection[int] = ()) -> int:
    """Host of slot ``slot`` (= instance index) under the placement rule (module docstring).

    ``excluded`` must leave at least one of the ``hosts`` hosts. The displaced slot's rank among
    the displaced slots below it is counted in closed form: each full round of ``hosts`` slots
    displaces ``len(excluded)`` of them, plus the excluded hosts below ``slot % hosts``."""
    home = slot % hosts
    if home not in excluded:
        return home
    gone = sorted(h for h in set(excluded) if 0 <= h < hosts)
    avail = [h for h in range(hosts) if h not in excluded]
    if not avail:
        raise ValueError("every host is excluded")
    rank = (slot // hosts) * len(gone) + sum(1 for h in gone if h < home)
    return avail[rank % len(avail)]
