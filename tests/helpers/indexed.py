"""A dataset whose targets are sample indices, shared by the loader tests (and the torchrun
worker), so a batch shows which samples it holds."""

from torchvision import transforms as T
from torchvision.datasets import ImageFolder

RANDOM = T.Compose([T.RandomResizedCrop(16), T.ToTensor()])


def indexed(root):
    """ImageFolder at ``root`` with a random crop; target = sample index."""
    ds = ImageFolder(str(root), transform=RANDOM)
    ds.samples = [(path, i) for i, (path, _) in enumerate(ds.samples)]
    ds.targets = list(range(len(ds.samples)))
    return ds
