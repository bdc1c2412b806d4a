"""Named hook points and the two ways to use them (TransformerLens's design).

A :class:`HookPoint` is an identity module: model code routes each interesting tensor
through one, once, and its module path is its name (``blocks.0.attn.hook_pattern``;
:mod:`lengthgen_lite.core.model` lists every name of the book's model). Nothing in a
forward pass branches on recording: :func:`run_with_cache` records and
:func:`run_with_hooks` intervenes from outside, through :func:`hooks_installed`, which
removes every hook on exit (hooks are global state on the model). Chapter 1 introduces
them; chapter 5 freezes a norm's divisor with them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager

import torch
from torch import Tensor, nn


class HookPoint(nn.Module):
    """Identity: a named place where :func:`run_with_cache` records a tensor and
    :func:`run_with_hooks` may replace it."""

    def forward(self, x: Tensor) -> Tensor:
        return x

    @property
    def hooked(self) -> bool:
        """True while a hook is registered here (a recording or an intervention)."""
        return bool(self._forward_hooks or self._forward_pre_hooks)


def hook_names(model: nn.Module) -> list[str]:
    """Every recordable activation of ``model``, by its module path."""
    return [
        name for name, module in model.named_modules() if isinstance(module, HookPoint)
    ]


# (activation, hook name) -> replacement or None
HookFn = Callable[[Tensor, str], "Tensor | None"]


def _hook_points(model: nn.Module, names: Iterable[str]) -> dict[str, HookPoint]:
    """The hook points called ``names``; ValueError listing the valid names if one is
    unknown."""
    points = {name: m for name, m in model.named_modules() if isinstance(m, HookPoint)}
    if unknown := set(names) - set(points):
        raise ValueError(
            f"unknown activation names {sorted(unknown)}; this model has {list(points)}"
        )
    return points


@contextmanager
def hooks_installed(
    model: nn.Module,
    hooks: Mapping[str, HookFn] | None = None,
    record: Iterable[str] | None = (),
) -> Iterator[dict[str, Tensor]]:
    """While open, ``hooks[name](activation, name)`` runs at each named hook point and
    replaces the activation if it returns a tensor (None: keep it); the activations
    named in ``record`` (None: all) are recorded, after any replacement, into the dict
    it yields. Everything is removed on exit, also when the body raises."""
    hooks = dict(hooks or {})
    for name, fn in hooks.items():
        if not callable(fn):
            raise ValueError(
                f"the hook for {name!r} must be callable (activation, name), got {fn!r}"
            )
    wanted = hook_names(model) if record is None else list(record)
    points = _hook_points(model, [*hooks, *wanted])
    cache: dict[str, Tensor] = {}

    def intervene(name: str, fn: HookFn) -> Callable[..., Tensor | None]:
        def hook(_module: nn.Module, _inputs: object, out: Tensor) -> Tensor | None:
            new = fn(out, name)
            if new is not None and not isinstance(new, Tensor):
                raise ValueError(
                    f"the hook for {name!r} returned {type(new).__name__}; "
                    "return a Tensor or None"
                )
            return new

        return hook

    def store(name: str) -> Callable[..., None]:
        return lambda _module, _inputs, out: cache.__setitem__(name, out.detach())

    # Interventions first: a hook point's recording sees the replaced activation.
    handles = [
        points[name].register_forward_hook(intervene(name, fn))
        for name, fn in hooks.items()
    ]
    handles += [points[name].register_forward_hook(store(name)) for name in wanted]
    try:
        yield cache
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


@torch.no_grad()
def run_with_cache(
    model: nn.Module,
    inputs: Tensor,
    names: Iterable[str] | None = None,
    hooks: Mapping[str, HookFn] | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Run ``model`` once in eval mode; return (logits, {name: activation}) for
    ``names`` (None: all).

    ``hooks`` (optional) intervene as in :func:`run_with_hooks`; the cache holds what
    they return. Hooks are removed on exit, also when the forward pass raises.
    """
    with _eval_mode(model), hooks_installed(model, hooks, record=names) as cache:
        logits = model(inputs)
    return logits, cache


@torch.no_grad()
def run_with_hooks(
    model: nn.Module, inputs: Tensor, hooks: Mapping[str, HookFn]
) -> Tensor:
    """Run ``model`` once in eval mode with interventions; return its logits.

    ``hooks`` maps hook names (:func:`hook_names`) to functions ``fn(activation, name)``
    that return a replacement tensor, or None to leave the activation as it is
    (TransformerLens's convention). An unknown name raises ValueError listing the valid
    ones. The hooks are removed
    afterwards, also when the forward pass raises. Example, chapter 5's frozen divisor::

        run_with_hooks(
            model, tokens, {"blocks.0.ln1.hook_scale": lambda s, _: torch.tensor(2.0)}
        )
    """
    with _eval_mode(model), hooks_installed(model, hooks):
        return model(inputs)
