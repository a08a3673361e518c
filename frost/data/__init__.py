"""frost.data: sources, a deterministic sampler, augmentation, and a parallel, resumable loader.

```python
from frost import data, datasets

images, labels = datasets.fashion_mnist("train")
augment = data.Compose(
    data.RandomCrop(28, padding=2), data.RandomFlip(), data.Normalize(0.286, 0.353)
)
with data.Loader(data.Arrays(images, labels), 256, transform=augment, workers=2) as loader:
    for x, y in data.prefetch_to_device(loader):
        ...
```

Nothing here imports JAX at module level (worker processes import this package).
"""

from frost.data.images import DATASETS, Images, load_images
from frost.data.loader import Loader, WorkerError, load_sample, prefetch_to_device
from frost.data.sampler import Sampler
from frost.data.sources import Arrays, ImageFolder, TokenWindows
from frost.data.transforms import Compose, Normalize, RandomCrop, RandomFlip, Resize, sample_rng

# the readers of the IDX and CIFAR files live with the data sets that use them (frost.datasets)
from frost.datasets import read_cifar, read_idx, read_idx_pair

__all__ = [n for n in dir() if not n.startswith("_")]
