"""shapejit.optimize(model): swaps every supported torch.nn.EmbeddingBag, quantized
torch.ao.nn.quantized.EmbeddingBag and torch.nn.MultiheadAttention of a model (and TorchRec's
embedding-bag collections, when the user has imported torchrec) for its shapejit module, then
groups sibling bag calls into shapejit.EmbeddingBagGroup calls (bag_grouping.py), and reports
what it swapped, grouped and left alone, with the reason."""
import copy
import sys
from typing import Dict, List, NamedTuple, Optional

import torch

from . import bag_grouping
from .attention import MultiheadAttention
from .bag_grouping import Group
from .modules import EmbeddingBag, QuantizedEmbeddingBag


class Swap(NamedTuple):
    name: str      # the module's path in the model ("" for the model itself)
    was: str       # the torch class
    now: str       # the shapejit class
    note: str      # "" or what the user should know about this swap


class Skip(NamedTuple):
    name: str
    kind: str
    reason: str


class Report:
    """What optimize() did: `swapped` and `skipped` lists, the bag `groups` (and `grouping`, why
    bags were not grouped, "" when they were or there were none), and `renamed_keys`, the
    state_dict keys grouping moved (old key -> new key; a key that maps to None is gone:
    torch.fx keeps only what forward uses); str(report) is a readable table."""

    def __init__(self):
        self.swapped: List[Swap] = []
        self.skipped: List[Skip] = []
        self.groups: List[Group] = []
        self.grouping = ""
        self.renamed_keys: Dict[str, Optional[str]] = {}

    def __str__(self):
        lines = ["shapejit.optimize: {} swapped, {} skipped, {} bag groups".format(
            len(self.swapped), len(self.skipped), len(self.groups))]
        for s in self.swapped:
            lines.append("  swapped {} ({} -> {}){}".format(s.name or "<model>", s.was, s.now,
                                                           ": " + s.note if s.note else ""))
        for s in self.skipped:
            lines.append("  skipped {} ({}): {}".format(s.name or "<model>", s.kind, s.reason))
        for g in self.groups:
            lines.append("  grouped {} as {}{}{}".format(", ".join(g.members), g.name,
                                                         " (concatenated in place of their torch.cat run)" if g.concat else "",
                                                         ": " + g.note if g.note else ""))
        if self.grouping:
            lines.append("  bags not grouped: " + self.grouping)
        return "\n".join(lines)

    __repr__ = __str__


class Optimized(NamedTuple):
    model: torch.nn.Module
    report: Report


_FLOAT_TABLES = (torch.float32, torch.float16, torch.bfloat16)
_FUSED_PATH_NOTE = ("inside {}: in eval mode with batch_first, no grad and no src_mask, the layer's fused "
                    "path reads these parameters itself and does not call the module")


def _refusal(module: torch.nn.Module) -> Optional[str]:
    """Why `module` (a candidate type) cannot be swapped, or None."""
    if module._forward_hooks or module._forward_pre_hooks:
        return "it has forward hooks, which the swap would drop"
    if type(module) is torch.nn.EmbeddingBag:
        w = module.weight
        if w.device.type != "cpu":
            return "its weight is on {}, shapejit runs on the CPU".format(w.device)
        if w.dtype not in _FLOAT_TABLES:
            return "its weight is {}, shapejit takes float32, float16 or bfloat16 tables".format(w.dtype)
        return None
    if type(module) is torch.nn.MultiheadAttention:
        if module.training:  # bags train bit for bit as torch's (their backward is torch's); this does not
            return ("in training mode: shapejit's in-projection rounds differently from torch's (within the "
                    "split-GEMM bound), so training would not follow torch's bit for bit; optimize the model in "
                    "eval mode, or swap it by hand (shapejit.MultiheadAttention.from_torch)")
        for name, p in module.named_parameters(recurse=False):
            if p.device.type != "cpu" or p.dtype != torch.float32:
                return "{} is {} on {}, shapejit's in-projection takes float32 CPU tensors".format(
                    name, p.dtype, p.device)
        return None
    return None  # quantized bags: from_torch names what it refuses


def _torchrec_collections() -> tuple:
    """TorchRec's EmbeddingBagCollection and QuantEBC classes when the user's program has imported
    torchrec, else (): optimize never imports torchrec itself (it is large and optional)."""
    if "torchrec" not in sys.modules:
        return ()
    from torchrec.modules.embedding_modules import EmbeddingBagCollection
    try:  # the quantized collection also needs fbgemm_gpu's inference modules
        from torchrec.quant.embedding_modules import EmbeddingBagCollection as QuantEmbeddingBagCollection
    except ImportError:
        return (EmbeddingBagCollection,)
    return (EmbeddingBagCollection, QuantEmbeddingBagCollection)


def _candidate(module: torch.nn.Module) -> bool:
    """An exact torch type shapejit replaces (subclasses may compute something else)."""
    return type(module) in (torch.nn.EmbeddingBag, torch.nn.MultiheadAttention,
                            torch.ao.nn.quantized.EmbeddingBag) + _torchrec_collections()


