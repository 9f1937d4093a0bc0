r"""Named hook points: identity modules at which forward hooks read (or replace) a tensor.

As in TransformerLens, every intermediate worth studying has a stable dotted name. A pre-norm
block at depth $i$,

$$h = x + \mathrm{Attn}(N_1 z), \qquad \mathrm{out} = h + \mathrm{MLP}(N_2 h)$$

($z = x$, or the fixed point $z^\star$ of an implicit layer), passes its tensors ``(batch, token,
dim)`` through the points ``blocks.{i}.<point>`` in the probe's vocabulary
(``expattn.probes.models.adapters``), in this order:

- ``input`` = $x$; ``norm1.input`` = $z$; ``norm1.output``, then ``attn.input`` = $N_1 z$;
- ``attn.heads``: the concatenated head outputs (what the output projection reads);
- ``attn.output`` = $\mathrm{Attn}(N_1 z)$ as added to the stream; ``attn.residual`` = $h$;
- ``norm2.input`` = $h$; ``norm2.output``, then ``mlp.input`` = $N_2 h$;
- ``mlp.output`` = $\mathrm{MLP}(N_2 h)$ as added to the stream; ``output`` = the block's output.

Names that alias one tensor (``norm1.output`` and ``attn.input``...) are separate points applied
one after the other, so a hook on either sees it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from torch import Tensor, nn
from torch.nn.modules.module import _global_forward_hooks, _global_forward_pre_hooks

BLOCK_POINTS = (
    "input", "norm1.input", "norm1.output", "attn.input", "attn.heads", "attn.output", "attn.residual",
    "norm2.input", "norm2.output", "mlp.input", "mlp.output", "output",
)


class HookPoint(nn.Identity):
    """An identity module with a stable name: register forward hooks on it to read a tensor.

    Args:
        name: its dotted name (``blocks.3.attn.output``); ``""`` for a point named by its module path.
    """

    def __init__(self, name: str = "") -> None:
        super().__init__()
        self.name = name

    def hooked(self) -> bool:
        """Whether a forward or forward-pre hook sits on this point (its own, or a global module hook)."""
        own = self._forward_hooks or self._forward_pre_hooks
        return bool(own or _global_forward_hooks or _global_forward_pre_hooks)


class BlockHooks(nn.Module):
    """The points ``BLOCK_POINTS`` of one depth, named ``{prefix}.{point}``.

    They are nested modules, so ``hooks.get_submodule("attn.output")`` is the point
    ``{prefix}.attn.output``; ``points`` lists them in ``BLOCK_POINTS`` order. No parameters.

    Args:
        prefix: the depth's name, e.g. ``blocks.3``.
    """

    def __init__(self, prefix: str) -> None:
        super().__init__()
        for point in BLOCK_POINTS:
            parent: nn.Module = self
            *path, leaf = point.split(".")
            for part in path:
                if not hasattr(parent, part):
                    parent.add_module(part, nn.Module())
                parent = getattr(parent, part)
            parent.add_module(leaf, HookPoint(f"{prefix}.{point}"))
        self.points: tuple[HookPoint, ...] = tuple(self.get_submodule(p) for p in BLOCK_POINTS)
        # the points' own hook tables (torch registers and removes hooks in place): one ``any`` reads them all
        self._hook_tables = tuple(t for p in self.points for t in (p._forward_hooks, p._forward_pre_hooks))

    def hooked(self) -> bool:
        """Whether any point of this depth carries a hook (``HookPoint.hooked`` of each; asked every forward)."""
        return bool(_global_forward_hooks or _global_forward_pre_hooks or any(self._hook_tables))


@contextmanager
def cached(points: Iterable[HookPoint]) -> Iterator[dict[str, Tensor]]:
    """Inside the block, each tensor passing one of ``points`` is kept, detached, under the point's name.

    ``with cached(lm.hook_points().values()) as cache: lm(idx)`` fills ``cache["blocks.0.attn.output"]``...
    (a point passed twice keeps its last tensor). The hooks are removed on exit.
    """
    cache: dict[str, Tensor] = {}
    handles = [p.register_forward_hook(lambda m, _args, out: cache.__setitem__(m.name, out.detach())) for p in points]
    try:
        yield cache
    finally:
        for handle in handles:
            handle.remove()


def _through(x: Tensor) -> Tensor:
    return x


UNHOOKED = (_through,) * len(BLOCK_POINTS)  # the points of a call no one observes (a solver's iterates)
