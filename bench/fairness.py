#!/usr/bin/env python3
"""bench/fairness.py — how the machine is shared between tenants, under the fair scheduler and
under first-come-first-served, side by side.

It starts `pagoda serve` itself, once per policy (--sched-policy fair | fcfs), with a tenants
file it writes (one random key per tenant, the tenants' weights), and drives every tenant at
once over HTTP with the openai SDK: each tenant its own key, request rate, concurrency, prompt
and output lengths. Requests are streamed completions of random token ids (exact prompt
lengths, no prefix-cache hits) with ignore_eos (exact output lengths).

    .venv/bin/python bench/fairness.py --pagoda build/pagoda --model "$(scripts/fetch-model)" \\
        --scenario equal-10x --duration 30 --markdown out.md --json out.json

Per tenant and policy it reports, over the measured window (after --warmup; --ttft-grace seconds
after its end the server is stopped with what is in flight):
  service   tokens per second, weighted as the scheduler charges them: prompt tokens +
            F × generated tokens (also shown divided by the tenant's weight), with
            F = --output-factor (2, the scheduler's default charge); a prompt counts when its
            first token arrives (its prefill is done), a generated token when its chunk arrives
            (logprobs list a chunk's tokens) — from the client's own clock, not the server's
            counters;
  TTFT      p50 / p99 of the requests sent in the window (none is sent after it; the server
            runs on for --ttft-grace seconds so that the last ones get their first token), those
            still waiting for one then counted with the time they waited ("≥" marks such a
            lower bound: a starved tenant shows);
  429s      requests refused by the tenant's limits.
With --alone NAME, NAME also runs alone (same settings) for its TTFT baseline.

Scenarios (--scenario; or --tenant specs, repeated, for your own):
  equal-10x      A and B weight 1, both backlogged (each keeps more requests outstanding than
                 its share of the seats), A ten times as many as B: equal service expected
  weights-3-1    A weight 3, B weight 1, the same load each: service 3:1 expected
  mixed-lengths  A long prompts and short outputs, B short prompts and long outputs, weight 1
  light-b        A at 2.5 × the machine's capacity (backlogged), B at a tenth of that (a quarter
                 of the capacity, half its share): B should get what it asks at about its TTFT
                 alone (--alone B)
A tenant spec: name=A,weight=1,concurrency=20,rate=0,prompt=64,gen=32 (rate 0 = closed loop:
each of its `concurrency` clients sends the next request when the last ends; rate R > 0 =
Poisson arrivals at R per second, at most `concurrency` outstanding; load=L instead of a rate =
L × the machine's capacity in requests/s of that tenant's size, measured first by a saturating
closed-loop run of --calibrate seconds); arrivals=poisson (default) or uniform (evenly spaced:
fewer samples needed for a steady figure). The server is saturated
with --server-flags (default: --max-num-seqs 8), so that sharing matters.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time

import openai

SCENARIOS = {
    # both backlogged: B keeps twice its share of the 8 seats outstanding, A ten times B
    "equal-10x": ["name=A,weight=1,concurrency=80,prompt=64,gen=32",
                  "name=B,weight=1,concurrency=8,prompt=64,gen=32"],
    "weights-3-1": ["name=A,weight=3,concurrency=16,prompt=64,gen=32",
                    "name=B,weight=1,concurrency=16,prompt=64,gen=32"],
    "mixed-lengths": ["name=A,weight=1,concurrency=16,prompt=192,gen=8",
                      "name=B,weight=1,concurrency=16,prompt=16,gen=64"],
    # B asks for less than its share, A for ten times as much (backlogged): B's TTFT
    "light-b": ["name=A,weight=1,concurrency=64,load=2.5,prompt=64,gen=32,arrivals=uniform",
                "name=B,weight=1,concurrency=8,load=0.25,prompt=64,gen=32,arrivals=uniform"],
}


def parse_tenant(spec: str) -> dict:
    t = {"weight": 1.0, "concurrency": 8, "rate": 0.0, "load": 0.0, "prompt": 64, "gen": 32,
         "arrivals": "poisson"}
    for part in spec.split(","):
        k, _, v = part.partition("=")
        if k not in ("name", "weight", "concurrency", "rate", "load", "prompt", "gen",
                     "arrivals"):
            raise SystemExit(f"fairness: unknown tenant field {k!r} in {spec!r}")
        t[k] = v if k in ("name", "arrivals") else \
            float(v) if k in ("weight", "rate", "load") else int(v)
    if t["arrivals"] not in ("poisson", "uniform"):
        raise SystemExit(f"fairness: arrivals is poisson or uniform in {spec!r}")
    if "name" not in t:
        raise SystemExit(f"fairness: tenant spec without a name: {spec!r}")
    return t


# ---- the server ------------------------------------------------------------------------------

class Server:
    def __init__(self, pagoda, model, policy, tenants, flags, log):
        self.keys = {t["name"]: "sk-" + secrets.token_hex(16) for t in tenants}
        import hashlib
        doc = {"tenants": [{"name": t["name"], "weight": t["weight"],
                            "keys_sha256": [hashlib.sha256(self.keys[t["name"]].encode())
                                            .hexdigest()]} for t in tenants]}
        fd, self.tfile = tempfile.mkstemp(suffix=".json", prefix="fairness-tenants-")
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
        argv = [pagoda, "serve", "--model", model, "--port", "0", "--tenants", self.tfile,
                "--sched-policy", policy, "--shutdown-timeout", "0", *flags]
        self.log = open(log, "wb") if log else subprocess.DEVNULL
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.log,
                                     stdin=subprocess.DEVNULL)
        line = self.proc.stdout.readline().decode()
        m = re.search(r"http://([0-9.]+):(\d+)", line)
        if not m:
            self.stop()
            raise SystemExit(f"fairness: the server did not start: {line!r}")
        self.url = f"http://{m.group(1)}:{m.group(2)}"
        deadline = time.monotonic() + 120
        import urllib.request
        while True:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SystemExit("fairness: the server never became ready")
            time.sleep(0.05)
        c = openai.OpenAI(base_url=self.url + "/v1", api_key=next(iter(self.keys.values())))
        self.model = c.models.list().data[0].id

    def stop(self):
        if self.tfile is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        os.unlink(self.tfile)
        self.tfile = None


# ---- the load --------------------------------------------------------------------------------

class TenantLoad:
    """One tenant's clients: `concurrency` threads sending streamed completions."""

    def __init__(self, t, srv, stop_at, seed):
        self.t, self.stop_at = t, stop_at
        self.client = openai.OpenAI(base_url=srv.url + "/v1", api_key=srv.keys[t["name"]],
                                    max_retries=0, timeout=600)
        self.model = srv.model
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.records = []  # (t_send, t_first or None, prompt_tokens, [(t, n_tokens), ...])
        self.refused = 0
        self.errors = []
        self.stopping = threading.Event()
        self.arrivals = None
        if t["rate"] > 0:  # Poisson arrivals, shared by the clients
            self.arrivals = []
            now = time.monotonic()
            at = now
            while at < stop_at:
                at += (self.rng.expovariate(t["rate"]) if t["arrivals"] == "poisson"
                       else 1.0 / t["rate"])
                self.arrivals.append(at)
            self.arrivals.reverse()
        self.threads = [threading.Thread(target=self.client_loop, daemon=True)
                        for _ in range(t["concurrency"])]

    def next_send(self):
        if self.arrivals is None:
            return time.monotonic()
        with self.lock:
            if not self.arrivals:
                return None
            at = self.arrivals.pop()
        return at

    def client_loop(self):
        while True:
            at = self.next_send()
            if at is None or at >= self.stop_at or self.stopping.is_set():
                return
            delay = at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            with self.lock:
                ids = [self.rng.randrange(1000, 20000) for _ in range(self.t["prompt"])]
            self.one(ids)

    def one(self, ids):
        """One streamed request; every chunk's tokens (logprobs lists them) with its time."""
        t_send = time.monotonic()
        t_first = None
        chunks = []
        rec = (t_send, None, len(ids), chunks)
        try:
            stream = self.client.completions.create(
                model=self.model, prompt=ids, max_tokens=self.t["gen"], stream=True,
                temperature=0, logprobs=0, extra_body={"ignore_eos": True})
            for chunk in stream:
                if not chunk.choices:
                    continue
                c = chunk.choices[0]
                n = len(c.logprobs.tokens) if c.logprobs and c.logprobs.tokens else (
                    1 if c.text else 0)
                if n:
                    now = time.monotonic()
                    if t_first is None:
                        t_first = now
                    chunks.append((now, n))
        except openai.RateLimitError:
            with self.lock:
                self.refused += 1
            time.sleep(0.05)
            return
        except (openai.APIError, OSError) as e:
            if not self.stopping.is_set():
                with self.lock:
                    self.errors.append(str(e))
        with self.lock:
            self.records.append((t_send, t_first, rec[2], chunks))


