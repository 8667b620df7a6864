"""What a model is made of: its repeated blocks, its output head and its tied parameters.

Transforms that work per block (activation checkpointing, regional compile, FSDP2 units) or on
the head (the chunked linear + cross-entropy) need to find those parts in real models, whose
names differ: ``transformer.h`` in GPT-2, ``model.layers`` in Llama, ``vit.encoder.layer`` in
ViT, ``resnet.encoder.stages`` in ResNet, ``blocks`` in the built-in workloads. The rules:

* blocks: every ``nn.ModuleList`` / ``nn.Sequential`` whose children all have the same class
  (and hold parameters) is a candidate; so is the longest run of two or more consecutive
  same-class children of a mixed one (``nn.Sequential(*blocks, head)``, as small scripts
  write). A candidate nested inside another one (the two convolutions of a ResNet layer
  inside a stage) never competes with it. Among the outermost candidates the longest
  wins; a tie for the longest is ambiguous and nothing is guessed: the error lists what was
  found, and ``Workload(blocks="path")`` names the one to use;
* head: ``model.get_output_embeddings()`` where the model has it (Hugging Face models), else
  the last ``nn.Linear`` in module order;
* tied parameters: the names under which one parameter object is registered more than once
  (GPT-2's ``transformer.wte.weight`` and ``lm_head.weight``).

This module sits at the bottom of the house: it imports torch and ``torchsmith.text`` only.

Example::

    s = discover(model)                        # a GPT2LMHeadModel
    s.blocks_path, len(s.blocks)               # ('transformer.h', 4)
    s.head_path, s.tied                        # ('lm_head', [('transformer.wte.weight', 'lm_head.weight')])
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

BlockContainer = nn.ModuleList | nn.Sequential
"""What holds a model's repeated blocks."""

__all__ = ["ModelStructure", "StructureError", "discover", "set_hint", "HINT_ATTR"]

HINT_ATTR = "_torchsmith_structure"
"""Instance attribute holding ``(blocks_path, head_path)`` named by the workload (either may be None).
``torchsmith.workload.Workload`` sets it on each model its factory builds (same literal there)."""


class StructureError(ValueError):
    """The model's blocks or head cannot be found, or were named wrongly. The message lists what was found."""


@dataclass(frozen=True, kw_only=True)
class ModelStructure:
    """The parts of one model that the per-block and per-head transforms act on."""

    blocks_path: str | None
    """Dotted path of the repeated blocks' container (``"transformer.h"``); None if none was found."""
    blocks: BlockContainer | None
    """That ``nn.ModuleList`` / ``nn.Sequential``; ``blocks[i]`` is one block."""
    head_path: str | None
    """Dotted path of the output head (``"lm_head"``, ``"classifier.1"``); None without a Linear head."""
    head: nn.Module | None
    tied: list[tuple[str, ...]] = field(default_factory=list)
    """Parameter names that share one tensor, one tuple per shared parameter, in registration order."""
    block_range: tuple[int, int] | None = None
    """``(start, stop)``: the blocks are ``blocks[start:stop]`` (a run inside a mixed container);
    None means every child of ``blocks``."""
    candidates: tuple[str, ...] = ()
    """Every block container found, outermost first, e.g. ``"transformer.h (4 x GPT2Block)"``."""
    problem: str | None = None
    """Why ``blocks`` is None (ambiguous, nothing found, a named path that is not a container)."""

    def block_items(self, what: str) -> list[tuple[str, nn.Module]]:
        """``[(path, block), ...]`` for the transform called ``what``, or a StructureError saying why not.

        >>> discover(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))).block_items("checkpointing")[0][0]
        '0'
        """
        if self.blocks is None:
            raise StructureError(
                f"{what} needs the model's repeated blocks; {self.problem}\n"
                "Tip: name them in the workload, e.g. Workload(..., blocks='model.layers'), or leave this knob off."
            )
        prefix = f"{self.blocks_path}." if self.blocks_path else ""
        start, stop = self.block_range or (0, len(self.blocks))
        return [(f"{prefix}{i}", self.blocks[i]) for i in range(start, stop)]


def set_hint(model: nn.Module, *, blocks: str | None = None, head: str | None = None) -> nn.Module:
    """Record which blocks and head :func:`discover` should use for ``model``; returns the model.

    >>> m = set_hint(nn.Sequential(nn.Linear(2, 2)), blocks="")
    >>> discover(m).blocks_path
    ''
    """
    if blocks is not None or head is not None:
        model.__dict__[HINT_ATTR] = (blocks, head)
    return model


