"""A short training job against a cache node: the compose file's ``trainer`` service (the tests
run it natively against the same configuration).

Environment:
  SENECA_CACHE_URL      the cache, with ``{password}`` where the loader user's password goes,
                        e.g. ``redis://loader:{password}@cache:6379``
  SENECA_PASSWORD_FILE  the loader user's password (default /run/secrets/loader_password)
  SENECA_DATA           an ImageFolder dataset; a small synthetic one is made there if missing
                        (default /tmp/seneca-data)
  SENECA_IMAGES, SENECA_EPOCHS  size of that dataset (default 256) and epochs (default 2)
"""

import collections
import os
import subprocess
import sys
from pathlib import Path

import torch
from torch import nn
from torchvision import datasets
from torchvision import transforms as T

from seneca import SenecaLoader


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default)


def main() -> int:
    secret = Path(_env("SENECA_PASSWORD_FILE", "/run/secrets/loader_password"))
    password = secret.read_text().splitlines()[0].strip()
    url = os.environ["SENECA_CACHE_URL"].format(password=password)
    data = Path(_env("SENECA_DATA", "/tmp/seneca-data"))
    if not data.exists():
        images = _env("SENECA_IMAGES", "256")
        make = [sys.executable, "-m", "seneca", "make-dataset", str(data), "--images", images]
        subprocess.run([*make, "--classes", "4", "--size", "128x96"], check=True)
    crop = T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.ToTensor()])
    dataset = datasets.ImageFolder(str(data), transform=crop)
    dataset.samples = [(path, i) for i, (path, _) in enumerate(dataset.samples)]  # target: index
    loader = SenecaLoader(dataset, batch_size=32, shuffle=True, cache=url, cache_size="64MB")
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 64 * 64, len(dataset)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(int(_env("SENECA_EPOCHS", "2"))):
        seen: collections.Counter[int] = collections.Counter()
        loader.reset_stats()  # stats() counts this epoch's
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            seen.update(y.tolist())
        stats = loader.stats()
        print(
            f"epoch {epoch}: {sum(seen.values())} samples, loss {loss.item():.3f}, "
            f"this epoch's storage reads {stats['storage_reads']}, "
            f"cache errors {stats['cache_errors']}"
        )
        if sorted(seen) != list(range(len(dataset))) or max(seen.values()) != 1:
            print("error: the epoch did not serve every sample exactly once", file=sys.stderr)
            return 1
    loader.close()
    print(f"trained against {loader.cache_url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
