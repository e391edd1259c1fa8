"""A cost model of data-parallel step time on CPU ranks: measured compute plus modelled communication.

Why a model: CPU ranks talking over loopback say nothing about how long a step takes on GPUs joined by PCIe or
NVLink, but the bytes a step all-reduces are the same on any device. So a step's time is modelled as

    step_s(n) = compute_s(n) + calls * 2 (n - 1) * latency_s + 2 (n - 1) / n * payload_bytes / bandwidth

the compute time measured on the rank (main-thread CPU time, ``runner.vdev.comm``) plus a ring all-reduce
(each of ``n`` ranks sends and receives ``2 (n - 1) / n`` of the payload in ``2 (n - 1)`` hops). The link
figures below are stated round numbers for a class of link, not measurements; every figure derived from them
is **modelled** and must be shown with that label (``runner.measure`` sets it). Real timing needs GPU ranks.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Link:
    """A class of link between two accelerators: its bandwidth per direction and its per-hop latency."""

    name: str
    bandwidth_bytes_s: float
    latency_s: float

    def describe(self) -> str:
        """Return the link as people read it, e.g. ``PCIe-class link, 24 GB/s, 10 µs per hop``."""
        return f"{self.name} link, {self.bandwidth_bytes_s / 1e9:g} GB/s, {self.latency_s * 1e6:g} µs per hop"


# Round figures: PCIe 4.0 x16 carries 32 GB/s per direction nominally, ~24 GB/s in practice; one NVLink-class
# connection between two data-centre GPUs carries hundreds of GB/s. They are the model's assumptions.
PCIE = Link("PCIe-class", 24e9, 10e-6)
NVLINK = Link("NVLink-class", 300e9, 5e-6)
LINKS = (PCIE, NVLINK)


def allreduce_s(payload_bytes: float, ranks: int, link: Link, calls: float = 1) -> float:
    """Return the modelled seconds of ``calls`` ring all-reduces moving ``payload_bytes`` in all on ``ranks``.

    ``calls`` may be an average (calls per step over many steps): it only multiplies the latency term.
    """
    if ranks <= 1:
        return 0.0
    hops = 2 * (ranks - 1)
    return calls * hops * link.latency_s + hops / ranks * payload_bytes / link.bandwidth_bytes_s


def step_s(compute_s: float, payload_bytes: float, calls: float, ranks: int, link: Link) -> float:
    """Return the modelled seconds of one step: measured compute plus modelled all-reduce (no overlap)."""
    return compute_s + allreduce_s(payload_bytes, ranks, link, calls)


def speedup(
    single_compute_s: float, payload_bytes: float, calls: float, ranks: list[int], link: Link
) -> list[tuple[int, float]]:
    """Return the modelled speed-up over one device for each rank count, the global batch held fixed.

    One device computes the whole batch in ``single_compute_s``; ``n`` ranks each compute ``1/n`` of it and
    then all-reduce ``payload_bytes`` in ``calls`` collectives.
    """
    out = []
    for n in ranks:
        t = step_s(single_compute_s / n, payload_bytes, calls, n, link)
        out.append((n, single_compute_s / t if t > 0 else 0.0))
    return out
