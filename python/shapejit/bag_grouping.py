"""The whole-model step of shapejit.optimize: trace the model with torch.fx and replace sibling
embedding-bag calls (independent of each other's outputs) by one shapejit.EmbeddingBagGroup call;
where their outputs are a run of a torch.cat(..., dim=1)'s list used nowhere else, the group
writes them side by side itself (EmbeddingBagGroup.concat) and the run leaves the cat.

Every group computes bitwise what its bags computed one by one (EmbeddingBagGroup's contract),
so the rewritten GraphModule gives the model's outputs bit for bit. When tracing fails the model
keeps its per-module swaps and the report says why."""
import inspect
import operator
import warnings
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch.fx import GraphModule, Node, Tracer

from .attention import MultiheadAttention
from .modules import EmbeddingBag, EmbeddingBagGroup, QuantizedEmbeddingBag


class Group(NamedTuple):
    name: str                  # the group's submodule in the rewritten model
    members: Tuple[str, ...]   # the grouped bags' module paths, in the group's order (a path twice: called twice)
    concat: bool               # True: one [B, sum of D] output replaced a run of a torch.cat
    note: str                  # "" or why the outputs were not concatenated by the group


class ConcatenatedEmbeddingBagGroup(EmbeddingBagGroup):
    """An EmbeddingBagGroup whose forward is its concat (the outputs side by side), so a traced
    graph calls it as a module: fx pickles and deep-copies call_module nodes, not method calls
    on a module attribute."""

    def forward(self, inputs: List[torch.Tensor], offsets: Optional[List[Optional[torch.Tensor]]] = None,
                per_sample_weights: Optional[List[Optional[torch.Tensor]]] = None,
                compressed_indices_mappings: Optional[List[Optional[torch.Tensor]]] = None) -> torch.Tensor:
        return self.concat(inputs, offsets, per_sample_weights, compressed_indices_mappings)


_BAG_TYPES = (EmbeddingBag, QuantizedEmbeddingBag)
_LEAF_TYPES = _BAG_TYPES + (MultiheadAttention, EmbeddingBagGroup)
# torch.cat and its aliases (torch.concatenate is newer than torch 1.13).
_CATS = tuple(getattr(torch, name) for name in ("cat", "concat", "concatenate") if hasattr(torch, name))
# Nodes a user of a bag may be moved past (they read, never write, and have no effects).
_REORDERABLE_FUNCTIONS = (operator.getitem, getattr)


class _LeafTracer(Tracer):
    """torch.fx's tracer with shapejit's modules and every module with hooks kept whole (tracing
    through a module would drop its hooks, and shapejit's forwards check their arguments in
    Python, which a traced value cannot answer)."""

    def is_leaf_module(self, m: torch.nn.Module, module_qualified_name: str) -> bool:
        if isinstance(m, _LEAF_TYPES) or m._forward_hooks or m._forward_pre_hooks:
            return True
        return super().is_leaf_module(m, module_qualified_name)


def has_bag_candidates(model: torch.nn.Module) -> bool:
    """Whether two submodules (not the model itself) are bags a group can hold: with fewer there
    is nothing to group, and no reason to trace."""
    return sum(_groupable(m) is None for name, m in model.named_modules(remove_duplicate=False) if name) >= 2


def _groupable(module: torch.nn.Module) -> Optional[str]:
    """Why `module` cannot join a group, or None."""
    if type(module) not in _BAG_TYPES:
        return "not a shapejit bag"
    if module._forward_hooks or module._forward_pre_hooks:
        return "it has forward hooks"
    if type(module) is EmbeddingBag and (module._mode < 0 or module.max_norm is not None):
        return "a setting the group refuses"  # its own call raises the setting's error, or renormalises
    return None


