#!/usr/bin/env python3
"""bench/soak.py — soak and overload benchmark of `pagoda serve`.

It starts the server itself (or drives one given with --url and --pid) and runs four phases over
HTTP with its own asyncio client (raw sockets: it sees every byte of every SSE stream and can cut
a stream at any point):

  1. unloaded   a few requests one at a time: the latency of a request alone;
  2. capacity   closed loop at --concurrency (default: the server's --max-num-seqs) for
                --capacity-seconds: requests per second at saturation for a fixed prompt and
                output size (max_tokens with ignore_eos), and the latency of a full server;
  3. soak       Poisson arrivals at --load × capacity for --soak-seconds, a --cut share of the
                streams closed by the client at a random point (before the answer, after the
                headers, or after a random number of events). Reported: the server's RSS growth
                from the end of the warm-up (--warmup, a share of the soak) to the end (median of
                the samples in the first and the last tenth after warm-up; target < 1 %); every
                completed response well-formed (SSE framing, JSON chunks, finish_reason
                "length" on each choice, usage, [DONE] last); afterwards, once the client is
                done, the KV pool empty: /metrics shows pagoda_num_requests_running and
                pagoda_num_requests_waiting 0 and pagoda_kv_cache_usage_perc 0;
  4. overload   Poisson arrivals at --overload × capacity for --overload-seconds: memory stays
                bounded (peak RSS over the soak's end, target < 10 % + 16 MiB), the requests
                refused are refused fast (503 with Retry-After; p99 time to the refusal under
                --fast-503-ms), and the admitted requests finish within 2× the latency of a full
                server (median, against phase 2's median).

Why phase 2's latency is the reference for phase 4: on a CPU a full batch is several times
slower per request than a request alone (16 streams give about twice the tokens per second of one
stream, bench/results/cpu.md), so no amount of admission control brings an overloaded server back
to the latency of a lone request; what it can promise is that overload costs an admitted request
no more than a bounded wait for a seat. The server is started with --max-waiting (default: half
of --max-num-seqs) for that: a request waits for at most about half a batch's service time, and
the rest are refused at once with 503 and Retry-After. Phase 1's latency is reported beside it.

The KV pool is small (--kv-cache-mb 64, about 180 blocks of the default model, with --ctx-size
1024 so that it holds a whole context, as the server requires) so that the soak's
warm-up cycles through all of it: the CPU backend's KV memory is touched lazily, so with the
default 1 GiB pool RSS would climb for the first several hundred requests as blocks are used for
the first time, which is not a leak and would hide one.

Requests rotate over /v1/completions with a text prompt (random common words), /v1/completions
with random token ids, and /v1/chat/completions; all are streamed with include_usage.

    .venv/bin/python bench/soak.py --pagoda build/pagoda --model "$(scripts/fetch-model)" \\
        --soak-seconds 1200 --markdown bench/results/soak.md --json /tmp/soak.json

Exit status: 0 when every target is met (or --no-check), 1 otherwise, 2 for a setup failure.
Only the standard library.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone

WORDS = """
the of and to in is that for it as was with be by on not he this are or his from at which but
have an they you were her she there been one all we their has would when if more no out so said
what up its about into than them can only other new some time could these two may then do first
any my now such like our over man me even most made after also did many before must through back
years where much your way well down should because each just those people how too little state
good very make world still own see men work long get here between both life being under never day
same another know while last might us great old year off come since against go came right used
take three place small house water city light story music table river garden window market paper
""".split()

KINDS = ("completion-text", "completion-ids", "chat")


def log(*a):
    print("soak:", *a, file=sys.stderr, flush=True)


# ---- the server -------------------------------------------------------------------------------

class Server:
    """`pagoda serve` started here (or an external one: url + pid)."""

    def __init__(self, args):
        self.proc = None
        self.log_path = None
        self.exit_status = None
        if args.url:
            m = re.match(r"http://([^:/]+):(\d+)", args.url)
            self.host, self.port = m.group(1), int(m.group(2))
            self.pid = args.pid
            return
        flags = ["--max-num-seqs", str(args.max_num_seqs), "--max-waiting", str(args.max_waiting),
                 "--kv-cache-mb", str(args.kv_cache_mb), "--ctx-size", str(args.ctx_size),
                 "--shutdown-timeout", "5"]
        flags += args.server_flag
        argv = [args.pagoda, "serve", "--port", "0"]
        if args.model:
            argv += ["--model", args.model]
        argv += flags
        fd, self.log_path = tempfile.mkstemp(prefix="soak-server-", suffix=".log")
        self.argv = argv
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=fd,
                                     stdin=subprocess.DEVNULL)
        os.close(fd)
        line = self.proc.stdout.readline().decode()
        m = re.search(r"http://([0-9.]+):(\d+)", line)
        if not m:
            self.stop()
            raise SystemExit(f"soak: the server did not start ({line!r}):\n{self.log_tail()}")
        self.host, self.port = m.group(1), int(m.group(2))
        self.pid = self.proc.pid

    def log_tail(self, n=3000):
        if not self.log_path:
            return ""
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")[-n:]
        except OSError:
            return ""

    def rss(self):
        """(VmRSS, RssAnon) in bytes, or (None, None)."""
        if not self.pid:
            return None, None
        rss = anon = None
        try:
            with open(f"/proc/{self.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss = int(line.split()[1]) * 1024
                    elif line.startswith("RssAnon:"):
                        anon = int(line.split()[1]) * 1024
        except OSError:
            pass
        return rss, anon

    def alive(self):
        return self.proc is None or self.proc.poll() is None

    def stop(self):
        if not self.proc:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.exit_status = self.proc.returncode
        return self.exit_status


# ---- one HTTP exchange -----------------------------------------------------------------------

class Result:
    __slots__ = ("kind", "status", "headers", "body", "t0", "t_head", "t_first", "t_end", "cut",
                 "error", "events")

    def __init__(self, kind):
        self.kind = kind
        self.status = 0
        self.headers = {}
        self.body = b""
        self.t0 = time.perf_counter()
        self.t_head = self.t_first = self.t_end = None
        self.cut = None  # None, or where the client cut the stream
        self.error = None
        self.events = 0

    @property
    def latency(self):
        return None if self.t_end is None else self.t_end - self.t0


async def exchange(host, port, method, path, body=None, *, cut=None, timeout=600.0,
                   kind="") -> Result:
    """One request on a fresh connection (Connection: close). cut: None; "send" (close right
    after sending); "head" (after the response head); or an int n (after n SSE data events)."""
    res = Result(kind)
    data = json.dumps(body).encode() if body is not None else b""
    head = (f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n"
            f"Accept: */*\r\n")
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
    writer = None
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        writer.write(head.encode() + b"\r\n" + data)
        await writer.drain()
        if cut == "send":
            res.cut = "send"
            return res
        raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
        res.t_head = time.perf_counter()
        lines = raw.decode("latin-1").split("\r\n")
        res.status = int(lines[0].split()[1])
        for ln in lines[1:]:
            if ":" in ln:
                k, v = ln.split(":", 1)
                res.headers[k.strip().lower()] = v.strip()
        if cut == "head":
            res.cut = "head"
            return res
        chunked = res.headers.get("transfer-encoding", "").lower() == "chunked"
        buf = bytearray()
        if chunked:
            while True:
                size_line = await asyncio.wait_for(reader.readuntil(b"\r\n"), timeout)
                size = int(size_line.split(b";")[0].strip(), 16)
                if size == 0:
                    await asyncio.wait_for(reader.readuntil(b"\r\n"), timeout)
                    break
                chunk = await asyncio.wait_for(reader.readexactly(size + 2), timeout)
                if chunk[-2:] != b"\r\n":
                    raise ValueError("bad chunk framing")
                if res.t_first is None and b"data: " in chunk:
                    res.t_first = time.perf_counter()
                buf += chunk[:-2]
                res.events = buf.count(b"\n\ndata: ") + (1 if buf.startswith(b"data: ") else 0)
                if isinstance(cut, int) and res.events >= cut:
                    res.cut = cut
                    res.body = bytes(buf)
                    return res
        elif "content-length" in res.headers:
            buf += await asyncio.wait_for(reader.readexactly(int(res.headers["content-length"])),
                                          timeout)
        else:
            buf += await asyncio.wait_for(reader.read(), timeout)
        res.body = bytes(buf)
        res.t_end = time.perf_counter()
        if res.t_first is None:
            res.t_first = res.t_end
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError,
            IndexError) as e:
        res.error = f"{type(e).__name__}: {e}"
    finally:
        if writer is not None:
            writer.close()
    return res


def check_stream(res: Result, kind: str, n_choices: int, max_tokens: int):
    """None when a completed 200 stream is well-formed, else what is wrong."""
    b = res.body
    if not b.endswith(b"\n\n"):
        return "the body does not end with a blank line"
    events = b[:-2].split(b"\n\n")
    data = []
    for ev in events:
        if ev == b": ping":
            continue
        if not ev.startswith(b"data: ") or b"\n" in ev or b"\r" in ev:
            return f"bad SSE event {ev[:80]!r}"
        data.append(ev[6:])
    if not data or data[-1] != b"[DONE]":
        return "the stream does not end with data: [DONE]"
    if b"[DONE]" in data[:-1]:
        return "[DONE] before the end"
    finish = {}
    usage = None
    obj_name = "chat.completion.chunk" if kind == "chat" else "text_completion"
    for d in data[:-1]:
        try:
            o = json.loads(d)
        except ValueError:
            return f"chunk is not JSON: {d[:80]!r}"
        if not isinstance(o, dict) or "error" in o:
            return f"error chunk: {d[:200]!r}"
        if o.get("object") != obj_name:
            return f"object {o.get('object')!r}"
        for c in o.get("choices") or []:
            fr = c.get("finish_reason")
            if fr is not None:
                if c["index"] in finish:
                    return f"choice {c['index']} finished twice"
                finish[c["index"]] = fr
            elif c["index"] in finish:
                return f"choice {c['index']} continues after its finish_reason"
        if o.get("usage"):
            usage = o["usage"]
    if sorted(finish) != list(range(n_choices)):
        return f"finish_reason for choices {sorted(finish)}"
    if any(v != "length" for v in finish.values()):
        return f"finish_reason {finish}"
    if not usage or usage.get("completion_tokens") != n_choices * max_tokens:
        return f"usage {usage}"
    return None


# ---- the load ------------------------------------------------------------------------------

class Load:
    def __init__(self, args, srv: Server, model: str):
        self.args, self.srv, self.model = args, srv, model
        self.rng = random.Random(args.seed)
        self.n = 0

    def body(self, kind):
        a = self.args
        body = {"model": self.model, "max_tokens": a.max_tokens, "ignore_eos": True,
                "temperature": 0.7, "seed": self.rng.randrange(1 << 30), "stream": True,
                "stream_options": {"include_usage": True}}
        if kind == "completion-ids":
            body["prompt"] = [self.rng.randrange(a.id_lo, a.id_hi) for _ in range(a.prompt_len)]
        else:
            text = " ".join(self.rng.choice(WORDS) for _ in range(a.prompt_len))
            if kind == "chat":
                body["messages"] = [{"role": "user", "content": text}]
            else:
                body["prompt"] = text
        return body

    def path(self, kind):
        return "/v1/chat/completions" if kind == "chat" else "/v1/completions"

    async def one(self, cut=None, timeout=600.0) -> Result:
        kind = KINDS[self.n % len(KINDS)]
        self.n += 1
        return await exchange(self.srv.host, self.srv.port, "POST", self.path(kind),
                              self.body(kind), cut=cut, timeout=timeout, kind=kind)

    async def closed_loop(self, concurrency, seconds):
        end = time.perf_counter() + seconds
        out = []

        async def client():
            while time.perf_counter() < end:
                out.append(await self.one())
        await asyncio.gather(*(client() for _ in range(concurrency)))
        return out

    async def open_loop(self, rate, seconds, cut_share=0.0, on_tick=None, max_inflight=4096):
        """Poisson arrivals at `rate` per second for `seconds`. Returns (results, dropped):
        dropped counts arrivals not sent because max_inflight requests were outstanding."""
        rng = random.Random(self.args.seed + 1)
        start = time.perf_counter()
        end = start + seconds
        tasks, dropped = [], 0
        t = start
        next_tick = start
        while True:
            t += rng.expovariate(rate)
            if t >= end:
                break
            while True:
                now = time.perf_counter()
                if on_tick and now >= next_tick:
                    on_tick(now - start)
                    next_tick += 1.0
                if now >= t:
                    break
                await asyncio.sleep(min(t, next_tick) - now)
            if sum(1 for x in tasks if not x.done()) >= max_inflight:
                dropped += 1
                continue
            cut = None
            if cut_share and rng.random() < cut_share:
                r = rng.random()
                cut = "send" if r < 0.1 else "head" if r < 0.2 else rng.randrange(
                    1, self.args.max_tokens + 1)
            tasks.append(asyncio.ensure_future(self.one(cut=cut)))
        while any(not x.done() for x in tasks):
            now = time.perf_counter()
            if on_tick and now >= next_tick:
                on_tick(now - start)
                next_tick += 1.0
            await asyncio.sleep(0.2)
        return [x.result() for x in tasks], dropped


# ---- metrics and statistics -----------------------------------------------------------------

async def get_metrics(srv) -> dict:
    r = await exchange(srv.host, srv.port, "GET", "/metrics", timeout=30)
    if r.status != 200:
        raise RuntimeError(f"GET /metrics: {r.status} {r.error}")
    out = {}
    for line in r.body.decode().splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$", line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
    return out


def pct(vals, p):
    if not vals:
        return None
    s = sorted(vals)
    k = (len(s) - 1) * p / 100
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def lat_summary(results):
    lats = [r.latency for r in results if r.latency is not None]
    ttft = [r.t_first - r.t0 for r in results if r.t_first is not None and r.t_end is not None]
    return {"n": len(lats), "p50_s": pct(lats, 50), "p90_s": pct(lats, 90),
            "p99_s": pct(lats, 99), "ttft_p50_s": pct(ttft, 50), "ttft_p99_s": pct(ttft, 99)}


def validate(results, args):
    """Counts of the completed 200 streams, malformed ones with their first problems."""
    ok, bad, problems = 0, 0, []
    for r in results:
        if r.cut is not None or r.error or r.status != 200:
            continue
        why = check_stream(r, r.kind, 1, args.max_tokens)
        if why:
            bad += 1
            if len(problems) < 5:
                problems.append(f"{r.kind}: {why}")
        else:
            ok += 1
    return ok, bad, problems


def statuses(results):
    out = {}
    for r in results:
        key = "cut" if r.cut is not None else ("error" if r.error else str(r.status))
        out[key] = out.get(key, 0) + 1
    return out


# ---- the phases ------------------------------------------------------------------------------

async def run(args, srv: Server) -> dict:
    rep = {"config": {k: v for k, v in vars(args).items() if k not in ("markdown", "json")},
           "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "load_average_at_start": os.getloadavg()}
    models = await exchange(srv.host, srv.port, "GET", "/v1/models", timeout=30)
    model = json.loads(models.body)["data"][0]["id"]
    load = Load(args, srv, model)
    tok = await exchange(srv.host, srv.port, "POST", "/tokenize",
                         {"prompt": " ".join(WORDS[:args.prompt_len])}, timeout=30)
    rep["prompt_tokens_text"] = json.loads(tok.body).get("count") if tok.status == 200 else None

    # 1. unloaded
    log("unloaded: requests one at a time")
    await load.one()  # warm up
    alone = [await load.one() for _ in range(args.unloaded_requests)]
    rep["unloaded"] = lat_summary([r for r in alone if r.status == 200])
    if any(r.status != 200 for r in alone):
        raise RuntimeError(f"unloaded requests failed: {statuses(alone)}")

    # 2. capacity
    conc = args.concurrency or args.max_num_seqs
    log(f"capacity: closed loop at {conc} for {args.capacity_seconds:.0f} s")
    await load.closed_loop(conc, min(5.0, args.capacity_seconds / 4))  # fill the batch first
    t0 = time.perf_counter()
    cap = await load.closed_loop(conc, args.capacity_seconds)
    took = time.perf_counter() - t0
    good = [r for r in cap if r.status == 200 and r.error is None]
    capacity = len(good) / took
    rep["capacity"] = {"concurrency": conc, "seconds": took, "requests": len(cap),
                       "statuses": statuses(cap), "requests_per_s": capacity,
                       "output_tokens_per_s": capacity * args.max_tokens,
                       "latency": lat_summary(good)}
    log(f"capacity: {capacity:.2f} requests/s ({capacity * args.max_tokens:.0f} output tok/s)")
    if capacity <= 0:
        raise RuntimeError("no request completed in the capacity phase")

    # 3. soak
    rate = args.load * capacity
    log(f"soak: {rate:.2f} requests/s for {args.soak_seconds:.0f} s, {args.cut:.0%} cut")
    samples = []  # (t, rss, anon)

    def tick(t):
        rss, anon = srv.rss()
        if rss:
            samples.append((t, rss, anon))
        if args.progress and int(t) % 30 == 0:
            log(f"  t={t:5.0f}s rss={rss / 2**20 if rss else 0:.1f} MiB")
    soak, dropped = await load.open_loop(rate, args.soak_seconds, args.cut, tick)
    ok, bad, problems = validate(soak, args)
    warm = args.warmup * args.soak_seconds
    after = [s for s in samples if s[0] >= warm and s[0] <= args.soak_seconds]
    tenth = max(1, len(after) // 10)
    first, last = after[:tenth], after[-tenth:]

    def med(xs, i):
        return statistics.median(x[i] for x in xs) if xs else None
    rss0, rss1 = med(first, 1), med(last, 1)
    anon0, anon1 = med(first, 2), med(last, 2)
    growth = (rss1 - rss0) / rss0 if rss0 else None
    # drained: the client is done; give the scheduler a moment to retire aborted sequences
    drained, m = None, {}
    for _ in range(50):
        m = await get_metrics(srv)
        vals = (m.get("pagoda_num_requests_running"), m.get("pagoda_num_requests_waiting"),
                m.get("pagoda_kv_cache_usage_perc"))
        if vals == (0.0, 0.0, 0.0):
            drained = True
            break
        drained = False
        await asyncio.sleep(0.2)
    rep["soak"] = {
        "seconds": args.soak_seconds, "rate_per_s": rate, "requests": len(soak),
        "client_dropped": dropped, "statuses": statuses(soak),
        "cut": sum(1 for r in soak if r.cut is not None),
        "completed_ok": ok, "malformed": bad, "problems": problems,
        "errors": [r.error for r in soak if r.error][:5],
        "latency": lat_summary([r for r in soak if r.status == 200 and r.cut is None]),
        "warmup_s": warm, "rss_after_warmup_mib": rss0 and rss0 / 2**20,
        "rss_end_mib": rss1 and rss1 / 2**20, "rss_growth": growth,
        "rss_anon_after_warmup_mib": anon0 and anon0 / 2**20,
        "rss_anon_end_mib": anon1 and anon1 / 2**20,
        "rss_max_mib": max((s[1] for s in samples), default=0) / 2**20,
        "rss_samples": [(round(t, 1), round(r / 2**20, 2)) for t, r, _ in samples[::10]],
        "metrics_after": {k: m.get(k) for k in ("pagoda_num_requests_running",
                                                "pagoda_num_requests_waiting",
                                                "pagoda_kv_cache_usage_perc")},
        "kv_empty_after": drained,
    }
    log(f"soak: {ok} ok, {bad} malformed, {rep['soak']['cut']} cut, statuses "
        f"{rep['soak']['statuses']}; RSS {rss0 and rss0 / 2**20:.1f} -> "
        f"{rss1 and rss1 / 2**20:.1f} MiB; KV empty after: {drained}")

    # 4. overload
    orate = args.overload * capacity
    log(f"overload: {orate:.1f} requests/s for {args.overload_seconds:.0f} s")
    base_rss = srv.rss()[0]
    peak = [base_rss or 0]

    def tick2(t):
        rss, _ = srv.rss()
        if rss:
            peak[0] = max(peak[0], rss)
    over, odropped = await load.open_loop(orate, args.overload_seconds, 0.0, tick2)
    admitted = [r for r in over if r.status == 200 and r.error is None]
    refused = [r for r in over if r.status == 503]
    with_retry = sum(1 for r in refused if "retry-after" in r.headers)
    refuse_ms = [(r.t_end - r.t0) * 1000 for r in refused if r.t_end]
    ok2, bad2, problems2 = validate(over, args)
    rep["overload"] = {
        "seconds": args.overload_seconds, "rate_per_s": orate, "requests": len(over),
        "client_dropped": odropped, "statuses": statuses(over), "admitted": len(admitted),
        "refused_503": len(refused), "refused_with_retry_after": with_retry,
        "refusal_ms_p50": pct(refuse_ms, 50), "refusal_ms_p99": pct(refuse_ms, 99),
        "admitted_latency": lat_summary(admitted), "malformed": bad2, "problems": problems2,
        "rss_before_mib": base_rss and base_rss / 2**20, "rss_peak_mib": peak[0] / 2**20,
    }
    log(f"overload: {len(admitted)} admitted, {len(refused)} refused (503), statuses "
        f"{rep['overload']['statuses']}")

    # targets
    cap_p50 = rep["capacity"]["latency"]["p50_s"]
    adm_p50 = rep["overload"]["admitted_latency"]["p50_s"]
    t = {}
    t["soak: RSS growth after warm-up < 1%"] = growth is not None and growth < 0.01
    t["soak: every completed stream well-formed"] = bad == 0 and ok > 0
    t["soak: no request failed (errors, 5xx other than 503)"] = not any(
        r.error for r in soak) and not any(r.status >= 500 and r.status != 503 for r in soak)
    t["soak: KV pool empty afterwards (running, waiting, kv usage 0)"] = bool(drained)
    t["overload: memory bounded (peak RSS < soak end + 10% + 16 MiB)"] = bool(
        rss1) and peak[0] < rss1 * 1.10 + (16 << 20)
    t["overload: refusals are 503 with Retry-After"] = bool(refused) and with_retry == len(
        refused) and not any(r.status not in (200, 503) for r in over)
    t[f"overload: refusals fast (p99 < {args.fast_503_ms:.0f} ms)"] = bool(refuse_ms) and pct(
        refuse_ms, 99) < args.fast_503_ms
    t["overload: admitted median latency <= 2x a full server's"] = bool(
        adm_p50 and cap_p50) and adm_p50 <= 2 * cap_p50
    t["overload: admitted streams well-formed, none failed"] = bad2 == 0 and not any(
        r.error for r in over)
    rep["targets"] = t
    rep["server_alive_at_end"] = srv.alive()
    return rep


# ---- the report ------------------------------------------------------------------------------

def fmt(x, spec=".2f", unit=""):
    return "—" if x is None else f"{x:{spec}}{unit}"


def markdown(rep, args) -> str:
    c, s, o = rep["capacity"], rep["soak"], rep["overload"]
    u = rep["unloaded"]
    lines = [
        f"# Soak and overload (bench/soak.py)", "",
        f"Run {rep['date']}; load average at start {', '.join(f'{x:.2f}' for x in rep['load_average_at_start'])}; "
        f"server `{' '.join(rep.get('server_argv', ['(external)']))}`.", "",
        f"Requests: prompt {args.prompt_len} words or token ids ({rep.get('prompt_tokens_text')} "
        f"tokens for the text prompt), {args.max_tokens} output tokens (ignore_eos), streamed, "
        f"rotating completions text / completions ids / chat.", "",
        "| phase | figure | value |", "|---|---|---|",
        f"| unloaded | latency p50 / p99 (one at a time) | {fmt(u['p50_s'], '.2f', ' s')} / "
        f"{fmt(u['p99_s'], '.2f', ' s')} |",
        f"| capacity | closed loop at {c['concurrency']} for {c['seconds']:.0f} s | "
        f"{c['requests_per_s']:.2f} requests/s, {c['output_tokens_per_s']:.0f} output tok/s |",
        f"| capacity | latency p50 / p99 (a full server) | {fmt(c['latency']['p50_s'], '.2f', ' s')}"
        f" / {fmt(c['latency']['p99_s'], '.2f', ' s')} |",
        f"| soak | {s['seconds']:.0f} s at {s['rate_per_s']:.2f} requests/s "
        f"({args.load:.0%} of capacity), {args.cut:.0%} cut | {s['requests']} requests: "
        f"{s['completed_ok']} complete and well-formed, {s['malformed']} malformed, "
        f"{s['cut']} cut by the client; statuses {s['statuses']} |",
        f"| soak | latency p50 / p99 | {fmt(s['latency']['p50_s'], '.2f', ' s')} / "
        f"{fmt(s['latency']['p99_s'], '.2f', ' s')} |",
        f"| soak | RSS after {s['warmup_s']:.0f} s warm-up → end (growth) | "
        f"{fmt(s['rss_after_warmup_mib'], '.1f', ' MiB')} → {fmt(s['rss_end_mib'], '.1f', ' MiB')}"
        f" ({fmt(s['rss_growth'] * 100 if s['rss_growth'] is not None else None, '+.2f', ' %')});"
        f" anonymous {fmt(s['rss_anon_after_warmup_mib'], '.1f')} → "
        f"{fmt(s['rss_anon_end_mib'], '.1f', ' MiB')}; max {s['rss_max_mib']:.1f} MiB |",
        f"| soak | /metrics afterwards | running {s['metrics_after']['pagoda_num_requests_running']},"
        f" waiting {s['metrics_after']['pagoda_num_requests_waiting']}, KV usage "
        f"{s['metrics_after']['pagoda_kv_cache_usage_perc']} |",
        f"| overload | {o['seconds']:.0f} s at {o['rate_per_s']:.1f} requests/s "
        f"({args.overload:.0f}× capacity) | {o['requests']} requests: {o['admitted']} admitted, "
        f"{o['refused_503']} refused with 503 ({o['refused_with_retry_after']} with "
        f"Retry-After); statuses {o['statuses']} |",
        f"| overload | time to a 503, p50 / p99 | {fmt(o['refusal_ms_p50'], '.1f', ' ms')} / "
        f"{fmt(o['refusal_ms_p99'], '.1f', ' ms')} |",
        f"| overload | admitted latency p50 / p99 | "
        f"{fmt(o['admitted_latency']['p50_s'], '.2f', ' s')} / "
        f"{fmt(o['admitted_latency']['p99_s'], '.2f', ' s')} |",
        f"| overload | RSS before → peak | {fmt(o['rss_before_mib'], '.1f', ' MiB')} → "
        f"{o['rss_peak_mib']:.1f} MiB |",
        "", "| target | met |", "|---|---|",
    ]
    for k, v in rep["targets"].items():
        lines.append(f"| {k} | {'yes' if v else '**no**'} |")
    lines.append("")
    if rep.get("server_exit_status") is not None:
        lines.append(f"The server exited with status {rep['server_exit_status']} after SIGTERM.")
        lines.append("")
    return "\n".join(lines)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pagoda", default="build/pagoda", help="the binary (default build/pagoda)")
    p.add_argument("--model", help="GGUF file (default: scripts/fetch-model's)")
    p.add_argument("--server-flag", action="append", default=[],
                   help="one more flag for pagoda serve (repeat; e.g. --server-flag=--threads=2)")
    p.add_argument("--url", help="drive this server instead of starting one")
    p.add_argument("--pid", type=int, help="the external server's pid (for its RSS)")
    p.add_argument("--max-num-seqs", type=int, default=8, help="the server's batch (8)")
    p.add_argument("--max-waiting", type=int, help="the server's queue (default: half the batch)")
    p.add_argument("--kv-cache-mb", type=int, default=64,
                   help="the server's KV pool (64: cycled during the warm-up)")
    p.add_argument("--ctx-size", type=int, default=1024,
                   help="the server's context (1024: a small pool must hold one whole context)")
    p.add_argument("--concurrency", type=int, help="capacity phase (default: --max-num-seqs)")
    p.add_argument("--prompt-len", type=int, default=32, help="words / token ids per prompt (32)")
    p.add_argument("--max-tokens", type=int, default=32, help="output tokens (32)")
    p.add_argument("--id-lo", type=int, default=1000)
    p.add_argument("--id-hi", type=int, default=20000)
    p.add_argument("--unloaded-requests", type=int, default=5)
    p.add_argument("--capacity-seconds", type=float, default=60)
    p.add_argument("--soak-seconds", type=float, default=1200)
    p.add_argument("--warmup", type=float, default=0.2, help="share of the soak (0.2)")
    p.add_argument("--load", type=float, default=0.8, help="soak rate / capacity (0.8)")
    p.add_argument("--cut", type=float, default=0.1, help="share of soak streams cut (0.1)")
    p.add_argument("--overload", type=float, default=10, help="overload rate / capacity (10)")
    p.add_argument("--overload-seconds", type=float, default=60)
    p.add_argument("--fast-503-ms", type=float, default=250.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", help="write the report as JSON")
    p.add_argument("--markdown", help="write the report as markdown")
    p.add_argument("--note", default="", help="a paragraph added to the markdown")
    p.add_argument("--no-check", action="store_true", help="exit 0 even when a target is missed")
    p.add_argument("--progress", action="store_true", help="log RSS every 30 s")
    a = p.parse_args(argv)
    if a.max_waiting is None:
        a.max_waiting = max(1, a.max_num_seqs // 2)
    if not a.url and not a.model:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        a.model = subprocess.run([os.path.join(root, "scripts", "fetch-model")], check=True,
                                 capture_output=True, text=True).stdout.strip().splitlines()[-1]
    return a


def main(argv=None) -> int:
    args = parse_args(argv)
    srv = Server(args)
    deadline = time.monotonic() + 120
    while True:
        r = asyncio.run(exchange(srv.host, srv.port, "GET", "/health", timeout=5))
        if r.status == 200:
            break
        if not srv.alive() or time.monotonic() > deadline:
            srv.stop()
            log(f"the server never became ready:\n{srv.log_tail()}")
            return 2
        time.sleep(0.1)
    try:
        rep = asyncio.run(run(args, srv))
    except Exception as e:  # noqa: BLE001 — report, stop the server, fail
        srv.stop()
        log(f"failed: {type(e).__name__}: {e}\n{srv.log_tail()}")
        return 2
    if srv.proc:
        rep["server_argv"] = [os.path.basename(srv.argv[0])] + srv.argv[1:]
    rep["server_exit_status"] = srv.stop()
    rep["targets"]["server exits 0 after SIGTERM"] = rep["server_exit_status"] in (0, None)
    md = markdown(rep, args)
    if args.note:
        md += "\n" + args.note.strip() + "\n"
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rep, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(md)
    print(md)
    missed = [k for k, v in rep["targets"].items() if not v]
    if missed:
        log("missed: " + "; ".join(missed))
        if srv.log_path:
            log(f"server log tail:\n{srv.log_tail(1500)}")
    if srv.log_path:
        os.unlink(srv.log_path)
    return 0 if (not missed or args.no_check) else 1


if __name__ == "__main__":
    sys.exit(main())
