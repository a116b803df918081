"""Add a fourth tier to a scratch copy of the tree by CONTRIBUTING's "Add a tier" recipe, count
the files it touched, and check that the copy serves it.

The tier, ``resized``, sits between the augmented and the decoded one: a sample's image after
the leading deterministic steps of the transform's random head (a ``Resize`` before a random
crop or flip), smaller than the decoded image, with a size of its own in the model
(``dataset.resized_ratio``) and a budget of its own in the split. A random step after it runs
at every fetch from it, as DataLoader runs it. Its values depend on those steps, so the
dataset's cache is named by them too (as a validation transform's is). The recipe's code edits
are applied as exact replacements, so the script fails loudly when the code they name has
moved. The check in the copy: the key layout tests; a plan over four tiers, where the new
tier's sample is smaller than a decoded one; two epochs of SenecaLoader with a share for the
new tier against a real redis-server, whose samples must each be DataLoader's or its flip,
whose second epoch hits the tier, and whose cached values of the tier have the resized size;
then two epochs with ODS over the same cache.

    .venv/bin/python scripts/fourth_tier.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The recipe's edits: file -> [(old, new)]
EDITS = {
    "seneca_base/tiers.py": [
        (
            'TIERS: tuple[str, ...] = ("augmented", "decoded", "encoded")',
            'TIERS: tuple[str, ...] = ("augmented", "resized", "decoded", "encoded")',
        )
    ],
    "mdp/spec.py": [
        (
            '    Field("model", "size_mb",',
            '    Field("dataset", "resized_ratio", "resized_ratio", float, "",\n'
            '          "resized / decoded size", 1.0),\n'
            '    Field("model", "size_mb",',
        ),
        (
            '    source: str = "<spec>"\n',
            '    source: str = "<spec>"\n    resized_ratio: float = 1.0\n',
        ),
    ],
    "mdp/model.py": [
        ("    cores: int = 1\n", "    cores: int = 1\n    m_r: float = 1.0\n"),
        (
            "            cores=spec.cpu_cores,\n",
            "            cores=spec.cpu_cores,\n"
            "            m_r=spec.inflation * spec.resized_ratio,\n",
        ),
        (
            '    "decoded": TierModel(lambda p: p.m * p.s_data, "t_a"),\n',
            '    "resized": TierModel(lambda p: p.m_r * p.s_data, "t_a"),\n'
            '    "decoded": TierModel(lambda p: p.m * p.s_data, "t_a"),\n',
        ),
    ],
    "seneca/pipeline/transforms.py": [
        (
            "        self.fixed_head = bool(head) and all(_deterministic(s) for s in head)\n",
            "        self.fixed_head = bool(head) and all(_deterministic(s) for s in head)\n"
            "        cut = 0\n"
            "        while not self.fixed_head and cut < len(head) and _deterministic(head[cut]):\n"
            "            cut += 1\n"
            "        #: the head's leading deterministic steps (the resized form), None when none\n"
            "        self.prefix = _chain(head[:cut])\n"
            "        self.prefix_fingerprint = fingerprint(head[:cut])\n"
            "        #: the rest of the head, run on the resized form\n"
            "        self.after_prefix = _chain(head[cut:])\n",
        )
    ],
    "seneca/loader/_samples.py": [
        (
            "            return head, transform.without_head()\n"
            "        return self.base, transform\n",
            "            return head, transform.without_head()\n"
            "        if transform.prefix is not None:  # resized values: named by the prefix too\n"
            "            return _Named(self.base, None, transform.prefix_fingerprint), transform\n"
            "        return self.base, transform\n",
        ),
        (
            '            if tier == "augmented" and self.transform.head is None:\n',
            '            if tier == "resized" and self.transform.prefix is None:\n'
            "                continue\n"
            '            if tier == "augmented" and self.transform.head is None:\n',
        ),
        (
            '        raise ValueError(f"no step makes the {form} form")',
            '        if form == "resized":\n'
            "            prefix = self.transform.prefix\n"
            "            return obj if prefix is None else prefix(obj)\n"
            '        raise ValueError(f"no step makes the {form} form")',
        ),
        (
            "            obj = self.transform.head(obj)\n",
            "            obj = self.transform.after_prefix(obj)  # on the resized form\n",
        ),
        (
            "def _tensor_value(",
            "class _Named(HeadedSource):\n"
            '    """``inner``\'s samples, decoded as they are, named by a fingerprint."""\n'
            "\n"
            "    def decode(self, index: int, raw: bytes | memoryview | None) -> Any:\n"
            "        return self.inner.decode(index, raw)\n"
            "\n"
            "\n"
            "def _tensor_value(",
        ),
    ],
}

#: What the recipe also touches that a scratch copy need not: its documentation
DOCS = ("docs/guide.md", "docs/mdp.md")

