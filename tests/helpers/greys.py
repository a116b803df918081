"""Images whose every crop names its sample: each one flat grey, its level given by the
sample, so a crop's mean shows which sample it was cut from."""

import os

from PIL import Image
from torchvision import transforms as T
from torchvision.datasets import ImageFolder


def make_greys(root, samples):
    """``samples`` flat grey JPEGs under ``root`` (an ImageFolder of 3 classes)."""
    for i in range(samples):
        folder = root / f"c{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        level = 8 + 4 * i
        Image.new("RGB", (40, 30), (level, level, level)).save(folder / f"{level}.jpg", quality=95)
    return root


def grey_dataset(root):
    """The greys with a random crop; target: the sample's index; and each index's grey."""
    ds = ImageFolder(str(root), transform=T.Compose([T.RandomResizedCrop(16), T.ToTensor()]))
    levels = [int(os.path.basename(path).split(".")[0]) for path, _ in ds.samples]
    ds.samples = [(path, i) for i, (path, _) in enumerate(ds.samples)]
    ds.targets = list(range(len(ds.samples)))
    return ds, levels
