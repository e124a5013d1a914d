"""A benchmark client's options, by the client's own names.

Keys are the command-line flags of ``vllm bench serve`` (vLLM 0.32,
``vllm/benchmarks/serve.py`` and ``vllm/benchmarks/datasets/``) and of the InferenceMAX /
InferenceX client (``utils/bench_serving/benchmark_serving.py``), dashes written as
underscores: ``--random-range-ratio 0.8`` is ``random_range_ratio: 0.8``. Defaults are the
selected client's own. Two keys have no flag: ``client`` picks whose drawing rules apply,
and ``special_tokens`` / ``chat_template_tokens`` / ``vocab_size`` describe the tokenizer the
client would have loaded (the draws that depend on it cannot be made without them).
"""

from __future__ import annotations

import math
import shlex
from typing import Any

from attrs import frozen

from servesim.errors import ConfigError

CLIENTS = ("vllm", "inferencemax")

# The client's defaults (vllm: serve.py add_cli_args and RandomDataset.DEFAULT_*;
# inferencemax: benchmark_serving.py's argparse).
_DEFAULTS: dict[str, dict[str, Any]] = {
    "vllm": {"random_input_len": 1024, "random_output_len": 128, "random_range_ratio": 0.0,
             "num_prompts": 1000},
    "inferencemax": {"random_input_len": 1024, "random_output_len": 128, "random_range_ratio": 1.0,
                     "num_prompts": 1000},
}

_KEYS = (
    "client", "dataset_name", "random_input_len", "random_output_len", "random_range_ratio",
    "random_prefix_len", "num_prompts", "max_concurrency", "request_rate", "burstiness",
    "ignore_eos", "seed", "num_warmups", "special_tokens", "chat_template_tokens", "vocab_size",
    "command",
)

# Flags of the clients' command lines that change nothing servesim replays (where the server
# is, how results are saved or printed).
_INERT_FLAGS = {
    "model", "backend", "base_url", "host", "port", "endpoint", "tokenizer", "result_dir",
    "result_filename", "save_result", "percentile_metrics", "metric_percentiles",
    "trust_remote_code", "disable_tqdm", "served_model_name", "label", "save_detailed",
    "tokenizer_mode", "bench_serving_dir", "random_num_workers",
}
_BOOL_FLAGS = {"ignore_eos", "save_result", "trust_remote_code", "disable_tqdm", "save_detailed",
               "use_chat_template"}


@frozen(kw_only=True)
class BenchClientConfig:
    """One benchmark invocation (see the module docstring for the names)."""

    client: str
    random_input_len: int
    random_output_len: int
    random_range_ratio: float | tuple[float, float]
    num_prompts: int
    random_prefix_len: int = 0
    max_concurrency: int | None = None
    request_rate: float = math.inf
    burstiness: float = 1.0
    ignore_eos: bool = True
    seed: int = 0
    num_warmups: int = 0
    special_tokens: int = 0
    chat_template_tokens: int = 0
    vocab_size: int | None = None

    @property
    def input_range_ratio(self) -> float:
        r = self.random_range_ratio
        return r[0] if isinstance(r, tuple) else r

    @property
    def output_range_ratio(self) -> float:
        r = self.random_range_ratio
        return r[1] if isinstance(r, tuple) else r


def parse_command(line: str, where: str) -> dict[str, Any]:
    """The options of a ``vllm bench serve`` / ``benchmark_serving.py`` command line."""
    try:
        words = shlex.split(line)
    except ValueError as exc:
        raise ConfigError(f"cannot split the command line: {exc}", path=where) from None
    out: dict[str, Any] = {}
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("--"):
            continue  # the program, `bench`, `serve`
        name, eq, value = word[2:].partition("=")
        key = name.replace("-", "_")
        if key in _BOOL_FLAGS and not eq:
            out[key] = True
            continue
        if not eq:
            if i >= len(words):
                raise ConfigError(f"--{name} needs a value", path=where)
            value = words[i]
            i += 1
        out[key] = value
    if out.pop("use_chat_template", False) and "chat_template_tokens" not in out:
        raise ConfigError("--use-chat-template adds the chat template's tokens to each prompt: "
                          "give their count as chat_template_tokens", path=where)
    for key in _INERT_FLAGS:
        out.pop(key, None)
    return out


