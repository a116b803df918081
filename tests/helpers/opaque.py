"""Deterministic transform steps Seneca does not know to be deterministic (subclasses are not
on its list of torchvision's own classes): a head made of them is cached as augmented copies,
as a random head is, while its output stays known, so the tests of the augmented path can
compare every number."""

from torchvision import transforms as T
from torchvision.transforms import v2


class Resize(v2.Resize):
    """``v2.Resize``, cached as a random head would be."""


class CenterCrop(v2.CenterCrop):
    """``v2.CenterCrop``, cached as a random head would be."""


class CenterCropV1(T.CenterCrop):
    """``transforms.CenterCrop``, cached as a random head would be."""


class Slow:
    """A transform step that takes ``seconds`` (a decode of a large image, say)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self, x):
        import time

        time.sleep(self.seconds)
        return x

    def __repr__(self) -> str:
        return f"Slow({self.seconds})"