def _subclass_of_candidate(module: torch.nn.Module) -> bool:
    own = (EmbeddingBag, QuantizedEmbeddingBag, MultiheadAttention)
    bases = (torch.nn.EmbeddingBag, torch.nn.MultiheadAttention, torch.ao.nn.quantized.EmbeddingBag)
    return isinstance(module, bases) and not isinstance(module, own) and not _candidate(module)


def _convert(module: torch.nn.Module) -> torch.nn.Module:
    if type(module) is torch.nn.MultiheadAttention:
        return MultiheadAttention.from_torch(module)
    if type(module) in _torchrec_collections():
        from .torchrec import EmbeddingBagCollection as Collection  # torchrec is imported already
        return Collection.from_torchrec(module)
    return EmbeddingBag.from_torch(module)  # float or quantized bags


def optimize(model: torch.nn.Module, inplace: bool = False, group_bags: bool = True) -> Optimized:
    """Replaces every supported torch.nn.EmbeddingBag, torch.ao.nn.quantized.EmbeddingBag and
    torch.nn.MultiheadAttention in `model` (recursively, the model itself included) by the
    shapejit module computing the same results, sharing its parameters. When the program has
    imported torchrec, TorchRec's EmbeddingBagCollection and quantized EmbeddingBagCollection
    are replaced too, by shapejit.torchrec.EmbeddingBagCollection (the float one shares its
    weights and trains alike; the quantized one holds its tables repacked).

    Returns (model, report): with inplace=False (the default) `model` is a deep copy and the
    argument is untouched; with inplace=True the argument itself is changed (its modules swapped)
    and returned, unless bags were grouped: then the GraphModule over its modules is returned.
    Only the exact torch classes are swapped (a subclass may compute something else); a module
    reached through several paths is converted once and stays shared. A model in training mode
    trains exactly as before: its bags are swapped (their gradients are torch's, bit for bit),
    its MultiheadAttention modules in training mode are not (their forward rounds differently).

    With group_bags (the default), the swapped model is then traced with torch.fx and bag calls
    that do not depend on each other's outputs become one shapejit.EmbeddingBagGroup call (and
    a run of their outputs in a torch.cat(..., dim=1), used nowhere else, its concat form). When
    a group is formed the returned model is a torch.fx.GraphModule over the same parameters
    (report.renamed_keys says where the grouped bags' keys went); when tracing fails, or the
    model is in training mode and the group has no autograd, the swapped model is returned and
    report.grouping says why.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError("shapejit.optimize: model must be a torch.nn.Module, but got {}".format(type(model).__name__))
    if not inplace:
        model = copy.deepcopy(model)
    report = Report()
    done = {}  # id(old module) -> new module (or the old one when skipped)

    def visit(module: torch.nn.Module, name: str, parent: Optional[torch.nn.Module]) -> torch.nn.Module:
        if id(module) in done:
            return done[id(module)]
        new = module
        if _candidate(module):
            reason = _refusal(module)
            if reason is None:
                try:
                    new = _convert(module)
                except (ValueError, NotImplementedError) as e:  # the converter names the rule
                    reason = str(e)
            if reason is not None:
                report.skipped.append(Skip(name, type(module).__name__, reason))
            else:
                note = ""
                if isinstance(new, MultiheadAttention) and isinstance(parent, torch.nn.TransformerEncoderLayer):
                    note = _FUSED_PATH_NOTE.format(type(parent).__name__)
                report.swapped.append(Swap(name, type(module).__name__, type(new).__name__, note))
        elif _subclass_of_candidate(module):
            report.skipped.append(Skip(name, type(module).__name__,
                                       "a subclass of a supported torch class: its forward may differ"))
        else:
            for child_name, child in list(module._modules.items()):  # every name, shared children too
                if child is None:
                    continue
                replaced = visit(child, name + "." + child_name if name else child_name, module)
                if replaced is not child:
                    setattr(module, child_name, replaced)
        done[id(module)] = new
        return new

    model = visit(model, "", None)
    if group_bags and bag_grouping.has_bag_candidates(model):
        model = _group(model, report)
    return Optimized(model, report)


def _group(model: torch.nn.Module, report: Report) -> torch.nn.Module:
    """The model with its bag calls grouped, or the model itself with report.grouping saying why not."""
    if model.training and not bag_grouping.group_supports_autograd():
        report.grouping = ("the model is in training mode and shapejit.EmbeddingBagGroup passes no gradient to "
                           "the weights (call model.eval() first to group the bags)")
        return model
    before = model.state_dict(keep_vars=True)
    grouped, groups, why = bag_grouping.group_bags(model)
    if grouped is None:
        report.grouping = why
        return model
    after = grouped.state_dict(keep_vars=True)
    key_of = {}  # a tensor -> its first key in the grouped model
    for key, t in after.items():
        key_of.setdefault(id(t), key)
    for key, t in before.items():
        if after.get(key) is not t:
            report.renamed_keys[key] = key_of.get(id(t))
    report.groups = groups
    return grouped
