#!/usr/bin/env python3
"""bench/serve.py — serving benchmark for any OpenAI-compatible server (pagoda, llama.cpp, vLLM).

Sends streamed requests with random prompts of chosen token lengths to /v1/completions (or
/v1/chat/completions) under a fixed concurrency or a Poisson arrival rate, and reports what vLLM's
`benchmark_serving.py` / `vllm bench serve` reports: request and token throughput, and mean /
median / percentiles of TTFT, TPOT, ITL and E2E latency, in the same row names.

    .venv/bin/python bench/serve.py --base-url http://127.0.0.1:8000 \\
        --num-prompts 64 --prompt-len 256 --gen-len 64 --concurrency 8 --json out.json

Prompts. The client has no tokenizer of its own, so it asks the server:
  * the server's POST /tokenize (vLLM/pagoda: {"prompt": ...}; llama.cpp: {"content": ...}) is
    used to find common English words that are one token each, and to check and adjust every
    text prompt until the server counts exactly the requested number of tokens (what the server
    adds, e.g. BOS, included; for chat, the chat template's tokens included too);
  * with --token-ids the prompts are sent as arrays of token ids (completions only; pagoda and
    vLLM accept them), built from those words' ids: lengths are exact by construction.
Without /tokenize, text prompts are built assuming one token per word and reported as unchecked.
Whatever the build, the reported input tokens are the server's own counts (`usage`).

Timing, per request: TTFT = first chunk carrying text; ITL = gaps between later chunks carrying
text; E2EL = until the stream ends; TPOT = (E2EL - TTFT) / (output tokens - 1). Token counts
come from `usage` (stream_options.include_usage).

Only the standard library and httpx (no aiohttp, no tokenizer packages).
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import random
import sys
import time
from datetime import datetime, timezone

import httpx

# Common English words; the ones the server's tokenizer encodes (with a leading space) as a single
# token make up the prompts.
WORDS = """
the of and to in is that for it as was with be by on not he this are or his from at which but
have an they you were her she there been one all we their has would when if more no out so said
what up its about into than them can only other new some time could these two may then do first
any my now such like our over man me even most made after also did many before must through back
years where much your way well down should because each just those people how too little state
good very make world still own see men work long get here between both life being under never day
same another know while last might us great old year off come since against go came right used
take three place small house water city light story music table river garden window market paper
family friend morning evening school letter answer father mother child color power money word
north south east west green blue black white simple happy early quick open close ready strong
field village bridge island forest mountain ocean summer winter spring autumn kitchen doctor
teacher number letter picture travel dinner orange yellow silver golden rain snow wind cloud
""".split()


# ---------------------------------------------------------------------------------------------
# the server's tokenizer


class ServerTokenizer:
    """Token counts from the server: vLLM/pagoda POST /tokenize {"prompt"|"messages"} or
    llama.cpp POST /tokenize {"content"}. `style` is None when the server has neither."""

    def __init__(self, client: httpx.AsyncClient, model: str):
        self.client = client
        self.model = model
        self.style: str | None = None  # "openai" (vLLM, pagoda) | "llama.cpp" | None
        self.chat = False  # can count chat messages (template included)
        self.with_model = True  # send "model" in /tokenize bodies

    async def _post(self, body: dict) -> list[int] | None:
        try:
            r = await self.client.post("/tokenize", json=body)
        except httpx.HTTPError:
            return None
        if r.status_code != 200:
            return None
        try:
            d = r.json()
        except ValueError:
            return None
        toks = d.get("tokens") if isinstance(d, dict) else None
        if not isinstance(toks, list):
            return None
        # llama.cpp may return [{"id":..,"piece":..}] with with_pieces; we never ask for that.
        try:
            return [int(t["id"]) if isinstance(t, dict) else int(t) for t in toks]
        except (KeyError, TypeError, ValueError):
            return None

    def _body(self, **kw) -> dict:
        return {"model": self.model, **kw} if self.with_model else kw

    async def probe(self) -> None:
        for self.with_model in (True, False):  # vLLM and pagoda also take no "model"
            if await self._post(self._body(prompt="hello world",
                                           add_special_tokens=False)) is not None:
                self.style = "openai"
                msgs = [{"role": "user", "content": "hello world"}]
                self.chat = await self._post(self._body(messages=msgs)) is not None
                return
        if await self._post({"content": "hello world", "add_special": False}) is not None:
            self.style = "llama.cpp"

    async def encode(self, text: str, special: bool) -> list[int]:
        """Token ids of `text`; special=True adds what the server adds to a completions prompt."""
        if self.style == "openai":
            body = self._body(prompt=text, add_special_tokens=special)
        else:
            body = {"content": text, "add_special": special}
        ids = await self._post(body)
        if ids is None:
            raise RuntimeError("POST /tokenize failed")
        return ids

    async def count(self, text: str, chat: bool) -> int:
        """Prompt tokens the server will count for `text` sent as a completions prompt or as
        the content of one user message."""
        if chat:
            ids = await self._post(self._body(messages=[{"role": "user", "content": text}]))
            if ids is None:
                raise RuntimeError("POST /tokenize with messages failed")
            return len(ids)
        return len(await self.encode(text, special=True))


# ---------------------------------------------------------------------------------------------
# prompts


@dataclasses.dataclass
class Req:
    prompt: str | list[int]
    expected_prompt_len: int  # what we aimed at (and, when checked, what the server counted)
    gen_len: int


@dataclasses.dataclass
class Pool:
    words: list[str]  # words that are one token with a leading space (or all, unchecked)
    ids: list[list[int]]  # their ids (empty lists when unchecked)
    checked: bool


async def build_pool(tok: ServerTokenizer) -> Pool:
    if tok.style is None:
        return Pool(sorted(set(WORDS)), [], False)
    words = sorted(set(WORDS))
    sem = asyncio.Semaphore(16)

    async def one(w):
        async with sem:
            return await tok.encode(" " + w, special=False)

    ids = await asyncio.gather(*(one(w) for w in words))
    single = [(w, i) for w, i in zip(words, ids) if len(i) == 1]
    if len(single) < 20:  # an odd tokenizer: take every word, multi-token ones included
        single = list(zip(words, ids))
    return Pool([w for w, _ in single], [i for _, i in single], True)


def pick(rng: random.Random, pool: Pool, n: int) -> list[int]:
    return [rng.randrange(len(pool.words)) for _ in range(n)]


def ids_for(pool: Pool, idx: list[int], n: int) -> list[int]:
    out: list[int] = []
    for k in idx:
        out.extend(pool.ids[k])
        if len(out) >= n:
            break
    return out[:n]


async def fit_text(tok: ServerTokenizer, pool: Pool, rng: random.Random, head: list[int],
                   tail: list[int], target: int, chat: bool) -> tuple[list[int], int]:
    """Grow or shrink the word indices `tail` (after the fixed `head`) until the server counts
    `target` tokens. Returns (tail, the count reached)."""
    n = await tok.count(text_of(pool, head, tail), chat)
    for _ in range(8):
        diff = target - n
        if diff == 0:
            break
        if diff > 0:
            tail = tail + pick(rng, pool, diff)
        else:
            removed = 0
            while removed < -diff and len(tail) > 1:
                removed += len(pool.ids[tail[-1]])
                tail = tail[:-1]
            if removed == 0:
                break  # cannot get shorter
        n = await tok.count(text_of(pool, head, tail), chat)
    return tail, n


def text_of(pool: Pool, head: list[int], tail: list[int]) -> str:
    return " ".join(pool.words[k] for k in head + tail)


async def build_requests(args, tok: ServerTokenizer, pool: Pool) -> tuple[list[Req], dict]:
    rng = random.Random(args.seed)
    chat = is_chat(args.endpoint)
    lens = [max(1, rng.randint(args.prompt_len - args.prompt_len_range,
                               args.prompt_len + args.prompt_len_range))
            for _ in range(args.num_prompts)]
    gens = [max(1, rng.randint(args.gen_len - args.gen_len_range,
                               args.gen_len + args.gen_len_range))
            for _ in range(args.num_prompts)]
    P = args.shared_prefix_len
    info = {"prompt_lengths_checked": False, "prompt_length_misses": 0}

    if args.token_ids:
        if pool.checked:
            # Enough words for P (resp. L) tokens even if some were multi-token.
            prefix = ids_for(pool, pick(rng, pool, P), P)
            reqs = [Req(prefix + ids_for(pool, pick(rng, pool, L), L), P + L, G)
                    for L, G in zip(lens, gens)]
        else:
            v = args.vocab_size
            prefix = [rng.randrange(args.vocab_min_id, v) for _ in range(P)]
            reqs = [Req(prefix + [rng.randrange(args.vocab_min_id, v) for _ in range(L)], P + L, G)
                    for L, G in zip(lens, gens)]
        info["prompt_lengths_checked"] = True  # exact by construction
        return reqs, info

    can_check = pool.checked and (tok.chat or not chat)
    info["prompt_lengths_checked"] = can_check
    head: list[int] = []
    if P > 0:
        head = pick(rng, pool, P)
        if can_check:
            # The prefix alone (as a completions prompt) counts P tokens, BOS included.
            head, _ = await fit_text(tok, pool, rng, [], head, P, chat=False)
    tails = [pick(rng, pool, L) for L in lens]
    if not can_check:
        return [Req(text_of(pool, head, t), P + L, G) for t, L, G in zip(tails, lens, gens)], info

    sem = asyncio.Semaphore(8)
    seeds = [rng.getrandbits(64) for _ in lens]

    async def one(i):
        async with sem:
            r = random.Random(seeds[i])
            tail, n = await fit_text(tok, pool, r, head, tails[i], P + lens[i], chat)
            return Req(text_of(pool, head, tail), n, gens[i]), n != P + lens[i]

    out = await asyncio.gather(*(one(i) for i in range(len(lens))))
    info["prompt_length_misses"] = sum(m for _, m in out)
    return [r for r, _ in out], info


# ---------------------------------------------------------------------------------------------
# requests


@dataclasses.dataclass
class Result:
    ok: bool = False
    error: str = ""
    ttft: float = 0.0  # seconds
    e2el: float = 0.0
    itl: list[float] = dataclasses.field(default_factory=list)
    prompt_tokens: int = 0
    output_tokens: int = 0
    usage: bool = False
    cached_tokens: int = 0  # usage.prompt_tokens_details.cached_tokens (prefix cache hits)
    start: float = 0.0  # perf_counter at send


def is_chat(endpoint: str) -> bool:
    return "chat" in endpoint


def payload(args, model: str, req: Req) -> dict:
    body: dict = {"model": model, "max_tokens": req.gen_len, "temperature": args.temperature,
                  "stream": True, "stream_options": {"include_usage": True}}
    if is_chat(args.endpoint):
        body["messages"] = [{"role": "user", "content": req.prompt}]
    else:
        body["prompt"] = req.prompt
    if not args.no_ignore_eos:
        body["ignore_eos"] = True
    body.update(args.extra_body)
    return body


async def send(client: httpx.AsyncClient, args, model: str, req: Req) -> Result:
    res = Result()
    chat = is_chat(args.endpoint)
    body = payload(args, model, req)
    chunks = 0
    last = None
    st = res.start = time.perf_counter()
    try:
        async with client.stream("POST", args.endpoint, json=body) as r:
            if r.status_code != 200:
                text = (await r.aread()).decode(errors="replace")
                res.error = f"HTTP {r.status_code}: {text[:300]}"
                return res
            done = False
            async for line in r.aiter_lines():
                ts = time.perf_counter()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    break
                try:
                    obj = json.loads(data)
                except ValueError:
                    res.error = f"bad SSE data: {data[:200]}"
                    return res
                if obj.get("error"):
                    res.error = f"stream error: {json.dumps(obj['error'])[:300]}"
                    return res
                if obj.get("usage"):
                    res.usage = True
                    res.prompt_tokens = int(obj["usage"].get("prompt_tokens") or 0)
                    res.output_tokens = int(obj["usage"].get("completion_tokens") or 0)
                    details = obj["usage"].get("prompt_tokens_details") or {}
                    res.cached_tokens = int(details.get("cached_tokens") or 0)
                choices = obj.get("choices") or []
                if not choices:
                    continue
                c = choices[0]
                text = (c.get("delta") or {}).get("content") if chat else c.get("text")
                if text:
                    if last is None:
                        res.ttft = ts - st
                    else:
                        res.itl.append(ts - last)
                    last = ts
                    chunks += 1
            res.e2el = time.perf_counter() - st
            if not done and not res.usage:
                res.error = "the stream ended without [DONE]"
                return res
    except (httpx.HTTPError, OSError) as e:
        res.error = f"{type(e).__name__}: {e}"
        return res
    if last is None:  # no text at all (e.g. only special tokens): first token = the end
        res.ttft = res.e2el
    if not res.usage:  # the server ignored include_usage: estimate
        res.prompt_tokens = req.expected_prompt_len
        res.output_tokens = chunks
    res.ok = True
    return res


async def run_load(client, args, model: str, reqs: list[Req]) -> tuple[list[Result], float]:
    sem = asyncio.Semaphore(args.concurrency) if args.concurrency else None
    arrivals = random.Random(args.seed + 0x5EED)
    n_done = 0
    progress = not args.quiet and sys.stderr.isatty()

    async def one(req):
        nonlocal n_done
        if sem:
            async with sem:
                r = await send(client, args, model, req)
        else:
            r = await send(client, args, model, req)
        n_done += 1
        if progress:
            print(f"\r  {n_done}/{len(reqs)} requests done", end="", file=sys.stderr, flush=True)
        return r

    tasks = []
    start = time.perf_counter()
    for i, req in enumerate(reqs):
        if i > 0 and math.isfinite(args.request_rate):
            await asyncio.sleep(arrivals.expovariate(args.request_rate))
        tasks.append(asyncio.create_task(one(req)))
    results = await asyncio.gather(*tasks)
    duration = time.perf_counter() - start
    if progress:
        print(file=sys.stderr)
    return results, duration


# ---------------------------------------------------------------------------------------------
# statistics and report


def percentile(sorted_vals: list[float], p: float) -> float:
    """numpy's default (linear interpolation) percentile of an already sorted list."""
    if not sorted_vals:
        return 0.0
    x = (len(sorted_vals) - 1) * p / 100.0
    lo = math.floor(x)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (x - lo)


