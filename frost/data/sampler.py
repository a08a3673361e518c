"""Which sample indices make up each batch: a pure function of (seed, epoch, batch).

The *global stream* is the same for every process and every number of workers:

    order(epoch)     = permutation of range(size) seeded by (seed, epoch)   (arange if not shuffled)
    global batch k   = order(epoch)[k * batch_size : (k + 1) * batch_size]

Process p of P takes the contiguous rows [p * r // P, (p + 1) * r // P) of each global batch of
r rows, so concatenating the processes' batches gives the global batch back, whatever P is.
A position in the stream is therefore just (epoch, k) and survives a change of process count.

```python
Sampler(10, 4, shuffle=False).batch(0, 2)                                   # [8, 9]
Sampler(10, 4, shuffle=False, process_index=1, process_count=2).batch(0, 0)  # [2, 3]
```
"""

import numpy as np


class Sampler:
    """The sample indices of each batch, a pure function of (seed, epoch, batch); see the module
    docstring. `len(sampler)` is the number of global batches per epoch.

    Arguments:
        size: the number of samples in the source.
        batch_size: the global batch, divisible by `process_count`.
        shuffle: permute the samples each epoch (else take them in order).
        seed: the seed of the permutations.
        drop_last: leave out the last batch of an epoch when it is smaller than batch_size.
        process_index: this process's index, in range(process_count).
        process_count: the processes that split each global batch.

    Raises:
        ValueError: batch_size < 1, size < 0, a process_index out of range, or a batch_size
            that process_count does not divide.
    """

    def __init__(
        self,
        size: int,
        batch_size: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        process_index: int = 0,
        process_count: int = 1,
    ):
        if batch_size < 1 or size < 0:
            raise ValueError(
                f"need batch_size >= 1 and size >= 0, got batch_size={batch_size}, size={size}"
            )
        if not 0 <= process_index < process_count:
            raise ValueError(
                f"process_index {process_index} is not in range(process_count={process_count})"
            )
        if batch_size % process_count:
            raise ValueError(
                f"batch_size {batch_size} (the global batch) must be divisible by "
                f"process_count {process_count}: each process loads batch_size // process_count "
                "rows"
            )
        self.size = int(size)
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        self.process_index = process_index
        self.process_count = process_count
        self._cached = (None, None)

    def __len__(self):
        """Global batches per epoch (the same on every process)."""
        return self.size // self.batch_size if self.drop_last else -(-self.size // self.batch_size)

    def order(self, epoch: int) -> np.ndarray:
        """The global order of sample indices in `epoch`.

        Arguments:
            epoch: the epoch.

        Returns:
            (size,) int64: a permutation of range(size) seeded by (seed, epoch), or range(size)
            itself when not shuffling.
        """
        if self._cached[0] != epoch:
            rng = np.random.default_rng([self.seed, 0, epoch])  # stream 0 (transforms: 1)
            order = rng.permutation(self.size) if self.shuffle else np.arange(self.size)
            self._cached = (epoch, order)
        return self._cached[1]

    def batch(self, epoch: int, k: int) -> np.ndarray:
        """This process's share of global batch k of `epoch`.

        Arguments:
            epoch: the epoch.
            k: the batch, in range(len(self)).

        Returns:
            (rows,) int64 sample indices: this process's contiguous part of the global batch
            (batch_size // process_count rows, fewer in a last, smaller batch).
        """
        if not 0 <= k < len(self):
            raise IndexError(f"batch {k} out of range: an epoch has {len(self)} batches")
        # the global batch
        rows = self.order(epoch)[k * self.batch_size : (k + 1) * self.batch_size]
        p, n = self.process_index, self.process_count
        return rows[p * len(rows) // n : (p + 1) * len(rows) // n]
