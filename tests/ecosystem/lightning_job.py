"""A training script with PyTorch Lightning, unmodified, and SenecaLoaders from its hooks (run
by test_lightning.py, not a test itself).

    python lightning_job.py DATA CACHE_URL OUT DEVICES [CKPT]

Fits a tiny classifier for two epochs (three when resumed from CKPT, an epoch's end; two from
the checkpoint taken three batches into the second, ``mid-step=9.ckpt``) on ``DEVICES`` CPU
processes (more than one: Lightning's ``strategy="ddp"`` over gloo, with its default
``use_distributed_sampler=True``), validating after each epoch and saving a checkpoint each
epoch. Each rank writes ``OUT/rank{R}.json``: a digest of every sample it trained on and
validated, per epoch, and the training loader's ``stats()`` after each epoch.
"""

import hashlib
import json
import sys

import lightning as L
import torch
from torchvision import transforms as T
from torchvision.datasets import ImageFolder

from seneca import SenecaLoader

TRANSFORM = T.Compose([T.Resize(16), T.CenterCrop(16), T.PILToTensor()])


def digest(image: torch.Tensor) -> str:
    return hashlib.sha1(image.numpy().tobytes()).hexdigest()[:16]


class Classifier(L.LightningModule):
    def __init__(self, data: str, url: str) -> None:
        super().__init__()
        self.net = torch.nn.Linear(3 * 16 * 16, 3)
        self.data, self.url = data, url
        self.seen: dict = {"train": {}, "val": {}, "test": {}, "predict": {}}
        self.stats: list = []
        self.loaders: dict = {}

    def loader(self, stage: str, **kwargs) -> SenecaLoader:
        ds = ImageFolder(self.data, transform=TRANSFORM)
        self.loaders[stage] = SenecaLoader(ds, batch_size=4, cache=self.url, **kwargs)
        return self.loaders[stage]

    def train_dataloader(self):
        return self.loader("train", shuffle=True, num_workers=1)

    def val_dataloader(self):
        return self.loader("val")

    def test_dataloader(self):
        return self.loader("test")

    def predict_dataloader(self):
        return self.loader("predict")

    def forward(self, x):
        return self.net(x.float().flatten(1) / 255)

    def record(self, stage: str, images: torch.Tensor) -> None:
        epoch = str(self.current_epoch)
        self.seen[stage].setdefault(epoch, []).extend(digest(x) for x in images)

    def training_step(self, batch, index):
        x, y = batch
        self.record("train", x)
        return torch.nn.functional.cross_entropy(self(x), y)

    def validation_step(self, batch, index):
        if not self.trainer.sanity_checking:
            self.record("val", batch[0])

    def test_step(self, batch, index):
        self.record("test", batch[0])

    def predict_step(self, batch, index):
        self.record("predict", batch[0])
        return self(batch[0]).argmax(1)

    def on_train_epoch_end(self):
        self.stats.append(self.loaders["train"].stats())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(data: str, url: str, out: str, devices: str, ckpt: str | None = None) -> None:
    model = Classifier(data, url)
    mid_epoch = L.pytorch.callbacks.ModelCheckpoint(  # at step 9: 3 batches into epoch 1
        filename="mid-{step}", every_n_train_steps=9, save_top_k=-1
    )
    trainer = L.Trainer(
        callbacks=[L.pytorch.callbacks.ModelCheckpoint(), mid_epoch],  # (the default, and)
        accelerator="cpu",
        devices=int(devices),
        strategy="ddp" if int(devices) > 1 else "auto",
        max_epochs=2 if ckpt is None or "mid-" in ckpt else 3,
        default_root_dir=out,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, ckpt_path=ckpt)
    report = {
        "seen": model.seen,
        "stats": model.stats,
        # what ran is the loader train_dataloader() made, not a copy Lightning made of it
        "train_loader_kept": trainer.train_dataloader is model.loaders["train"],
        "job": model.loaders["train"].job,
    }
    with open(f"{out}/rank{trainer.global_rank}.json", "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main(*sys.argv[1:6])