def summarize(vals_s: list[float], pcts: list[float]) -> dict:
    v = sorted(x * 1000.0 for x in vals_s)
    n = len(v)
    mean = sum(v) / n if n else 0.0
    std = math.sqrt(sum((x - mean) ** 2 for x in v) / n) if n else 0.0
    out = {"mean": mean, "median": percentile(v, 50), "std": std, "p50": percentile(v, 50)}
    for p in pcts:
        out[f"p{pword(p)}"] = percentile(v, p)
    return out


def pword(p: float) -> str:
    return str(int(p)) if int(p) == p else str(p)


METRICS = [("ttft", "TTFT", "Time to First Token"),
           ("tpot", "TPOT", "Time per Output Token (excl. 1st token)"),
           ("itl", "ITL", "Inter-token Latency"),
           ("e2el", "E2EL", "End-to-end Latency")]


def report(args, model: str, results: list[Result], duration: float, info: dict,
           reqs: list[Req]) -> dict:
    ok = [r for r in results if r.ok]
    pcts = [float(p) for p in args.percentiles.split(",") if p.strip()]
    total_in = sum(r.prompt_tokens for r in ok)
    total_out = sum(r.output_tokens for r in ok)
    series = {
        "ttft": [r.ttft for r in ok],
        "tpot": [(r.e2el - r.ttft) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1],
        "itl": [x for r in ok for x in r.itl],
        "e2el": [r.e2el for r in ok],
    }
    res: dict = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "base_url": args.base_url, "endpoint": args.endpoint, "model": model,
        "config": {k: getattr(args, k) for k in (
            "num_prompts", "prompt_len", "prompt_len_range", "shared_prefix_len", "gen_len",
            "gen_len_range", "token_ids", "concurrency", "seed", "temperature", "extra_body")},
        "request_rate": args.request_rate if math.isfinite(args.request_rate) else "inf",
        "max_concurrency": args.concurrency,
        "ignore_eos": not args.no_ignore_eos,
        "tokenizer_api": info.get("tokenizer_api"),
        "prompt_lengths_checked": info["prompt_lengths_checked"],
        "prompt_length_misses": info["prompt_length_misses"],
        "usage_missing": sum(1 for r in ok if not r.usage),
        "duration": duration,
        "completed": len(ok),
        "failed": len(results) - len(ok),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "total_cached_input_tokens": sum(r.cached_tokens for r in ok),
        "mean_input_tokens": total_in / len(ok) if ok else 0.0,
        "mean_output_tokens": total_out / len(ok) if ok else 0.0,
        "request_throughput": len(ok) / duration,
        "output_throughput": total_out / duration,
        "total_token_throughput": (total_in + total_out) / duration,
    }
    stats = {k: summarize(v, pcts) for k, v in series.items()}
    for k, s in stats.items():
        for name, val in s.items():
            res[f"{name}_{k}_ms"] = val

    row = "{:<40} {:<10}".format
    rowf = "{:<40} {:<10.2f}".format
    print("{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="))
    print(row("Successful requests:", res["completed"]))
    print(row("Failed requests:", res["failed"]))
    if args.concurrency:
        print(row("Maximum request concurrency:", args.concurrency))
    if math.isfinite(args.request_rate):
        print(rowf("Request rate configured (RPS):", args.request_rate))
    print(rowf("Benchmark duration (s):", duration))
    print(row("Total input tokens:", total_in))
    print(row("Total generated tokens:", total_out))
    print(rowf("Mean input tokens (per request):", res["mean_input_tokens"]))
    print(rowf("Mean output tokens (per request):", res["mean_output_tokens"]))
    print(rowf("Request throughput (req/s):", res["request_throughput"]))
    print(rowf("Output token throughput (tok/s):", res["output_throughput"]))
    print(rowf("Total token throughput (tok/s):", res["total_token_throughput"]))
    for key, short, header in METRICS:
        s = stats[key]
        print("{s:{c}^{n}}".format(s=header, n=50, c="-"))
        print(rowf(f"Mean {short} (ms):", s["mean"]))
        print(rowf(f"Median {short} (ms):", s["median"]))
        for p in pcts:
            print(rowf(f"P{pword(p)} {short} (ms):", s[f"p{pword(p)}"]))
    print("=" * 50)

    res["input_lens"] = [r.prompt_tokens if r.ok else 0 for r in results]
    res["expected_input_lens"] = [q.expected_prompt_len for q in reqs]
    res["output_lens"] = [r.output_tokens if r.ok else 0 for r in results]
    res["ttfts"] = [r.ttft for r in results]
    res["itls"] = [r.itl for r in results]
    res["e2els"] = [r.e2el for r in results]
    res["errors"] = [r.error for r in results]
    return res