CHECK = r"""
import shutil, sys, tempfile
from pathlib import Path

import torch
from torch.utils.data import DataLoader
from torchvision import transforms
from torchvision.datasets import ImageFolder

import mdp
import seneca
from seneca import SenecaLoader
from seneca._bench.synthetic import make_dataset
from seneca_base.split import Split
from seneca_base.tiers import NOTATION, TIERS

assert Path(seneca.__file__).is_relative_to(Path.cwd()), seneca.__file__  # the copy's code
print("tiers", TIERS, "written", NOTATION)
spec = mdp.load_spec("inhouse").replace("dataset.resized_ratio", 0.25)
best = mdp.plan(spec)
print("mdp plan:", best.split_text(), f"{best.throughput:,.0f} samples/s")
assert len(best.split.percent) == 4 and Split.parse("40-30-20-10").resized == 0.2
p = mdp.Params.from_spec(spec)
assert p.sample_bytes("resized") == p.sample_bytes("decoded") / 4, "its own size"

sys.path.insert(0, "tests")
from conftest import RedisProcess  # the tests' redis-server on a unix socket

tmp = Path(tempfile.mkdtemp())
server = RedisProcess()
url = server.url
try:
    make_dataset(tmp / "data", 40, 2, size=(64, 48), progress=False)
    resize = transforms.Resize((32, 32))
    tf = transforms.Compose([resize, transforms.RandomHorizontalFlip(), transforms.PILToTensor()])
    ds = ImageFolder(str(tmp / "data"), transform=tf)
    plain = ImageFolder(
        str(tmp / "data"), transform=transforms.Compose([resize, transforms.PILToTensor()])
    )
    want = [b for b in DataLoader(plain, batch_size=8)]
    split = {"resized": 0.6, "decoded": 0.2, "encoded": 0.2}
    loader = SenecaLoader(
        ds, batch_size=8, cache=url, cache_size="20MB", split=split, ods=False
    )
    for epoch in range(2):
        got = list(loader)
        for g, w in zip(got, want):
            assert torch.equal(g[1], w[1])
            for image, plain_image in zip(g[0], w[0]):  # DataLoader's, flipped or not
                assert torch.equal(image, plain_image) or torch.equal(image, plain_image.flip(-1))
    stats = loader.stats()
    print("after 2 epochs:", {t: stats[t]["hits"] for t in TIERS}, "hits")
    assert stats["resized"]["hits"] == 40, stats
    client = server.client
    sizes = [client.strlen(k) for k in client.scan_iter(match="seneca:v:{*:r:*}")]
    assert len(sizes) == 40 and max(sizes) < 32 * 32 * 3 + 200 < 64 * 48 * 3, sizes  # + its info
    print("batches are DataLoader's; the second epoch read every sample from the new tier,")
    print(f"whose values hold {max(sizes)} bytes each (a decoded image: {64 * 48 * 3})")
    smaller = transforms.Compose(
        [transforms.Resize((24, 24)), transforms.RandomHorizontalFlip(), transforms.PILToTensor()]
    )
    other = SenecaLoader(
        ImageFolder(str(tmp / "data"), transform=smaller), batch_size=8, cache=url,
        cache_size="20MB", split=split, ods=False,
    )
    shapes = {tuple(x.shape[1:]) for _ in range(2) for x, _ in other}
    assert shapes == {(3, 24, 24)}, shapes  # never the other transform's resized values
    print("another transform's resized values are its own:", shapes)
    ods = SenecaLoader(
        ds, batch_size=8, shuffle=True, cache=url, cache_size="20MB", split=split,
        job="ods",
    )
    sizes = [sum(len(y) for _, y in ods) for _ in range(2)]
    stats = ods.stats()
    print("with ODS:", sizes, "samples per epoch,", {t: stats[t]["hits"] for t in TIERS}, "hits")
    assert sizes == [40, 40] and stats["resized"]["hits"] >= 40, stats
finally:
    server.stop()
    shutil.rmtree(tmp, ignore_errors=True)
"""


def main() -> int:
    scratch = Path(tempfile.mkdtemp(prefix="seneca-fourth-tier-"))
    try:
        files = subprocess.run(
            ["git", "ls-files"], cwd=ROOT, check=True, capture_output=True, text=True
        ).stdout.split()
        for name in files:
            (scratch / name).parent.mkdir(parents=True, exist_ok=True)
            if (ROOT / name).is_file():
                shutil.copy2(ROOT / name, scratch / name)
        for name, edits in EDITS.items():
            path = scratch / name
            text = path.read_text()
            for old, new in edits:
                if text.count(old) != 1:
                    raise SystemExit(f"{name}: the recipe's edit no longer applies: {old!r}")
                text = text.replace(old, new)
            path.write_text(text)
        print(f"the recipe's code edits touch {len(EDITS)} files: {', '.join(EDITS)}")
        print(f"with its documentation ({', '.join(DOCS)}): {len(EDITS) + len(DOCS)} files")
        env = {**os.environ, "PYTHONPATH": str(scratch)}
        tests = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider"]
        tests += ["tests/ods/test_key_layout.py"]
        subprocess.run(tests, cwd=scratch, env=env, check=True)
        subprocess.run([sys.executable, "-c", CHECK], cwd=scratch, env=env, check=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
