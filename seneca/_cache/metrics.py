"""The cache's figures as Prometheus metrics (``seneca cache metrics``): the same ones
``seneca cache status`` prints, read from the cache at each scrape."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from seneca._cache.status import CacheStatus

__all__ = ["CacheCollector", "registry_for"]


class CacheCollector(Collector):
    """Collects a :class:`CacheStatus` (``read`` gives a fresh one per scrape)."""

    def __init__(self, read: Callable[[], CacheStatus]) -> None:
        self.read = read

    def collect(self) -> Iterator[Metric]:
        s = self.read()
        mem = GaugeMetricFamily("seneca_server_memory_bytes", "Server memory", labels=["kind"])
        mem.add_metric(["used"], s.used_memory)
        mem.add_metric(["max"], s.maxmemory)
        yield mem
        tier_labels = ["dataset", "tier", "form"]
        size = GaugeMetricFamily("seneca_tier_bytes", "Bytes held per tier", labels=tier_labels)
        entries = GaugeMetricFamily("seneca_tier_entries", "Entries per tier", labels=tier_labels)
        budget = GaugeMetricFamily(
            "seneca_tier_budget_bytes", "Budget per tier (in force)", labels=tier_labels
        )
        share = GaugeMetricFamily(
            "seneca_dataset_share_bytes", "The dataset's share of the node", labels=["dataset"]
        )
        served = CounterMetricFamily(
            "seneca_served_samples", "Samples served by the sampler", labels=["dataset"]
        )
        hits = CounterMetricFamily(
            "seneca_hits", "Samples served from a tier", labels=["dataset", "tier"]
        )
        subs = CounterMetricFamily(
            "seneca_substitutions", "Misses replaced by cached samples", labels=["dataset"]
        )
        live = GaugeMetricFamily("seneca_live_jobs", "Jobs whose lease runs", labels=["dataset"])
        progress = GaugeMetricFamily(
            "seneca_job_progress",
            "Share of the latest epoch served",
            labels=["dataset", "job", "epoch"],
        )
        for d in s.datasets:
            for t in d.tiers:
                labels = [d.dataset, t.tier, t.form]
                size.add_metric(labels, t.bytes)
                entries.add_metric(labels, t.entries)
                if t.budget is not None:
                    budget.add_metric(labels, t.budget)
            if d.share is not None:
                share.add_metric([d.dataset], d.share)
            served.add_metric([d.dataset], d.served)
            for tier, n in d.hits.items():
                hits.add_metric([d.dataset, tier], n)
            subs.add_metric([d.dataset], d.substitutions)
            live.add_metric([d.dataset], d.live_jobs)
            for j in d.jobs:
                if j.live:
                    progress.add_metric([d.dataset, j.name, str(j.epoch)], j.progress)
        yield from (size, entries, budget, share, served, hits, subs, live, progress)


def registry_for(read: Callable[[], CacheStatus]) -> CollectorRegistry:
    """A registry with the cache's metrics only (no process metrics)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(CacheCollector(read))
    return registry