def _number(raw: dict[str, Any], key: str, where: str, *, integer: bool, low: float,
            allow_inf: bool = False) -> Any:
    value = raw[key]
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ConfigError(f"expected a number, got {raw[key]!r}", path=f"{where}{key}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ConfigError(f"expected a number, got {raw[key]!r}", path=f"{where}{key}")
    if math.isinf(value) and not (allow_inf and value > 0):
        raise ConfigError(f"expected a finite number, got {raw[key]!r}", path=f"{where}{key}")
    if integer and not math.isinf(value):
        if value != int(value):
            raise ConfigError(f"expected an integer, got {raw[key]!r}", path=f"{where}{key}")
        value = int(value)
    if value < low:
        raise ConfigError(f"must be >= {low:g}, got {raw[key]!r}", path=f"{where}{key}")
    return value


def _ratio(raw: dict[str, Any], where: str, client: str) -> float | tuple[float, float]:
    value = raw["random_range_ratio"]
    key = f"{where}random_range_ratio"
    if isinstance(value, dict) and client == "vllm":
        # vllm: a {"input": r, "output": r} mapping (datasets/utils.py _resolve_range_ratios)
        if set(value) != {"input", "output"}:
            raise ConfigError(f"a mapping needs exactly the keys input and output, got {sorted(value)}",
                              path=key)
        pair = tuple(_number(value, k, f"{key}.", integer=False, low=0.0) for k in ("input", "output"))
        ratios: tuple[float, ...] = pair
    else:
        if isinstance(value, str) and value.lstrip().startswith("{"):
            import json

            try:
                return _ratio({"random_range_ratio": json.loads(value)}, where, client)
            except ValueError:
                raise ConfigError(f"expected a number or a JSON mapping, got {value!r}", path=key) from None
        ratios = (_number(raw, "random_range_ratio", where, integer=False, low=0.0),)
    for r in ratios:
        # vllm: 0 <= r < 1 (get_sampling_params); inferencemax: lengths from [int(L * r), L]
        if client == "vllm" and r >= 1.0:
            raise ConfigError(f"vllm bench serve needs a range ratio in [0, 1), got {r!r}", path=key)
        if client == "inferencemax" and r > 1.0:
            raise ConfigError(f"the InferenceMAX client needs a range ratio in [0, 1], got {r!r}", path=key)
    return ratios[0] if len(ratios) == 1 else (ratios[0], ratios[1])


def build(raw: Any, source: str) -> BenchClientConfig:
    """Validate the mapping read from a client file; every error names its key."""
    if not isinstance(raw, dict):
        raise ConfigError(f"expected a mapping of client options, got {type(raw).__name__}", source=source)
    raw = dict(raw)
    if "command" in raw:
        line = raw.pop("command")
        if not isinstance(line, str):
            raise ConfigError("expected the client's command line as a string", path="command", source=source)
        try:
            from_line = parse_command(line, "command")
        except ConfigError as exc:
            raise ConfigError(str(exc), source=source) from None
        for key, value in from_line.items():
            raw.setdefault(key, value)  # a key written out wins over the command line's flag
    unknown = sorted(set(raw) - set(_KEYS))
    if unknown:
        raise ConfigError(f"unknown client option {unknown[0]!r}; expected one of: "
                          f"{', '.join(k for k in _KEYS if k != 'command')}", path=unknown[0], source=source)
    client = raw.get("client", "vllm")
    if client not in CLIENTS:
        raise ConfigError(f"expected one of {', '.join(CLIENTS)}, got {client!r}", path="client", source=source)
    dataset = raw.get("dataset_name", "random")
    if dataset != "random":
        raise ConfigError(f"only the random dataset is supported, got {dataset!r}", path="dataset_name",
                          source=source)
    merged = {**_DEFAULTS[client], "random_prefix_len": 0, "burstiness": 1.0, "seed": 0,
              "num_warmups": 0, "special_tokens": 0, "chat_template_tokens": 0,
              "request_rate": math.inf, "ignore_eos": False, **raw}
    try:
        return _build(merged, client)
    except ConfigError as exc:
        raise ConfigError(str(exc), source=source) from None


def _build(m: dict[str, Any], client: str) -> BenchClientConfig:
    ints = {k: _number(m, k, "", integer=True, low=low) for k, low in (
        ("random_input_len", 1), ("random_output_len", 1), ("num_prompts", 1),
        ("random_prefix_len", 0), ("seed", 0), ("num_warmups", 0), ("special_tokens", 0),
        ("chat_template_tokens", 0))}
    rate = _number(m, "request_rate", "", integer=False, low=0.0, allow_inf=True)
    if rate == 0:
        raise ConfigError("must be > 0 (inf sends every request at once)", path="request_rate")
    burst = _number(m, "burstiness", "", integer=False, low=0.0, allow_inf=True)
    if burst == 0:
        raise ConfigError("must be > 0", path="burstiness")
    conc = m.get("max_concurrency")
    if conc is not None:
        conc = _number(m, "max_concurrency", "", integer=True, low=1)
    vocab = m.get("vocab_size")
    if vocab is not None:
        vocab = _number(m, "vocab_size", "", integer=True, low=1)
    eos = m["ignore_eos"]
    if isinstance(eos, str) and eos.lower() in ("true", "false"):
        eos = eos.lower() == "true"
    if eos is not True:
        raise ConfigError("servesim generates exactly the drawn output length, as the client does with "
                          "--ignore-eos; set ignore_eos: true", path="ignore_eos")
    if client == "vllm" and ints["chat_template_tokens"]:
        raise ConfigError("chat_template_tokens applies to the inferencemax client only",
                          path="chat_template_tokens")
    if client == "inferencemax" and ints["special_tokens"]:
        raise ConfigError("special_tokens applies to the vllm client only", path="special_tokens")
    needs_vocab = client == "inferencemax" and (ints["random_prefix_len"] > 0 or not math.isinf(rate))
    if needs_vocab and vocab is None:
        raise ConfigError("the InferenceMAX client draws token ids from the tokenizer's vocabulary before "
                          "its send times (and prefix): give the tokenizer's vocab_size", path="vocab_size")
    if client == "inferencemax" and ints["random_input_len"] <= ints["chat_template_tokens"]:
        raise ConfigError("must exceed chat_template_tokens", path="random_input_len")
    ratio = _ratio(m, "", client)
    return BenchClientConfig(
        client=client, random_range_ratio=ratio, max_concurrency=conc, request_rate=float(rate),
        burstiness=float(burst), ignore_eos=True, vocab_size=vocab, **ints)