def discover(model: nn.Module, *, blocks: str | None = None, head: str | None = None) -> ModelStructure:
    """Find ``model``'s repeated blocks, output head and tied parameters.

    ``blocks`` / ``head`` name the parts explicitly (dotted paths; ``""`` is the model itself);
    otherwise a hint set by the workload (:func:`set_hint`) is used, then the discovery rules
    of this module. A wrongly named path raises StructureError listing what was found; an
    ambiguous discovery does not raise here, it leaves ``blocks`` None with ``problem`` set,
    so that transforms needing only the head still apply.

    >>> discover(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))).head_path
    '2'
    """
    hint_blocks, hint_head = model.__dict__.get(HINT_ATTR, (None, None))
    blocks = blocks if blocks is not None else hint_blocks
    head = head if head is not None else hint_head
    found = _candidates(model)
    listed = tuple(_describe(*candidate) for candidate in found)
    problem, block_range = None, None
    if blocks is not None:
        named = _named(model, blocks, "blocks", listed)
        if not isinstance(named, (nn.ModuleList, nn.Sequential)) or len(named) == 0:
            raise StructureError(
                f"blocks={blocks!r} names a {type(named).__name__}"
                f"{' of length 0' if isinstance(named, (nn.ModuleList, nn.Sequential)) else ''}; "
                f"expected a non-empty nn.ModuleList or nn.Sequential. Found: {', '.join(listed) or 'none'}.\n"
                "Tip: name the container of the repeated layers, e.g. 'model.layers'."
            )
        container: BlockContainer | None = named
        blocks_path: str | None = blocks
    else:
        container, blocks_path, block_range, problem = _pick(found, listed, type(model).__name__)
    if head is not None:
        head_module: nn.Module | None = _named(model, head, "head", listed)
        head_path: str | None = head
    else:
        head_path, head_module = _find_head(model)
    return ModelStructure(blocks_path=blocks_path, blocks=container, head_path=head_path, head=head_module,
                          tied=_tied(model), block_range=block_range, candidates=listed, problem=problem)


def _named(model: nn.Module, path: str, what: str, listed: tuple[str, ...]) -> nn.Module:
    try:
        return model.get_submodule(path)
    except AttributeError:
        raise StructureError(
            f"{what}={path!r} is not a submodule of {type(model).__name__}. "
            f"Block containers found: {', '.join(listed) or 'none'}.\n"
            "Tip: use a dotted path from model.named_modules(), e.g. 'transformer.h'."
        ) from None


_Candidate = tuple[str, BlockContainer, tuple[int, int]]
"""(path, container, (start, stop)): the run of same-class children that would be the blocks."""


def _candidates(model: nn.Module) -> list[_Candidate]:
    """Outermost containers of same-class children, in module order (nested ones are dropped)."""
    out: list[_Candidate] = []
    for path, module in model.named_modules():
        if not isinstance(module, (nn.ModuleList, nn.Sequential)) or len(module) == 0:
            continue
        run = _longest_run(module)
        if run is None:
            continue
        # named_modules walks parents before children: a path under a kept one is nested in it.
        if any(path.startswith(f"{p}.") or p == "" for p, _, _ in out):
            continue
        out.append((path, module, run))
    return out


def _longest_run(container: BlockContainer) -> tuple[int, int] | None:
    """``(start, stop)`` of the longest run of consecutive same-class children holding parameters:
    the whole container when all children share a class, else a run of at least two (the blocks
    of ``nn.Sequential(*blocks, head)``); None when there is none (e.g. a stack of activations)."""
    children = list(container)
    best: tuple[int, int] | None = None
    start = 0
    for i in range(1, len(children) + 1):
        if i == len(children) or type(children[i]) is not type(children[start]):
            if next(children[start].parameters(), None) is not None and (best is None or i - start > best[1] - best[0]):
                best = (start, i)
            start = i
    if best is None or (best[1] - best[0] < 2 and best != (0, len(children))):
        return None
    return best


def _describe(path: str, module: BlockContainer, run: tuple[int, int]) -> str:
    where = path or "<model>"
    if run != (0, len(module)):
        where += f"[{run[0]}:{run[1]}]"
    return f"{where} ({run[1] - run[0]} x {type(module[run[0]]).__name__})"


def _pick(found: list[_Candidate], listed: tuple[str, ...],
          model_name: str) -> tuple[BlockContainer | None, str | None, tuple[int, int] | None, str | None]:
    if not found:
        return None, None, None, (f"{model_name} has no nn.ModuleList or nn.Sequential of same-class layers "
                                  "(searched the whole module tree).")
    longest = max(stop - start for _, _, (start, stop) in found)
    best = [c for c in found if c[2][1] - c[2][0] == longest]
    if len(best) > 1:
        return None, None, None, (f"{model_name} has {len(best)} block containers of the same length {longest}, "
                                  f"so which one is meant is ambiguous. Found: {', '.join(listed)}.")
    path, module, run = best[0]
    return module, path, (None if run == (0, len(module)) else run), None


def _find_head(model: nn.Module) -> tuple[str | None, nn.Module | None]:
    get = getattr(model, "get_output_embeddings", None)
    head = None
    if callable(get):
        try:
            head = get()
        except (NotImplementedError, AttributeError):
            head = None
    if isinstance(head, nn.Module):
        for path, module in model.named_modules():
            if module is head:
                return path, module
    last: tuple[str | None, nn.Module | None] = (None, None)
    for path, module in model.named_modules():
        if isinstance(module, nn.Linear):
            last = (path, module)
    return last


def _tied(model: nn.Module) -> list[tuple[str, ...]]:
    names: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(name)
    return [tuple(v) for v in names.values() if len(v) > 1]