def group_supports_autograd() -> bool:
    """Whether EmbeddingBagGroup's outputs carry a gradient to the bags' weights (asked of the
    group itself, so this follows the installed version)."""
    bag = torch.nn.EmbeddingBag(2, 1)
    with torch.enable_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = EmbeddingBagGroup([bag, bag])([torch.tensor([[0]]), torch.tensor([[1]])])
    return out[0].requires_grad


class _Call(NamedTuple):
    """One bag call of the graph: its node, module path and arguments as the group takes them."""
    node: Node
    target: str
    input: object
    offsets: object
    per_sample_weights: object
    mapping: object
    out_dtype: torch.dtype


def _bag_call(node: Node, module: torch.nn.Module) -> Optional[_Call]:
    try:
        bound = inspect.signature(module.forward).bind(*node.args, **node.kwargs)
    except TypeError:
        return None  # the call itself is wrong: leave it to raise its own error
    bound.apply_defaults()
    a = bound.arguments
    if type(module) is EmbeddingBag:
        return _Call(node, node.target, a["input"], a["offsets"], a["per_sample_weights"], None, module.weight.dtype)
    return _Call(node, node.target, a["indices"], a["offsets"], a["per_sample_weights"],
                 a["compressed_indices_mapping"], torch.float32)


def _bag_ancestors(graph) -> Dict[Node, frozenset]:
    """For every node, the bag-call nodes its value depends on (transitively)."""
    deps: Dict[Node, frozenset] = {}
    for node in graph.nodes:
        acc = frozenset()
        for parent in node.all_input_nodes:
            acc = acc | deps[parent]
            if parent.meta.get("_shapejit_bag"):
                acc = acc | {parent}
        deps[node] = acc
    return deps


def _cat_list_and_dim(node: Node):
    """(the tensor list, dim) of a torch.cat-like call, or None."""
    if node.op != "call_function" or node.target not in _CATS:
        return None
    tensors = node.args[0] if node.args else node.kwargs.get("tensors")
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", node.kwargs.get("axis", 0))
    if not isinstance(tensors, (list, tuple)) or not isinstance(dim, int):
        return None
    return list(tensors), dim


