"""The ``weka`` trace format: Weka/AgentX agent corpora, lowered to agentic v2 rows as Dynamo
1.6.1's replay lowers them (``aisimulate_core`` ``replay/loadgen/weka.rs``, the ``WekaImporter``
its ``trace_format: weka`` uses).

Source: a ``.json`` file (one trace object), a ``.jsonl`` file (one trace object per line) or
a folder of them (searched recursively, files in path order). A trace object is one *play*:
``{"id", "block_size", "hash_id_scope": "local", "models": [...], "requests": [...]}``; each
entry of ``requests`` is a request (``"type": "n"`` or ``"s"``: ``t`` seconds, ``model``,
``in``, ``out``, ``hash_ids``, optional ``api_time`` seconds) or a subagent marker
(``"type": "subagent"``: ``t``, ``agent_id``, ``subagent_type``, ``status`` ``completed``
(blocking) or ``async_launched`` (background), optional ``duration_ms``, and its own
``requests``). Every play must have the same ``block_size``; it is the trace block size.

Lowering (the reference's, step by step): the parent requests are split into *chains* by
prefix (a request extends the chain whose last hashed request's ``hash_ids`` are a prefix of
its own, same model, finished by then; otherwise it forks a new chain from the chain sharing
the longest prefix); a lone first request sharing nothing is a preamble of the main chain;
forked chains whose fork point is a chain's tail are spliced back (a *seam*) when eligible.
The main chain and the worker chains become streams; each subagent's requests are lowered
the same way into child streams spawned by the last parent request before the marker, and a
blocking subagent's terminals join the first later parent request starting after the
subagent's end. Edges: consecutive requests of a stream (completion, the recorded gap), a
stream's spawn (dispatch when it started before its parent's recorded end, else completion),
replay barriers from the latest finished request of each other stream of the same scope
(delay 0), joins, and a dispatch anchor from the play's first request for a stream with none.
``not_before_ms`` is the request's offset from the play's first request. A request's end is
``t + api_time`` (0 when absent). Prompts: full block ``i`` of a request is its ``hash_ids[i]``
within the play (a private block when the list is short); a partial last block is private to
the request.

Reader option ``nested_timestamp_basis`` (``workload.trace.options``; the reference's
``weka_nested_timestamp_basis``): ``auto`` (default: ``relative`` when some nested request
starts before its marker, else ``absolute``), ``absolute`` (nested ``t`` is play time) or
``relative`` (nested ``t`` counts from its marker).
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import blake3
from attrs import define, field
from servesim.errors import ConfigError, TraceError
from servesim.workload.model import Workload
from servesim.workload.textlines import read_text_lines

from servesim_agentic.agentic_v2 import V2Row, build_v2_workload

EPS = 1e-6  # JOIN_EPSILON_SECONDS
SEAM_MAX_GAP_S = 3600.0
SEAM_MIN_OVERLAP = 0.5
BASES = ("auto", "absolute", "relative")


class WekaError(ValueError):
    """A lowering error: ``field`` is the JSON path at fault."""

    def __init__(self, field_path: str, message: str) -> None:
        super().__init__(f"field {field_path!r}: {message}")


@define
class Req:
    t: float
    model: str
    inp: int
    out: int
    hashes: list[int]
    api_time: float | None

    @property
    def end(self) -> float:
        return self.t + max(self.api_time or 0.0, 0.0)


@define
class Indexed:
    sid: str  # source id: outer:i or outer:i:inner:j
    order: int
    req: Req

    def key(self) -> tuple[float, int, str]:
        return (self.req.t, self.order, self.sid)


@define
class Fork:
    parent: int | None
    source: str | None
    depth: int
    time: float


@define
class Chain:
    requests: list[Indexed] = field(factory=list)
    fork: Fork | None = None
    spliced_into: int | None = None
    tail_sid: str | None = None
    tail_hashes: list[int] = field(factory=list)
    tail_end: float = 0.0
    tail_model: str = ""


@define
class Stream:
    session: str
    requests: list[Indexed]
    fork_source: str | None
    scope: str


def ms(seconds: float) -> float:
    """Seconds to milliseconds at nanosecond resolution, negatives clamped to 0 (the
    reference's ``seconds_to_milliseconds``: round half away from zero)."""
    return math.floor(max(seconds, 0.0) * 1e9 + 0.5) / 1e6


def lcp(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


# -- parsing ------------------------------------------------------------------------------------

def _num(obj: dict[str, Any], key: str, where: str, *, optional: bool = False) -> float | None:
    v = obj.get(key)
    if v is None and optional:
        return None
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
        raise WekaError(f"{where}.{key}", f"expected a finite number >= 0, got {v!r}")
    return float(v)


def _count(obj: dict[str, Any], key: str, where: str) -> int:
    v = obj.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise WekaError(f"{where}.{key}", f"expected an integer >= 0, got {v!r}")
    return v


def _string(obj: dict[str, Any], key: str, where: str) -> str:
    v = obj.get(key)
    if not isinstance(v, str) or not v.strip():
        raise WekaError(f"{where}.{key}", f"expected a non-empty string, got {v!r}")
    return v


def _request(obj: dict[str, Any], where: str) -> Req:
    t = _num(obj, "t", where)
    model = _string(obj, "model", where)
    inp = _count(obj, "in", where)
    if inp == 0:
        raise WekaError(f"{where}.in", "a request needs at least one input token")
    out = _count(obj, "out", where)
    hid = obj.get("hash_ids", [])
    if not isinstance(hid, list) or any(not isinstance(h, int) or isinstance(h, bool) or h < 0
                                        for h in hid):
        raise WekaError(f"{where}.hash_ids", f"expected a list of integers >= 0, got {hid!r}")
    return Req(t, model, inp, out, list(hid), _num(obj, "api_time", where, optional=True))  # type: ignore[arg-type]


@define
class Subagent:
    t: float
    agent_id: str
    blocking: bool
    duration_ms: int | None
    requests: list[Req]
    where: str


def _subagent(obj: dict[str, Any], where: str) -> Subagent:
    t = _num(obj, "t", where)
    agent = _string(obj, "agent_id", where)
    _string(obj, "subagent_type", where)
    dur = obj.get("duration_ms")
    if dur is not None and (not isinstance(dur, int) or isinstance(dur, bool) or dur < 0):
        raise WekaError(f"{where}.duration_ms", f"expected an integer >= 0, got {dur!r}")
    status = obj.get("status")
    if status not in ("completed", "async_launched"):
        raise WekaError(f"{where}.status", "expected 'completed' or 'async_launched' (other "
                        f"subagent outcomes are not replayed), got {status!r}")
    inner = obj.get("requests")
    if not isinstance(inner, list):
        raise WekaError(f"{where}.requests", f"expected a list, got {inner!r}")
    reqs = []
    for j, e in enumerate(inner):
        w = f"{where}.requests[{j}]"
        if not isinstance(e, dict) or e.get("type") not in ("n", "s"):
            raise WekaError(f"{w}.type", "expected a request of type 'n' or 's'")
        reqs.append(_request(e, w))
    if status == "completed" and not reqs:
        raise WekaError(f"{where}.requests", "a blocking subagent needs replayable requests "
                        "(external waits are not modelled)")
    return Subagent(t, agent, status == "completed", dur, reqs, where)  # type: ignore[arg-type]


@define
class Play:
    trace_id: str
    block_size: int
    entries: list[tuple[int, Req | Subagent]]


def parse_play(obj: Any) -> Play:
    """One trace object; a WekaError names the field at fault."""
    if not isinstance(obj, dict):
        raise WekaError("$", f"expected a trace object, got {type(obj).__name__}")
    tid = _string(obj, "id", "$")
    block = obj.get("block_size")
    if not isinstance(block, int) or isinstance(block, bool) or block < 1:
        raise WekaError("block_size", f"expected an integer >= 1, got {block!r}")
    if obj.get("hash_id_scope") != "local":
        raise WekaError("hash_id_scope", f"expected 'local', got {obj.get('hash_id_scope')!r}")
    models = obj.get("models", [])
    if not isinstance(models, list) or any(not isinstance(m, str) or not m.strip() for m in models):
        raise WekaError("models", f"expected a list of model names, got {models!r}")
    raw = obj.get("requests")
    if not isinstance(raw, list):
        raise WekaError("requests", f"expected a list, got {raw!r}")
    entries: list[tuple[int, Req | Subagent]] = []
    for i, e in enumerate(raw):
        w = f"requests[{i}]"
        kind = e.get("type") if isinstance(e, dict) else None
        if kind in ("n", "s"):
            entries.append((i, _request(e, w)))
        elif kind == "subagent":
            entries.append((i, _subagent(e, w)))
        else:
            raise WekaError(f"{w}.type", f"expected 'n', 's' or 'subagent', got {kind!r}")
    used = [r.model for _, e in entries for r in ([e] if isinstance(e, Req) else e.requests)]
    if not used:
        raise WekaError("requests", "the trace has no model requests")
    if models and not set(used) <= set(models):
        raise WekaError("models", f"requests name models absent from the declaration: "
                        f"{sorted(set(used) - set(models))}")
    if not any(isinstance(e, Req) for _, e in entries):
        raise WekaError("requests", "the trace has no parent requests")
    return Play(tid, block, entries)


# -- chains -------------------------------------------------------------------------------------

def _append(idx: int, chain: Chain, by_source: dict[str, int], ind: Indexed) -> None:
    by_source[ind.sid] = idx
    if ind.req.hashes:
        chain.tail_sid = ind.sid
        chain.tail_hashes = list(ind.req.hashes)
        chain.tail_end = ind.req.end
        chain.tail_model = ind.req.model
    chain.requests.append(ind)


def _extension(chains: list[Chain], req: Req) -> int | None:
    best, best_len = None, 0
    for i, c in enumerate(chains):
        n = len(c.tail_hashes)
        if (n == 0 or n > len(req.hashes) or n <= best_len or c.tail_model != req.model
                or c.tail_end > req.t + EPS or c.tail_hashes != req.hashes[:n]):
            continue
        best, best_len = i, n
    return best


def _max_lcp(chains: list[Chain], hashes: list[int]) -> tuple[int | None, int]:
    best, key = None, (0, 0)
    for i, c in enumerate(chains):
        depth = lcp(c.tail_hashes, hashes)
        k = (depth, len(c.tail_hashes))
        if depth > 0 and k > key:
            best, key = i, k
    return best, key[0]


def _seam_eligible(chain: Chain, tail: Req) -> bool:
    fork = chain.fork
    if fork is None or fork.depth == 0 or not chain.requests:
        return False
    first = chain.requests[0].req
    gap = first.t - tail.end
    overlap = fork.depth / max(len(tail.hashes), 1)
    return (tail.end <= first.t + EPS and first.model == tail.model
            and not (gap > SEAM_MAX_GAP_S and overlap < SEAM_MIN_OVERLAP))


def _resolve_seams(chains: list[Chain], forks: dict[str, list[int]], by_source: dict[str, int],
                   reqs: dict[str, Req]) -> None:
    keys = set(forks)
    aliases: dict[int, int] = {}
    processed: set[str] = set()
    while keys:
        sid = min(keys)
        keys.discard(sid)
        if sid in processed:
            continue
        processed.add(sid)
        owner = by_source[sid]
        while owner in aliases:
            owner = aliases[owner]
        if chains[owner].tail_sid != sid:
            continue
        tail = reqs[sid]
        registered = [i for i in forks[sid] if chains[i].spliced_into is None]
        eligible = [i for i in registered if _seam_eligible(chains[i], tail)]
        if not eligible:
            continue
        elected = max(eligible, key=lambda i: (chains[i].fork.depth,  # type: ignore[union-attr]
                                               -chains[i].fork.time, -i))  # type: ignore[union-attr]
        moved, chains[elected].requests = chains[elected].requests, []
        for r in moved:
            by_source[r.sid] = owner
        o, e = chains[owner], chains[elected]
        o.requests.extend(moved)
        o.tail_sid, o.tail_hashes, o.tail_end, o.tail_model = (e.tail_sid, list(e.tail_hashes),
                                                               e.tail_end, e.tail_model)
        e.spliced_into = owner
        aliases[elected] = owner
        new_sid = o.tail_sid
        if new_sid is None:
            continue
        new_tail = reqs[new_sid]
        for cand in registered:
            if cand == elected or chains[cand].spliced_into is not None:
                continue
            first = chains[cand].requests[0].req
            if new_tail.t > first.t + EPS:
                continue
            depth = lcp(o.tail_hashes, first.hashes)
            if depth == 0:
                continue
            fork = chains[cand].fork
            assert fork is not None
            fork.parent, fork.source, fork.depth = owner, new_sid, depth
            forks.setdefault(new_sid, []).append(cand)
            processed.discard(new_sid)
            keys.add(new_sid)


def detect_chains(requests: list[Indexed]) -> tuple[list[Chain], int, list[int]]:
    """The chains of ``requests``, the main chain's index and the worker chains' indexes."""
    requests = sorted(requests, key=Indexed.key)
    chains: list[Chain] = []
    by_source: dict[str, int] = {}
    forks: dict[str, list[int]] = {}
    reqs: dict[str, Req] = {}
    for ind in requests:
        reqs[ind.sid] = ind.req
        if not ind.req.hashes:
            if not chains:
                chains.append(Chain())
            by_source[ind.sid] = 0
            chains[0].requests.append(ind)
            continue
        if not chains:
            chains.append(Chain())
            _append(0, chains[0], by_source, ind)
            continue
        target = _extension(chains, ind.req)
        if target is not None:
            _append(target, chains[target], by_source, ind)
            continue
        if all(not c.tail_hashes for c in chains):
            _append(0, chains[0], by_source, ind)
            continue
        parent, depth = _max_lcp(chains, ind.req.hashes)
        source = chains[parent].tail_sid if parent is not None else None
        chains.append(Chain(fork=Fork(parent, source, depth, ind.req.t)))
        _append(len(chains) - 1, chains[-1], by_source, ind)
        if source is not None and depth > 0:
            forks.setdefault(source, []).append(len(chains) - 1)
    _resolve_seams(chains, forks, by_source, reqs)
    live = [i for i, c in enumerate(chains) if c.spliced_into is None]
    main = min(live, key=lambda i: chains[i].requests[0].key()) if live else 0
    while chains[main].spliced_into is not None:
        main = chains[main].spliced_into  # type: ignore[assignment]
    workers = sorted((i for i in live if i != main), key=lambda i: chains[i].requests[0].key())
    return chains, main, workers


def split_preamble(requests: list[Indexed]) -> tuple[list[Indexed], list[Indexed]]:
    """A first request sharing no prefix (and, when it is long, no block) with the rest."""
    requests = sorted(requests, key=Indexed.key)
    if len(requests) < 2 or not requests[0].req.hashes:
        return [], requests
    first = requests[0].req
    if any(lcp(first.hashes, o.req.hashes) > 0 for o in requests[1:]):
        return [], requests
    if first.out > 64:
        others = {h for o in requests[1:] for h in o.req.hashes}
        if any(h in others for h in first.hashes):
            return [], requests
    return [requests[0]], requests[1:]


def streams_of(prefix: str, requests: list[Indexed], scope: str) -> list[Stream]:
    preamble, rest = split_preamble(requests)
    chains, main, workers = detect_chains(rest)
    main_reqs = sorted(chains[main].requests + preamble, key=Indexed.key)

    def fork_source(c: Chain) -> str | None:
        return c.fork.source if c.fork is not None else None

    out = [Stream(f"{prefix}", main_reqs, fork_source(chains[main]), scope)]
    for k, i in enumerate(workers):
        out.append(Stream(f"{prefix}:worker:{k}", list(chains[i].requests),
                          fork_source(chains[i]), scope))
    return out


# -- lowering -----------------------------------------------------------------------------------

Edge = tuple[str, bool, float, str]  # source id, on dispatch, delay ms, relation


def _push(edges: list[Edge], e: Edge) -> None:
    if not any(x[0] == e[0] and x[1] == e[1] and x[3] == e[3] for x in edges):
        edges.append(e)


def nested_time(inner: float, marker: float, relative: bool, where: str) -> float:
    if relative:
        return marker + inner
    if inner < marker - EPS:
        raise WekaError(f"{where}.t", f"a nested request at {inner} precedes its subagent marker "
                        f"at {marker} (set nested_timestamp_basis: relative)")
    return max(inner, marker)


def subagent_end(sub: Subagent, relative: bool) -> float:
    if sub.duration_ms is not None:
        return sub.t + sub.duration_ms / 1000.0
    end = sub.t
    for j, r in enumerate(sub.requests):
        end = max(end, nested_time(r.t, sub.t, relative, f"{sub.where}.requests[{j}]")
                  + max(r.api_time or 0.0, 0.0))
    return end


def lower_play(play: Play, name: str, relative: bool) -> list[tuple[str, str, Req, float, list[Edge]]]:
    """The rows of one play, sorted by request id: (source id, session, request,
    not_before_ms, edges)."""
    top = [Indexed(f"outer:{i}", i, e) for i, e in play.entries if isinstance(e, Req)]
    streams = streams_of("root", top, "scope:root")
    parents = len(streams)
    joins: list[tuple[str, list[str]]] = []
    for outer, sub in play.entries:
        if not isinstance(sub, Subagent):
            continue
        owners = sorted(((si, r) for si, s in enumerate(streams[:parents]) for r in s.requests
                         if r.order < outer), key=lambda x: x[1].order)
        if not owners:
            raise WekaError(f"{sub.where}", "a subagent needs a parent request before it")
        owner_stream, owner_req = owners[-1]
        inner = []
        for j, q in enumerate(sub.requests):
            t = nested_time(q.t, sub.t, relative, f"{sub.where}.requests[{j}]")
            inner.append(Indexed(f"outer:{outer}:inner:{j}", j,
                                 Req(t, q.model, q.inp, q.out, q.hashes, q.api_time)))
        if not inner:
            continue
        prefix = f"subagent:{outer}:{sub.agent_id}"
        child = streams_of(prefix, inner, prefix)
        child[0].fork_source = owner_req.sid
        join = None
        if sub.blocking:
            end = subagent_end(sub, relative)
            later = [r for r in streams[owner_stream].requests
                     if r.order > outer and r.req.t + EPS >= end]
            if later:
                join = min(later, key=lambda r: r.order).sid
        first_child = len(streams)
        streams.extend(child)
        if join is not None:
            terminals = [s.requests[-1].sid for s in streams[first_child:] if s.requests]
            if terminals:
                joins.append((join, terminals))
    root_time = min(r.req.t for s in streams for r in s.requests)
    by_sid = {r.sid: r for s in streams for r in s.requests}
    root_sid = streams[0].requests[0].sid
    deps: dict[str, list[Edge]] = {}
    for s in streams:
        for pred, cur in zip(s.requests, s.requests[1:], strict=False):
            _push(deps.setdefault(cur.sid, []), (pred.sid, False, ms(cur.req.t - pred.req.end), "sequence"))
    for s in streams:
        if not s.requests or s.fork_source is None:
            continue
        first, parent = s.requests[0], by_sid[s.fork_source]
        if first.req.t < parent.req.end:
            e = (parent.sid, True, ms(first.req.t - parent.req.t), "spawn")
        else:
            e = (parent.sid, False, ms(first.req.t - parent.req.end), "spawn")
        _push(deps.setdefault(first.sid, []), e)
    _frontiers(streams, deps)
    for target, terminals in joins:
        for term in terminals:
            _push(deps.setdefault(target, []),
                  (term, False, ms(by_sid[target].req.t - by_sid[term].req.end), "join"))
    root_t = streams[0].requests[0].req.t
    for s in streams:
        if not s.requests:
            continue
        first = s.requests[0]
        if first.sid == root_sid or deps.get(first.sid):
            continue
        _push(deps.setdefault(first.sid, []), (root_sid, True, ms(first.req.t - root_t), "spawn"))
    rows = [(r.sid, s.session, r.req, ms(r.req.t - root_time), deps.get(r.sid, []))
            for s in streams for r in s.requests]
    rows.sort(key=lambda x: x[0])
    return rows


def _frontiers(streams: list[Stream], deps: dict[str, list[Edge]]) -> None:
    """Replay barriers: a request waits for the latest request of each other stream of its
    scope that started before it and had finished by then (pruned to the frontier)."""
    scopes: dict[str, list[Stream]] = {}
    for s in streams:
        scopes.setdefault(s.scope, []).append(s)
    for group in scopes.values():
        for ts in group:
            for target in ts.requests:
                t = target.req.t
                frontier = []
                for other in group:
                    if other is ts:
                        continue
                    cands = [c for c in other.requests if c.req.t < t and c.req.end <= t + EPS]
                    if cands:
                        frontier.append(max(cands, key=lambda c: (c.req.end, c.req.t, c.sid)))
                for c in frontier:
                    if not any(c.req.t < x.req.t and c.req.end <= x.req.t + EPS for x in frontier):
                        _push(deps.setdefault(target.sid, []), (c.sid, False, 0.0, "replay_barrier"))


# -- the reader ---------------------------------------------------------------------------------

def _files(path: str) -> list[tuple[str, str]]:
    """(file, name relative to the source) in path order."""
    if os.path.isdir(path):
        out = []
        for root, dirs, names in os.walk(path):
            dirs.sort()
            for n in names:
                if n.lower().endswith((".json", ".jsonl")):
                    full = os.path.join(root, n)
                    out.append((full, os.path.relpath(full, path).replace(os.sep, "/")))
        if not out:
            raise TraceError("a weka source folder must hold .json or .jsonl files", file=path)
        return sorted(out, key=lambda x: x[1])
    if not path.lower().endswith((".json", ".jsonl")):
        raise TraceError("a weka source file must end in .json or .jsonl", file=path)
    return [(path, os.path.basename(path))]


def _objects(file: str) -> list[tuple[int, Any]]:
    """(line, object): one per line of a .jsonl file, the whole of a .json file."""
    if file.lower().endswith(".jsonl"):
        lines = [(n, t) for n, t in enumerate(read_text_lines(file, "trace"), start=1) if t.strip()]
    else:
        lines = [(1, "\n".join(read_text_lines(file, "trace")))]
    out = []
    for n, text in lines:
        try:
            out.append((n, json.loads(text)))
        except json.JSONDecodeError as exc:
            raise TraceError(f"invalid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
                             file=file, line=n) from None
        except RecursionError:
            raise TraceError("JSON nested too deeply to read", file=file, line=n) from None
    if not out:
        raise TraceError("the file holds no trace object", file=file)
    return out


def _basis(options: dict[str, Any] | None) -> str:
    opts = dict(options or {})
    basis = opts.pop("nested_timestamp_basis", "auto")
    if opts:
        raise ConfigError(f"unknown weka option {sorted(opts)[0]!r} (known: nested_timestamp_basis)",
                          path=f"workload.trace.options.{sorted(opts)[0]}")
    if basis not in BASES:
        raise ConfigError(f"expected one of {', '.join(BASES)}, got {basis!r}",
                          path="workload.trace.options.nested_timestamp_basis")
    return str(basis)


class WekaTrace:
    """Reader registered as the ``weka`` trace format."""

    @classmethod
    def read(cls, path: str, *, trace_block_size: int = 512,
             options: dict[str, Any] | None = None) -> Workload:
        basis = _basis(options)
        plays: list[tuple[str, int, str, Play]] = []  # file, line, source name, play
        block = None
        for file, rel in _files(path):
            jsonl = file.lower().endswith(".jsonl")
            objects = _objects(file)
            for k, (line, obj) in enumerate(objects):
                try:
                    play = parse_play(obj)
                except WekaError as exc:
                    raise TraceError(str(exc), file=file, line=line) from None
                if block is not None and play.block_size != block:
                    raise TraceError(f"field 'block_size': {play.block_size} differs from the "
                                     f"corpus's {block}", file=file, line=line)
                block = play.block_size
                plays.append((file, line, f"{rel}#{k:06d}" if jsonl else rel, play))
        subs = [(p, s) for _, _, _, p in plays for _, s in p.entries
                if isinstance(s, Subagent) and s.requests]
        if basis == "auto":
            witness = any(r.t < s.t - EPS for _, s in subs for r in s.requests)
            basis = "relative" if witness else "absolute"
        rows: list[V2Row] = []
        hashes: dict[str, int] = {}
        for file, line, name, play in plays:
            try:
                lowered = lower_play(play, name, basis == "relative")
            except WekaError as exc:
                raise TraceError(str(exc), file=file, line=line) from None
            ns = namespace(name)
            for sid, session, req, not_before, edges in lowered:
                rid = f"{ns}:request:{sid}"
                rows.append(V2Row(line, rid, f"{ns}:session:{session}", name,
                                  _prompt(name, rid, req, block or 1, hashes), req.out,
                                  not_before, req.inp,
                                  deps=[(f"{ns}:request:{e[0]}", e[1], e[2]) for e in edges]))
        return build_v2_workload(rows, path, block or 1,
                                 {name: k for k, (_, _, name, _) in enumerate(plays)})


def namespace(source_name: str) -> str:
    """A play's id prefix, the reference's (``weka:`` and 16 hex digits of the BLAKE3 hash of
    its source name): request ids sort by it, and the reference orders its requests so."""
    return "weka:" + blake3.blake3(source_name.encode()).hexdigest()[:16]


def _prompt(name: str, rid: str, req: Req, block: int, ids: dict[str, int]) -> list[int]:
    """The request's block ids: full block ``i`` is ``hash_ids[i]`` of its play (private when
    missing), a partial last block is the request's own (the reference's
    ``normalized_hashes``)."""
    full, part = divmod(req.inp, block)
    keys = [f"{name}\0{req.hashes[i]}" if i < len(req.hashes) else f"{rid}\0missing\0{i}"
            for i in range(full)]
    if part:
        keys.append(f"{rid}\0tail")
    return [ids.setdefault(k, len(ids)) for k in keys]


__all__ = ["WekaTrace", "detect_chains", "lower_play", "parse_play", "split_preamble"]
