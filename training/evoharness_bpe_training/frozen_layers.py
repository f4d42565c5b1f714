"""The frozen bottom of a model trained with LoRA on its top layers, computed once per row.

With LoRA on the top decoder layers only (`speed.lora_config(top_layers=)`), the layers below
them never change during training: the hidden state they hand up for a given row is the same in
every epoch. `cache_frozen_layers` keeps it the first time a row passes and hands it up again
the next times, so epochs after the first run only the trained layers. The kept state is the
one the layers computed, so the loss, the gradients and the trained adapter are those of the
uncached run.

    with cache_frozen_layers(trainer.model) as cache:
        trainer.train()
    cache.hits, cache.misses
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FrozenLayersCache", "cache_frozen_layers", "frozen_bottom_layers", "decoder_layer_list"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 4 << 30
"""The most the kept hidden states may take (4 GiB); rows past it run the frozen layers every time."""


def decoder_layer_list(model: Any) -> Any:
    """The `torch.nn.ModuleList` of `model`'s decoder layers (under PEFT wrappers too), or None."""
    import torch

    count = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and name.rsplit(".", 1)[-1] == "layers" and (count is None or len(module) == count):
            return module
    return None


def _trains(module: Any) -> bool:
    return any(p.requires_grad for p in module.parameters())


def _drops_out(module: Any) -> bool:
    """Whether `module` may draw random numbers in training: a dropout module or attention dropout above 0."""
    import torch

    for part in module.modules():
        if isinstance(part, torch.nn.modules.dropout._DropoutNd) and part.p > 0:
            return True
        if float(getattr(part, "attention_dropout", 0.0) or 0.0) > 0:
            return True
    return False


def _frozen_bottom(model: Any) -> list[Any]:
    """The decoder layers, from the bottom, that `model` can hand up from a cache: none of their
    parameters trains, nothing below them trains (the embeddings), and none of them drops out."""
    layers = decoder_layer_list(model)
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if layers is None or (embeddings is not None and _trains(embeddings)):
        return []
    frozen: list[Any] = []
    for layer in layers:
        if _trains(layer) or _drops_out(layer):
            break
        frozen.append(layer)
    return frozen


def frozen_bottom_layers(model: Any) -> int:
    """How many decoder layers, from the bottom, `model` can hand up from a cache (`_frozen_bottom`)."""
    return len(_frozen_bottom(model))


def _tensor_digest(digest: Any, tensor: Any) -> None:
    import torch

    if tensor is None or not isinstance(tensor, torch.Tensor):
        digest.update(b"-")
        return
    digest.update(f"{tuple(tensor.shape)}{tensor.dtype}".encode())
    data = tensor.detach().contiguous()
    if data.dtype == torch.bfloat16:  # numpy has no bfloat16: hash its bits
        data = data.view(torch.int16)
    digest.update(data.cpu().numpy().tobytes())


@dataclass
class FrozenLayersCache:
    """The output of `layers` (the frozen bottom of a model), kept per distinct input.

    The first layer's input (the embedded row), its attention mask and positions, the device and
    the autocast setting make the key. A call whose input needs gradients, or that carries a
    KV cache (generation), runs the layers as they are. `max_bytes` caps what is kept.
    """

    layers: list[Any]
    max_bytes: int = DEFAULT_MAX_BYTES
    hits: int = 0
    misses: int = 0
    kept_bytes: int = 0
    _store: dict[bytes, Any] = field(default_factory=dict, repr=False)
    _pending: bytes | None = field(default=None, repr=False)
    _skipping: bool = field(default=False, repr=False)

    def key(self, hidden_states: Any, kwargs: dict[str, Any]) -> bytes | None:
        """The cache key of a call to the first layer, or None where it must run as it is."""
        import torch

        if hidden_states.requires_grad or kwargs.get("past_key_values") is not None or kwargs.get("use_cache"):
            return None
        digest = hashlib.blake2b(digest_size=32)
        digest.update(f"{torch.is_autocast_enabled('cpu')}{torch.get_autocast_dtype('cpu')}"
                      f"{torch.is_autocast_enabled('cuda')}{torch.get_autocast_dtype('cuda')}{hidden_states.device}".encode())
        for tensor in (hidden_states, kwargs.get("attention_mask"), kwargs.get("position_ids")):
            _tensor_digest(digest, tensor)
        return digest.digest()

    def first(self, original: Any) -> Any:
        def forward(hidden_states: Any, *args: Any, **kwargs: Any) -> Any:
            key = self.key(hidden_states, kwargs) if not args else None
            if key is not None and key in self._store:
                self.hits += 1
                self._skipping, self._pending = True, None
                return self._store[key].clone()
            self._skipping, self._pending = False, key
            self.misses += key is not None
            return original(hidden_states, *args, **kwargs)

        return forward

    def middle(self, original: Any) -> Any:
        def forward(hidden_states: Any, *args: Any, **kwargs: Any) -> Any:
            return hidden_states if self._skipping else original(hidden_states, *args, **kwargs)

        return forward

    def last(self, original: Any) -> Any:
        def forward(hidden_states: Any, *args: Any, **kwargs: Any) -> Any:
            if self._skipping:
                self._skipping = False
                return hidden_states
            output = original(hidden_states, *args, **kwargs)
            key, self._pending = self._pending, None
            size = output.numel() * output.element_size()
            if key is not None and self.kept_bytes + size <= self.max_bytes:
                self._store[key] = output.detach().clone()
                self.kept_bytes += size
            return output

        return forward

    def install(self) -> None:
        """Route the layers' forwards through the cache (the modules and their weights stay as they are)."""
        if len(self.layers) < 2:
            raise ValueError("a cache of frozen layers needs at least two layers")
        wrappers = [self.first] + [self.middle] * (len(self.layers) - 2) + [self.last]
        for layer, wrap in zip(self.layers, wrappers):
            layer.forward = wrap(layer.forward)

    def remove(self) -> None:
        """The layers' own forwards back, and the kept states freed."""
        for layer in self.layers:
            layer.__dict__.pop("forward", None)
        self._store.clear()
        self.kept_bytes = 0


@contextmanager
def cache_frozen_layers(model: Any, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Iterator[FrozenLayersCache | None]:
    """Within the block, `model`'s frozen bottom layers (`frozen_bottom_layers`) hand up a row's
    hidden state from a cache after its first pass; yields the cache, or None where fewer than two
    layers are frozen (all layers trained, or dropout in them) and nothing changes."""
    frozen = _frozen_bottom(model)
    if len(frozen) < 2 or any("forward" in layer.__dict__ for layer in frozen):
        if len(frozen) >= 2:
            logger.warning("frozen layers not cached: their forward is already replaced on the instance")
        yield None
        return
    cache = FrozenLayersCache(frozen, max_bytes=max_bytes)
    cache.install()
    try:
        yield cache
    finally:
        cache.remove()