class _Planner:
    """Chooses the groups: first runs of a torch.cat's list (concat form), then the remaining
    bags, first fit into list-form groups of mutually independent calls."""

    def __init__(self, gm: GraphModule):
        self.gm = gm
        self.modules = modules = dict(gm.named_modules())
        self.calls: Dict[Node, _Call] = {}
        for node in gm.graph.nodes:
            if node.op == "call_module" and _groupable(modules[node.target]) is None:
                call = _bag_call(node, modules[node.target])
                if call is not None:
                    self.calls[node] = call
                    node.meta["_shapejit_bag"] = True
        self.deps = _bag_ancestors(gm.graph)
        self.position = {node: i for i, node in enumerate(gm.graph.nodes)}
        self.notes: Dict[Node, str] = {}   # a bag call -> why its output could not join a concat

    def writes_between(self, first: Node, last: Node) -> bool:
        """Whether a node after `first` and before `last` may write a tensor in place."""
        lo, hi = self.position[first], self.position[last]
        return any(lo < self.position[n] < hi and _may_write(n, self.modules) for n in self.gm.graph.nodes)

    def independent(self, node: Node, members: Sequence[Node]) -> bool:
        return all(m not in self.deps[node] and node not in self.deps[m] for m in members)

    def concat_runs(self) -> List[Tuple[Node, List[Node]]]:
        """(cat node, a run of bag calls in its list), the runs disjoint."""
        runs = []
        taken = set()
        for node in self.gm.graph.nodes:
            parsed = _cat_list_and_dim(node)
            if parsed is None or parsed[1] not in (1, -1):
                continue
            tensors = parsed[0]
            run: List[Node] = []

            def close():
                if len(run) < 2:
                    return
                first = min(run, key=self.position.get)
                if self.writes_between(first, node):  # the group runs at the cat
                    for t in run:
                        self.notes[t] = "an in-place operation runs between the bags and their torch.cat"
                    return
                runs.append((node, list(run)))
                taken.update(run)
            for t in tensors:
                ok = isinstance(t, Node) and t in self.calls and t not in taken and t not in run
                if ok and len(t.users) != 1:
                    self.notes[t] = "{}'s output is also used outside the torch.cat".format(t.target)
                    ok = False
                if ok and tensors.count(t) != 1:
                    self.notes[t] = "{}'s output appears twice in the torch.cat".format(t.target)
                    ok = False
                if ok and run and (self.calls[t].out_dtype != self.calls[run[0]].out_dtype
                                   or not self.independent(t, run)):
                    close()
                    run = []
                if ok:
                    run.append(t)
                else:
                    close()
                    run = []
            close()
        return runs

    def list_groups(self) -> List[List[Node]]:
        groups: List[List[Node]] = []
        for node in self.gm.graph.nodes:
            if node not in self.calls:
                continue
            for g in groups:
                if self.independent(node, g) and self._movable(g + [node]):
                    g.append(node)
                    break
            else:
                groups.append([node])
        return [g for g in groups if len(g) >= 2]

    def users_to_move(self, members: Sequence[Node]) -> Optional[List[Node]]:
        """The nodes between the first and the last member that read a member's output (they must
        follow the group call, placed at the last member), or None when moving them past the
        other nodes there could change a result (or a node between them writes in place)."""
        first = min(self.position[m] for m in members)
        last = max(self.position[m] for m in members)
        member_set = set(members)
        if self.writes_between(min(members, key=self.position.get), max(members, key=self.position.get)):
            return None
        moved, stay = [], []
        for node in self.gm.graph.nodes:
            p = self.position[node]
            if p <= first or p >= last or node in member_set:
                continue
            (moved if self.deps[node] & member_set else stay).append(node)
        if moved and not all(_reorderable(n) or n in self.calls for n in stay):
            return None
        return moved

    def _movable(self, members: Sequence[Node]) -> bool:
        return self.users_to_move(members) is not None


_IN_PLACE_OPERATORS = (operator.setitem, operator.delitem, operator.iadd, operator.isub, operator.imul,
                       operator.itruediv, operator.ifloordiv, operator.imod, operator.ipow, operator.iand,
                       operator.ior, operator.ixor, operator.ilshift, operator.irshift, operator.imatmul)


def _may_write(node: Node, modules) -> bool:
    """Whether `node` may change a tensor in place (a bag's input or weight): moving a bag call
    past it could change what the bag reads."""
    if node.op == "call_method":
        name = node.target
    elif node.op == "call_function":
        if node.target in _IN_PLACE_OPERATORS:
            return True
        name = getattr(node.target, "__name__", "")
    elif node.op == "call_module":
        return bool(getattr(modules.get(node.target), "inplace", False))
    else:
        return False
    return name.endswith("_") and not name.startswith("__")


def _reorderable(node: Node) -> bool:
    return node.op in ("placeholder", "get_attr") or (
        node.op == "call_function" and node.target in _REORDERABLE_FUNCTIONS)


def _argument_lists(calls: Sequence[_Call]):
    """The group call's lists (None where every bag has none)."""
    def column(values):
        values = list(values)
        return None if all(v is None for v in values) else values
    return ([c.input for c in calls], column(c.offsets for c in calls),
            column(c.per_sample_weights for c in calls), column(c.mapping for c in calls))


def _free_name(gm: GraphModule, stem: str) -> str:
    k = 0
    while hasattr(gm, "{}_{}".format(stem, k)):
        k += 1
    return "{}_{}".format(stem, k)


