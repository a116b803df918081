"""Add a fourth tier to a scratch copy of the tree by CONTRIBUTING's "Add a tier" recipe, count
the files it touched, and check that the copy serves it.

The tier, ``resized``, is a base tier looked up between the augmented and the decoded one: a
decoded image kept in a budget of its own. (Here it is the decoded image as is, so that batches
stay equal to DataLoader's; a tier that really reduces the image would also change what the
transform gets.) The recipe's code edits are applied as exact replacements, so the script
fails loudly when the code they name has moved. The check in the copy: the key layout tests,
a plan over four tiers, and two epochs of SenecaLoader with a share for the new tier against a
real redis-server, whose batches must equal DataLoader's and whose second epoch hits the tier,
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
    "mdp/model.py": [
        (
            '    "decoded": TierModel(lambda p: p.m * p.s_data, "t_a"),\n',
            '    "resized": TierModel(lambda p: p.m * p.s_data, "t_a"),\n'
            '    "decoded": TierModel(lambda p: p.m * p.s_data, "t_a"),\n',
        )
    ],
    "seneca/loader/_samples.py": [
        (
            '        raise ValueError(f"no step makes the {form} form")',
            '        if form == "resized":\n'
            "            return obj\n"
            '        raise ValueError(f"no step makes the {form} form")',
        )
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
spec = mdp.load_spec("inhouse")
best = mdp.plan(spec)
print("mdp plan:", best.split_text(), f"{best.throughput:,.0f} samples/s")
assert len(best.split.percent) == 4 and Split.parse("40-30-20-10").resized == 0.2

sys.path.insert(0, "tests")
from conftest import RedisProcess  # the tests' redis-server on a unix socket

tmp = Path(tempfile.mkdtemp())
server = RedisProcess()
url = server.url
try:
    make_dataset(tmp / "data", 40, 2, size=(64, 48), progress=False)
    tf = transforms.Compose([transforms.Resize((32, 32)), transforms.PILToTensor()])
    ds = ImageFolder(str(tmp / "data"), transform=tf)
    split = {"resized": 0.6, "decoded": 0.2, "encoded": 0.2}
    loader = SenecaLoader(
        ds, batch_size=8, cache=url, cache_size="20MB", split=split, ods=False
    )
    want = [b for b in DataLoader(ds, batch_size=8)]
    for epoch in range(2):
        got = list(loader)
        assert all(torch.equal(g[0], w[0]) and torch.equal(g[1], w[1]) for g, w in zip(got, want))
    stats = loader.stats()
    print("after 2 epochs:", {t: stats[t]["hits"] for t in TIERS}, "hits")
    assert stats["resized"]["hits"] == 40, stats
    print("batches equal DataLoader's; the second epoch read every sample from the new tier")
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