# ---------------------------------------------------------------------------------------------
# main


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        description="Serving benchmark for OpenAI-compatible servers (pagoda, llama.cpp, vLLM), "
                    "reporting like vLLM's benchmark_serving.py.")
    ap.add_argument("--base-url", default="http://127.0.0.1:8000",
                    help="server root, without /v1 (default %(default)s)")
    ap.add_argument("--endpoint", default="/v1/completions",
                    help="/v1/completions (default) or /v1/chat/completions")
    ap.add_argument("--model", help="model name (default: the first id of GET /v1/models)")
    ap.add_argument("--api-key", help="sent as 'Authorization: Bearer KEY'")
    ap.add_argument("--num-prompts", type=int, default=100, help="requests (default 100)")
    ap.add_argument("--prompt-len", type=int, default=256,
                    help="tokens per prompt after the shared prefix (default 256)")
    ap.add_argument("--prompt-len-range", type=int, default=0,
                    help="prompt lengths uniform in [L-R, L+R] tokens (default 0)")
    ap.add_argument("--shared-prefix-len", type=int, default=0,
                    help="a common prefix of P tokens before every prompt (default 0)")
    ap.add_argument("--gen-len", type=int, default=128, help="output tokens (default 128)")
    ap.add_argument("--gen-len-range", type=int, default=0,
                    help="output lengths uniform in [G-R, G+R] (default 0)")
    ap.add_argument("--token-ids", action="store_true",
                    help="send prompts as token-id arrays (completions only)")
    ap.add_argument("--concurrency", type=int, default=None,
                    help="at most C requests in flight (default: no limit)")
    ap.add_argument("--request-rate", type=float, default=float("inf"),
                    help="Poisson arrivals at R requests/s; inf = all at once (default)")
    ap.add_argument("--seed", type=int, default=0, help="prompts and arrivals (default 0)")
    ap.add_argument("--temperature", type=float, default=0.0, help="(default 0)")
    ap.add_argument("--no-ignore-eos", action="store_true",
                    help="do not send ignore_eos: true (outputs may be shorter than --gen-len)")
    ap.add_argument("--extra-body", type=json.loads, default={},
                    help="JSON object merged into every request body")
    ap.add_argument("--percentiles", default="90,99",
                    help="percentiles printed (default 90,99; the JSON always has p50)")
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="seconds without data before a request fails (default 600)")
    ap.add_argument("--vocab-size", type=int, default=None,
                    help="with --token-ids on a server without /tokenize: random ids below this")
    ap.add_argument("--vocab-min-id", type=int, default=1000,
                    help="... and not below this (default 1000, clear of special tokens)")
    ap.add_argument("--no-test-request", action="store_true",
                    help="skip the short warm-up request sent before the run")
    ap.add_argument("--json", metavar="FILE", help="write the results as JSON")
    ap.add_argument("--quiet", action="store_true", help="no progress line")
    a = ap.parse_args(argv)
    a.base_url = a.base_url.rstrip("/")
    if a.base_url.endswith("/v1"):
        a.base_url = a.base_url[:-3]
    if not a.endpoint.startswith("/"):
        a.endpoint = "/" + a.endpoint
    if a.num_prompts < 1:
        ap.error("--num-prompts must be at least 1")
    if a.prompt_len < 1 or a.gen_len < 1 or a.shared_prefix_len < 0:
        ap.error("--prompt-len and --gen-len must be >= 1, --shared-prefix-len >= 0")
    if a.prompt_len_range < 0 or a.gen_len_range < 0:
        ap.error("the ranges must be >= 0")
    if a.concurrency is not None and a.concurrency < 1:
        ap.error("--concurrency must be at least 1")
    if not a.request_rate > 0:
        ap.error("--request-rate must be > 0 (inf: all at once)")
    if a.token_ids and is_chat(a.endpoint):
        ap.error("--token-ids needs a completions endpoint")
    if not isinstance(a.extra_body, dict):
        ap.error("--extra-body must be a JSON object")
    return a


