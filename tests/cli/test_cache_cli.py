"""``seneca cache status|clear|gc|metrics`` against a real cache that loaders filled."""

import json
import logging
import time

import pytest
import redis
from helpers.indexed import indexed
from prometheus_client.parser import text_string_to_metric_families

from ods.keys import Keys
from ods.store import OdsStore
from seneca import SenecaLoader
from seneca._cli.main import main


def _loaders(root, url, count=2):
    """``count`` jobs of one view (the same transform) that share augmented copies."""
    return [
        SenecaLoader(
            indexed(root), batch_size=8, shuffle=True, cache=url, split=(0, 0, 1), cache_size="20MB"
        )
        for _ in range(count)
    ]


def _train(loaders, epochs=2):
    """Interleave the loaders' epochs; the samples each served."""
    served = [0] * len(loaders)
    for _ in range(epochs):
        for batches in zip(*loaders, strict=True):
            for k, (x, _) in enumerate(batches):
                served[k] += len(x)
    return served


def _run(capsys, *argv):
    code = main(["cache", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _status(capsys, url):
    code, out, _ = _run(capsys, "status", url, "--json")
    assert code == 0
    return json.loads(out)


def test_status_reports_what_the_jobs_did(tiny_dataset, redis_url, capsys):
    loaders = _loaders(tiny_dataset, redis_url)
    served = _train(loaders)
    s = _status(capsys, redis_url)
    [d] = s["datasets"]
    assert d["about"] == f"ImageFolder {tiny_dataset}"
    assert d["samples"] == 48
    assert d["served"] == sum(served) == 2 * 2 * 48
    assert {j["name"].split("|")[0] for j in d["jobs"]} == {lo.job for lo in loaders}
    assert all(j["live"] and j["progress"] == 1.0 and j["epoch"] == 1 for j in d["jobs"])
    assert all(j["ods"] for j in d["jobs"])
    assert sum(j["hits"] for j in d["jobs"]) == sum(d["hits"].values()) > 0  # shared crops
    aug = next(t for t in d["tiers"] if t["tier"] == "augmented")
    used = redis.Redis.from_url(redis_url).hgetall(Keys(d["dataset"]).used)
    assert aug["entries"] == int(used[f"n{aug['form']}".encode()]) > 0
    assert aug["budget"] == 20_000_000
    code, text, _ = _run(capsys, "status", redis_url)
    assert code == 0 and "ImageFolder" in text and "2 live of 2" in text
    for lo in loaders:
        lo.close()
    assert _status(capsys, redis_url)["datasets"][0]["jobs"] == []


def test_status_shows_a_loader_without_ods_as_such(tiny_dataset, redis_url, capsys):
    loader = SenecaLoader(indexed(tiny_dataset), batch_size=8, cache=redis_url)  # in order
    assert not loader.ods
    assert sum(len(y) for _, y in loader) == 48
    [job] = _status(capsys, redis_url)["datasets"][0]["jobs"]
    assert not job["ods"] and job["epoch"] == -1, job
    code, text, _ = _run(capsys, "status", redis_url)
    assert code == 0 and "without ODS" in text and "epoch  -1" not in text, text
    loader.close()


def test_metrics_expose_the_status(tiny_dataset, redis_url, capsys):
    loaders = _loaders(tiny_dataset, redis_url)  # live while they are referenced
    _train(loaders, epochs=1)
    s = _status(capsys, redis_url)
    code, out, _ = _run(capsys, "metrics", redis_url)
    assert code == 0
    samples = {
        (x.name, tuple(sorted(x.labels.items()))): x.value
        for m in text_string_to_metric_families(out)
        for x in m.samples
    }
    [d] = s["datasets"]
    assert samples[("seneca_served_samples_total", (("dataset", d["dataset"]),))] == d["served"]
    assert samples[("seneca_live_jobs", (("dataset", d["dataset"]),))] == 2
    tiers = {k[1]: v for k, v in samples.items() if k[0] == "seneca_tier_bytes"}
    assert sum(tiers.values()) == sum(t["bytes"] for t in d["tiers"]) > 0
    assert samples[("seneca_dataset_share_bytes", (("dataset", d["dataset"]),))] > 0
    code, out, _ = _run(capsys, "metrics", redis_url, "--json")  # every cache command has it
    metrics = json.loads(out)["metrics"]
    as_json = {(x["name"], tuple(sorted(x["labels"].items()))): x["value"] for x in metrics}
    assert code == 0 and as_json.keys() == samples.keys()  # (memory moves between two reads)
    served = ("seneca_served_samples_total", (("dataset", d["dataset"]),))
    assert as_json[served] == samples[served]


def test_gc_reports_then_removes_only_what_no_job_can_use(tiny_dataset, redis_url, capsys):
    r = redis.Redis.from_url(redis_url)
    loaders = _loaders(tiny_dataset, redis_url, 3)
    _train(loaders)
    dataset = loaders[0].store.keys.dataset
    view_keys = loaders[0].store.keys
    store = OdsStore(r, dataset, 48, lease=0.05)
    store.join("crashed")  # a job whose lease runs out
    store.start_epoch("crashed", 0)
    keep = OdsStore(r, dataset, 48, lease=600)
    keep.join("alive")
    keep.start_epoch("alive", 0)
    orphan = view_keys.value("encoded", 7)  # a value no entry refers to
    r.set(orphan, b"left behind")
    time.sleep(0.1)

    def gc(*extra):
        code, out, _ = _run(capsys, "gc", redis_url, "--json", *extra)
        assert code == 0
        return json.loads(out)

    before = r.dbsize()
    report = gc()  # the view still has live jobs: its copies stay
    assert report["applied"] is False and r.dbsize() == before
    assert report["expired_jobs"] == [[dataset, "crashed"]]
    assert report["views"] == [] and report["orphan_values"] >= 1
    for lo in loaders[1:]:
        lo.close()
    assert gc()["views"] == []  # one job of the view is left
    loaders[0].close()
    [(_, view, entries, size)] = gc()["views"]
    assert view == view_keys.view and entries > 0 and size > 0
    copies = sum(1 for _ in r.scan_iter(f"seneca:v:{{{dataset}:a:*"))
    assert copies > 0

    report = gc("--apply")
    assert report["applied"] and report["orphan_values"] >= copies + 1
    assert not r.exists(orphan, view_keys.tier("augmented"), *store.keys.job("crashed"))
    assert not any(r.scan_iter(f"seneca:v:{{{dataset}:*"))
    assert r.exists(*keep.keys.job("alive")[:2]) == 2  # j and r of the live job stay
    assert keep.decide("alive", 8).indices  # and it goes on
    again = gc()
    assert again["expired_jobs"] == [] and again["views"] == [] and again["orphan_values"] == 0


def test_clear_refuses_datasets_in_use_unless_forced(tiny_dataset, redis_url, capsys):
    r = redis.Redis.from_url(redis_url)
    r.set("not-seneca", b"1")
    [loader] = _loaders(tiny_dataset, redis_url, 1)
    _train([loader], epochs=1)
    code, _, err = _run(capsys, "clear", redis_url)
    assert code == 2 and "--dataset ID" in err and "--all" in err  # nothing deleted unasked
    code, _, err = _run(capsys, "clear", redis_url, "--all")
    assert code == 2 and "1 live" in err and "--force" in err
    code, out, _ = _run(capsys, "clear", redis_url, "--all", "--force")
    assert code == 0 and "deleted" in out
    assert [k for k in r.scan_iter()] == [b"not-seneca"]
    assert _status(capsys, redis_url)["datasets"] == []


@pytest.mark.parametrize("action", ["status", "gc", "clear", "metrics"])
def test_unreachable_cache_is_an_error_naming_it(action, free_port, capsys):
    url = f"redis://:secret@127.0.0.1:{free_port}"
    code, _, err = _run(capsys, action, url)
    assert code == 2 and "unreachable" in err and "secret" not in err


def test_metrics_are_served_over_http(tiny_dataset, redis_url, free_port):
    import subprocess
    import sys
    import urllib.request

    loaders = _loaders(tiny_dataset, redis_url, 1)
    _train(loaders, epochs=1)
    cmd = [sys.executable, "-m", "seneca._cli.main", "cache", "metrics", redis_url]
    server = subprocess.Popen([*cmd, "--serve", str(free_port)], stdout=subprocess.PIPE, text=True)
    try:
        assert "/metrics" in server.stdout.readline()
        with urllib.request.urlopen(f"http://127.0.0.1:{free_port}/metrics", timeout=10) as r:
            text = r.read().decode()
        assert "seneca_served_samples_total" in text and 'tier="augmented"' in text
        assert "seneca_live_jobs" in text
    finally:
        server.terminate()
        server.wait(timeout=60)


def test_status_shows_the_plan_the_loaders_share_and_its_inputs(
    tiny_dataset, redis_url, capsys, caplog
):
    with caplog.at_level(logging.INFO, logger="seneca"):
        loader = SenecaLoader(indexed(tiny_dataset), batch_size=8, shuffle=True, cache=redis_url)
        assert len(list(loader)) == 6
    logged = [m for m in caplog.messages if m.startswith("cache plan for Image")]
    [d] = _status(capsys, redis_url)["datasets"]
    plan = d["plan"]
    assert plan["version"] == 1 and plan["by"] == loader.job and sum(plan["split"]) == 100
    assert [v / 100 for v in plan["split"]] == list(loader.split.values())
    assert plan["inputs"]["dataset.samples"] == 48
    code, text, _ = _run(capsys, "status", redis_url)
    split = "-".join(str(v) for v in plan["split"])
    assert code == 0 and f"plan (E-D-A): split {split} (version 1, " in text
    assert logged and logged[-1].split(": ", 1)[1] in text  # one story, both places
    assert "decode+transform/s" in text
    loader.close()
