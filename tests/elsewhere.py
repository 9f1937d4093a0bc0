"""A second device on a CPU-only machine, so that device bugs fail in every CI run.

``Elsewhere`` is a tensor subclass that holds a CPU tensor but reports the ``meta`` device; ``elsewhere()`` (a
``TorchDispatchMode``) computes every op on the CPU tensors inside and re-wraps the result. What a GPU would
refuse, it refuses, and a little more strictly:

- mixing devices: an op whose tensor arguments are on ``Elsewhere`` and on the CPU raises (torch lets a 0-dim
  CPU tensor through as a scalar; so does this), including the ``meta @ cpu`` product that the plain ``meta``
  device computes silently;
- reading to the host in the middle: ``.numpy()`` raises (a non-CPU tensor), as on CUDA; ``.item()``,
  ``.tolist()`` and ``bool()`` raise too when ``strict=True`` (a host synchronisation on a hot path);
- ``.cpu()`` / ``.to("cpu")`` give the real numbers back, so whatever runs after the final transfer computes
  the same numbers as on the CPU: records made on ``Elsewhere`` can be compared with records made on the CPU.

Factories given ``device="meta"`` (or a tensor's ``.device``) inside the mode make ``Elsewhere`` tensors;
``to_elsewhere(model)`` moves a module's parameters and buffers there.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

ELSEWHERE = torch.device("meta")
aten = torch.ops.aten
SYNCS = {aten._local_scalar_dense.default, aten.is_nonzero.default, aten.equal.default}
# CUDA takes CPU index tensors (integer or boolean) for indexing a CUDA tensor: so does Elsewhere
INDEXING = {aten.index.Tensor, aten.index_put_.default, aten.index_put.default, aten._index_put_impl_.default}


class DeviceMix(RuntimeError):
    """An op was given tensors on two devices (what CUDA raises as 'Expected all tensors to be on the same device')."""


class HostRead(RuntimeError):
    """A value was read to the host where a GPU would synchronise (``strict=True``)."""


class Elsewhere(torch.Tensor):
    """A CPU tensor ``inner`` that reports the ``meta`` device (see the module docstring)."""

    inner: torch.Tensor

    @staticmethod
    def __new__(cls, inner: torch.Tensor):
        assert not isinstance(inner, Elsewhere) and inner.device.type == "cpu", (type(inner), inner.device)
        out = torch.Tensor._make_wrapper_subclass(cls, inner.shape, strides=inner.stride(), dtype=inner.dtype,
                                                  device=ELSEWHERE, requires_grad=inner.requires_grad,
                                                  storage_offset=inner.storage_offset())
        out.inner = inner
        return out

    def __repr__(self) -> str:
        return f"Elsewhere({self.inner!r})"

    def __tensor_flatten__(self):
        return ["inner"], None

    @staticmethod
    def __tensor_unflatten__(inner_tensors, meta, outer_size, outer_stride):
        return Elsewhere(inner_tensors["inner"])

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in HOST_METHODS:
            return _host_method(func, args[0])
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _run(func, args, kwargs or {}, strict=_STATE["strict"])


_STATE: dict = {"strict": False}
HOST_METHODS = (torch.Tensor.numpy, torch.Tensor.tolist)


def _host_method(func, x: Elsewhere):
    """``.numpy()`` raises as on CUDA; ``.tolist()`` reads the numbers (a host read: counted or refused if strict)."""
    if func is torch.Tensor.numpy:
        raise TypeError(f"can't convert {ELSEWHERE.type} device type tensor to numpy. Use Tensor.cpu() to copy "
                        "the tensor to host memory first.")
    if _STATE["strict"] is not False:
        _host_read("tolist() reads an Elsewhere tensor to the host (a GPU synchronisation)")
    return x.inner.tolist()


def _host_read(message: str) -> None:
    """Raise ``HostRead``, or with ``strict`` a list, append the caller's place in expattn's code to it."""
    if not isinstance(_STATE["strict"], list):
        raise HostRead(message)
    import traceback

    frames = [f for f in traceback.extract_stack() if "/expattn/" in f.filename]
    _STATE["strict"].append(f"{frames[-1].filename.split('/expattn/')[-1]}:{frames[-1].name}" if frames else "?")


def _is_here(device) -> bool:
    return device is not None and torch.device(device).type == ELSEWHERE.type


def _run(func, args, kwargs, strict: bool | list):
    flat, _ = tree_flatten((args, kwargs))
    tensors = [t for t in flat if isinstance(t, torch.Tensor)]
    there = [t for t in tensors if isinstance(t, Elsewhere)]
    if there:
        if func in SYNCS and strict is not False:
            _host_read(f"{func} reads an Elsewhere tensor to the host (a GPU synchronisation)")
        mixed = [t for t in tensors if not isinstance(t, Elsewhere) and t.dim() > 0
                 and not (func in INDEXING and (t.dtype == torch.bool or not t.is_floating_point()))]
        if mixed and func not in (aten.copy_.default, aten._to_copy.default, aten.to.dtype_layout,
                                  aten.set_.source_Tensor):
            raise DeviceMix(f"{func}: tensors on {ELSEWHERE.type} and {mixed[0].device} (shape "
                            f"{tuple(mixed[0].shape)})")
        if func is aten.copy_.default and not isinstance(args[0], Elsewhere) and args[0].dim() > 0:
            args[0].copy_(args[1].inner)  # host <- device copy (what .cpu() / non_blocking reads do)
            return args[0]
    # where does the result go?
    target = kwargs.get("device")
    to_host = func is aten._to_copy.default and target is not None and torch.device(target).type == "cpu"
    to_here = _is_here(target)
    if func is aten._to_copy.default and target is None:
        to_here = bool(there)
    unwrapped_args = tree_map(lambda t: t.inner if isinstance(t, Elsewhere) else t, args)
    unwrapped_kwargs = tree_map(lambda t: t.inner if isinstance(t, Elsewhere) else t, kwargs)
    if to_here:
        unwrapped_kwargs = {**unwrapped_kwargs, "device": torch.device("cpu")}
    if func is aten.copy_.default and isinstance(args[0], Elsewhere) and not isinstance(args[1], Elsewhere):
        pass  # device <- host copy: fine
    out = func(*unwrapped_args, **unwrapped_kwargs)
    first = args[0] if args else None
    if isinstance(first, Elsewhere) and func._schema.is_mutable and (
            first.shape != first.inner.shape or first.stride() != first.inner.stride()):
        # an in-place op that changed the shape (squeeze_, t_...): the wrapper's own (meta) metadata follows
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.Python)):
            func(first, *tree_map(lambda t: torch.empty_like(t, device="meta") if isinstance(t, torch.Tensor)
                                  else t, args[1:]), **kwargs)
        return first
    if to_host:
        return out
    if there or to_here:
        return tree_map(lambda t: Elsewhere(t) if isinstance(t, torch.Tensor) and not isinstance(t, Elsewhere)
                        and t.device.type == "cpu" else t, out)
    return out


class _Mode(TorchDispatchMode):
    def __init__(self, strict: bool | list):
        super().__init__()
        self.strict = strict

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return _run(func, args, kwargs or {}, strict=_STATE["strict"])


class _Factories(torch.overrides.TorchFunctionMode):
    """``torch.tensor(data, device=...)`` and its kin build their tensor below the dispatcher: made here."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.tensor, torch.as_tensor, torch.asarray) and _is_here(kwargs.get("device")):
            return Elsewhere(func(*args, **{**kwargs, "device": torch.device("cpu")}))
        if func in HOST_METHODS and isinstance(args[0], Elsewhere):
            return _host_method(func, args[0])
        return func(*args, **kwargs)


@contextmanager
def elsewhere(strict: bool | list = False):
    """Within: factories on ``meta`` make ``Elsewhere`` tensors and every op checks its devices (module docstring).
    ``strict``: ``.item()``, ``.tolist()`` and ``bool()`` of an ``Elsewhere`` tensor raise ``HostRead`` too; a list:
    each such read appends its place (``file:function`` in expattn) to it instead (a census of synchronisations)."""
    before = _STATE["strict"]
    _STATE["strict"] = strict
    try:
        with _Factories(), _Mode(strict):
            yield
    finally:
        _STATE["strict"] = before


def to_elsewhere(value):
    """A tensor, or a module's parameters and buffers in place, moved to ``Elsewhere`` (returns it)."""
    if isinstance(value, torch.Tensor):
        return value if isinstance(value, Elsewhere) else Elsewhere(value.detach() if not value.requires_grad
                                                                    else value)
    with elsewhere():
        return value.to(ELSEWHERE)