def group_bags(model: torch.nn.Module) -> Tuple[Optional[GraphModule], List[Group], str]:
    """(the rewritten model or None, its groups, a note): None with the reason when tracing fails
    or no two bag calls can be grouped."""
    try:
        tracer = _LeafTracer()
        graph = tracer.trace(model)
        gm = GraphModule(tracer.root, graph, type(model).__name__)
    except Exception as e:  # noqa: BLE001  (any tracing failure means: keep the per-module swaps)
        first_line = (str(e).strip().splitlines() or [""])[0]
        return None, [], "torch.fx could not trace the model ({}: {}), so its bags run one by one".format(
            type(e).__name__, first_line)
    groups: List[Group] = []
    grouped_targets = set()
    planner = _Planner(gm)
    notes = planner.notes  # kept: later planners see the graph after the concat rewrite
    for cat, run in planner.concat_runs():
        groups.append(_rewrite_concat(gm, cat, [planner.calls[n] for n in run]))
        grouped_targets.update(n.target for n in run)
    while True:  # one list group at a time, planned on the graph as it now is
        planner = _Planner(gm)
        lists = planner.list_groups()
        if not lists:
            break
        members = lists[0]
        groups.append(_rewrite_list(gm, planner, members, sorted({notes[n] for n in members if n in notes})))
        grouped_targets.update(n.target for n in members)
    for node in gm.graph.nodes:
        node.meta.pop("_shapejit_bag", None)
    if not groups:
        return None, [], "no two bag calls of the traced model are independent of each other"
    _delete_unreferenced(gm, grouped_targets)
    gm.graph.lint()
    gm.recompile()
    return gm, groups, ""


def _add_group(gm: GraphModule, cls, calls: Sequence[_Call]) -> str:
    modules = dict(gm.named_modules())
    name = _free_name(gm, "embedding_bag_group")
    gm.add_submodule(name, cls([modules[c.target] for c in calls]))
    return name


def _rewrite_concat(gm: GraphModule, cat: Node, calls: Sequence[_Call]) -> Group:
    """One group call in place of the run of `calls` in `cat`'s list (the cat goes when nothing else is left)."""
    graph = gm.graph
    name = _add_group(gm, ConcatenatedEmbeddingBagGroup, calls)
    with graph.inserting_before(cat):
        joined = graph.call_module(name, _argument_lists(calls))
    tensors, _ = _cat_list_and_dim(cat)
    start = tensors.index(calls[0].node)
    rest = tensors[:start] + [joined] + tensors[start + len(calls):]
    if len(rest) == 1:
        cat.replace_all_uses_with(joined)
        graph.erase_node(cat)
    elif cat.args:
        cat.args = (rest,) + tuple(cat.args[1:])
    else:
        cat.kwargs = dict(cat.kwargs, tensors=rest)
    for c in calls:
        graph.erase_node(c.node)
    return Group(name, tuple(c.target for c in calls), True, "")


def _rewrite_list(gm: GraphModule, planner: "_Planner", members: Sequence[Node], notes: Sequence[str]) -> Group:
    """One group call at the last member, its outputs taken apart; the members' users that came
    before it move after it."""
    graph = gm.graph
    moved = planner.users_to_move(members)
    calls = [planner.calls[n] for n in members]
    name = _add_group(gm, EmbeddingBagGroup, calls)
    last = max(members, key=planner.position.get)
    with graph.inserting_before(last):
        outs = graph.call_module(name, _argument_lists(calls))
        items = [graph.call_function(operator.getitem, (outs, k)) for k in range(len(members))]
    anchor = items[-1]
    for node in moved:  # after the group, in their order
        anchor.append(node)
        anchor = node
    for n, item in zip(members, items):
        n.replace_all_uses_with(item)
        graph.erase_node(n)
    return Group(name, tuple(c.target for c in calls), False, "; ".join(notes))


def _delete_unreferenced(gm: GraphModule, targets) -> None:
    """Drops the grouped bags' old paths the graph no longer names (the groups hold them now)."""
    named = {n.target for n in gm.graph.nodes if n.op in ("call_module", "get_attr")}
    for target in targets:
        if not any(t == target or t.startswith(target + ".") for t in named):
            gm.delete_submodule(target)