def log(*a):
    print(*a, file=sys.stderr, flush=True)


async def amain(args) -> int:
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    n_conn = max(args.concurrency or args.num_prompts, 1) + 4
    client = httpx.AsyncClient(
        base_url=args.base_url, headers=headers, trust_env=False,
        timeout=httpx.Timeout(args.timeout, connect=30.0),
        limits=httpx.Limits(max_connections=n_conn, max_keepalive_connections=n_conn))
    async with client:
        model = args.model
        if not model:
            try:
                r = await client.get("/v1/models")
                if r.status_code != 200:
                    raise ValueError(f"HTTP {r.status_code}: {r.text[:300]}")
                model = r.json()["data"][0]["id"]
            except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as e:
                log(f"serve.py: cannot get the model from {args.base_url}/v1/models ({e}); "
                    "pass --model")
                return 1
        tok = ServerTokenizer(client, model)
        await tok.probe()
        if args.token_ids and tok.style is None and not args.vocab_size:
            log("serve.py: the server has no /tokenize: --token-ids needs --vocab-size")
            return 1
        if tok.style is None:
            log("serve.py: no /tokenize on the server: prompt lengths are estimates "
                "(one token per word); the reported input tokens come from usage")
        elif is_chat(args.endpoint) and not tok.chat and not args.token_ids:
            log("serve.py: /tokenize cannot count chat messages here: chat prompt lengths "
                "exclude the chat template's tokens")
        pool = await build_pool(tok)
        t0 = time.perf_counter()
        reqs, info = await build_requests(args, tok, pool)
        info["tokenizer_api"] = tok.style
        log(f"serve.py: {args.base_url}{args.endpoint} model={model}: {len(reqs)} prompts "
            f"({'token ids' if args.token_ids else 'text'}, "
            f"mean {sum(q.expected_prompt_len for q in reqs) / len(reqs):.1f} tokens"
            f"{'' if info['prompt_lengths_checked'] else ' estimated'}) "
            f"built in {time.perf_counter() - t0:.2f}s"
            + (f", {info['prompt_length_misses']} off target" if info["prompt_length_misses"]
               else ""))

        if not args.no_test_request:
            # A short request unrelated to the prompts (so it warms no prefix cache for them).
            r = random.Random(args.seed ^ 0xC0FFEE)
            idx = pick(r, pool, 8)
            prompt = ids_for(pool, idx, 8) if args.token_ids and pool.checked else (
                [r.randrange(args.vocab_min_id, args.vocab_size) for _ in range(8)]
                if args.token_ids else text_of(pool, [], idx))
            res = await send(client, args, model, Req(prompt, 8, 4))
            if not res.ok:
                log(f"serve.py: the test request failed: {res.error}")
                return 1

        rate = "inf" if not math.isfinite(args.request_rate) else f"{args.request_rate:g}"
        log(f"serve.py: running: request rate {rate}, max concurrency "
            f"{args.concurrency or 'unlimited'}")
        results, duration = await run_load(client, args, model, reqs)

    res = report(args, model, results, duration, info, reqs)
    errs = sorted({r.error for r in results if not r.ok})
    for e in errs[:5]:
        log(f"serve.py: error: {e}")
    if res["usage_missing"]:
        log(f"serve.py: {res['usage_missing']} responses had no usage: their token counts are "
            "estimates (prompt: as built; output: text chunks)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")
    return 0 if res["completed"] else 1


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        return asyncio.run(amain(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