def pct(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    f = int(k)
    return xs[f] + (xs[min(f + 1, len(xs) - 1)] - xs[f]) * (k - f)


def summarize(load, w0, w1, out_factor, t_end):
    """Service in [w0, w1) from the client's records. TTFT of the requests sent in [w0, w1):
    no request is sent after w1, but the server runs on until t_end (--ttft-grace), so that a
    request sent just before w1 has its first token counted; one still waiting for it at t_end
    counts with the time it had waited (a lower bound, so a starved tenant shows) and as
    unfinished."""
    prompt = gen = 0.0
    ttfts = []
    waiting = 0
    for t_send, t_first, n_prompt, chunks in load.records:
        if t_first is not None and w0 <= t_first < w1:
            prompt += n_prompt
        gen += sum(n for t, n in chunks if w0 <= t < w1)
        if not w0 <= t_send < w1:
            continue
        if t_first is None or t_first >= t_end:
            waiting += 1
            ttfts.append(t_end - t_send)
        else:
            ttfts.append(t_first - t_send)
    secs = w1 - w0
    weight = load.t["weight"]
    return {"service_raw": (prompt + out_factor * gen) / secs,
            "service": (prompt + out_factor * gen) / weight / secs,
            "prompt_tok_s": prompt / secs, "gen_tok_s": gen / secs,
            "requests": sum(1 for r in load.records if r[3] and w0 <= r[3][-1][0] < w1),
            "ttft_p50": pct(ttfts, 0.5), "ttft_p99": pct(ttfts, 0.99), "ttft_n": len(ttfts),
            "ttft_unfinished": waiting, "refused_429": load.refused,
            "errors": len(load.errors)}


def calibrate(args, tenant):
    """Requests/s the machine serves of `tenant`'s size, saturated (closed loop, twice the
    seats), under the fair policy."""
    seats = 8
    if "--max-num-seqs" in args.server_flags:
        seats = int(args.server_flags[args.server_flags.index("--max-num-seqs") + 1])
    t = dict(tenant, name="calibration", weight=1.0, rate=0.0, load=0.0, concurrency=2 * seats)
    cal = argparse.Namespace(**{**vars(args), "warmup": 3.0, "duration": args.calibrate})
    r = run(cal, "fair", [t], "calibration")["calibration"]
    rps = r["gen_tok_s"] / t["gen"]  # requests' worth of output per second
    print(f"fairness: capacity for prompt {t['prompt']} / output {t['gen']}: {rps:.2f} "
          f"requests/s", file=sys.stderr, flush=True)
    return rps


def with_rates(args, tenants):
    """Tenants with load=L given rate = L × the measured capacity."""
    cache = {}
    out = []
    for t in tenants:
        if t["load"] > 0:
            key = (t["prompt"], t["gen"])
            if key not in cache:
                cache[key] = calibrate(args, t)
            t = dict(t, rate=t["load"] * cache[key])
        out.append(t)
    return out


def run(args, policy, tenants, label):
    srv = Server(args.pagoda, args.model, policy, tenants, args.server_flags,
                 args.server_log and f"{args.server_log}.{label}.{policy}")
    try:
        t0 = time.monotonic()
        stop_at = t0 + args.warmup + args.duration
        loads = [TenantLoad(t, srv, stop_at, args.seed + i) for i, t in enumerate(tenants)]
        for ld in loads:
            for th in ld.threads:
                th.start()
        time.sleep(max(0.0, stop_at - time.monotonic()))  # no request is sent after stop_at
        time.sleep(args.ttft_grace)
        t_end = time.monotonic()
        for ld in loads:
            ld.stopping.set()
        srv.stop()  # --shutdown-timeout 0: what is in flight is cut now, the clients return
        for ld in loads:
            for th in ld.threads:
                th.join()
        w0, w1 = t0 + args.warmup, stop_at
        out = {ld.t["name"]: summarize(ld, w0, w1, args.output_factor, t_end)
               for ld in loads}
        for ld in loads:
            for e in ld.errors[:3]:
                print(f"fairness: {label}/{policy}/{ld.t['name']}: error: {e}", file=sys.stderr)
        return out
    finally:
        srv.stop()


def markdown(results, scenario_tenants):
    lines = []
    for label, tenants in scenario_tenants.items():
        r = results[label]
        lines.append(f"### {label}\n")
        lines.append("tenants: " + "; ".join(
            f"{t['name']} weight {t['weight']:g}, concurrency {t['concurrency']}, "
            f"{'rate ' + format(t['rate'], '.2f') + '/s' if t['rate'] else 'closed loop'}"
            f"{' (' + format(t['load'], 'g') + ' × capacity)' if t['load'] else ''}, "
            f"prompt {t['prompt']}, output {t['gen']}" for t in tenants) + "\n")
        lines.append("| policy | tenant | service (tok/s) | service / weight | prompt tok/s "
                     "| output tok/s | requests | TTFT p50 (s) | TTFT p99 (s) | 429s |")
        lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for policy in r:
            if policy.startswith("_"):
                continue
            for name, s in r[policy].items():
                ge = "≥ " if s["ttft_unfinished"] else ""
                lines.append(f"| {policy} | {name} | {s['service_raw']:.1f} | {s['service']:.1f} "
                             f"| {s['prompt_tok_s']:.1f} "
                             f"| {s['gen_tok_s']:.1f} | {s['requests']} | {s['ttft_p50']:.3f} "
                             f"| {ge}{s['ttft_p99']:.3f} | {s['refused_429']} |")
        for policy in r:
            if policy.startswith("_"):
                continue
            names = list(r[policy])
            if len(names) >= 2:
                a, b = r[policy][names[0]]["service_raw"], r[policy][names[1]]["service_raw"]
                wa = next(t["weight"] for t in tenants if t["name"] == names[0])
                wb = next(t["weight"] for t in tenants if t["name"] == names[1])
                ratio = f"{a / b:.2f}" if b > 0 else "inf"
                lines.append(f"\n{policy}: service {names[0]}/{names[1]} = {ratio} (the weights "
                             f"ask for {wa / wb:.2f})")
        if "_alone" in r:
            for policy, per in r["_alone"].items():
                for name, s in per.items():
                    lines.append(f"\n{name} alone ({policy}): TTFT p50 {s['ttft_p50']:.3f} s, "
                                 f"p99 {s['ttft_p99']:.3f} s")
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pagoda", default="build/pagoda")
    ap.add_argument("--model", required=True)
    ap.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    ap.add_argument("--tenant", action="append", help="a tenant spec (see the top)")
    ap.add_argument("--policies", default="fair,fcfs")
    ap.add_argument("--alone", action="append", default=[],
                    help="also run this tenant alone (its TTFT baseline)")
    ap.add_argument("--duration", type=float, default=30.0, help="measured seconds per run")
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds before measuring")
    ap.add_argument("--ttft-grace", type=float, default=3.0,
                    help="seconds the server runs on after the last request is sent, so that "
                         "those sent just before the end get their first token counted")
    ap.add_argument("--output-factor", type=float, default=2.0)
    ap.add_argument("--server-flags", default="--max-num-seqs 8",
                    help="more `pagoda serve` flags, one string")
    ap.add_argument("--server-log", help="write each server's stderr to PREFIX.<run>")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--calibrate", type=float, default=15.0,
                    help="seconds of the capacity measurement for load= tenants")
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    args = ap.parse_args(argv)
    args.server_flags = args.server_flags.split()
    scenario_tenants = {}
    for s in args.scenario or []:
        scenario_tenants[s] = [parse_tenant(x) for x in SCENARIOS[s]]
    if args.tenant:
        scenario_tenants["custom"] = [parse_tenant(x) for x in args.tenant]
    if not scenario_tenants:
        scenario_tenants["equal-10x"] = [parse_tenant(x) for x in SCENARIOS["equal-10x"]]
    policies = args.policies.split(",")
    results = {}
    for label in list(scenario_tenants):
        scenario_tenants[label] = tenants = with_rates(args, scenario_tenants[label])
        results[label] = {}
        for policy in policies:
            print(f"fairness: {label} under {policy} ...", file=sys.stderr, flush=True)
            results[label][policy] = run(args, policy, tenants, label)
        for name in args.alone:
            alone = [t for t in tenants if t["name"] == name]
            if not alone:
                continue
            results[label].setdefault("_alone", {})
            for policy in policies[:1]:
                print(f"fairness: {label}: {name} alone ...", file=sys.stderr, flush=True)
                results[label]["_alone"][policy] = run(args, policy, alone, label + "-alone")
    md = markdown(results, scenario_tenants)
    print(md)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(md + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "scenarios": scenario_tenants,
                       "args": {k: v for k, v in vars(args).items()}}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
