"""A numpy reference forward pass for llama-family GGUF models, in float64.

Written from the model family's published math, not from pagoda's C code: weights are read and
dequantized with the `gguf` package, then RMSNorm, RoPE, grouped-query causal attention and a
SwiGLU feed-forward are applied in plain numpy. Used by the reference tests to check pagoda's
logits and greedy continuations.

GGUF facts relied on: tensors are stored with ne[0] innermost, so a [rows, cols] weight W maps
x -> x @ W.T; llama-arch GGUFs rotate adjacent pairs (x[2i], x[2i+1]) in RoPE ("normal" style),
qwen2 and qwen3 rotate (x[i], x[i + d/2]) ("neox" style); qwen3 also RMS-normalises every query
and key head (attn_q_norm / attn_k_norm, weights of head_dim) before the rotation, as its
published modelling code does (q_norm(q_proj(x).view(..., head_dim)), then RoPE).

Mixtures of experts (qwen3moe; llama with expert_count, Mixtral), as the published modelling
code of Mixtral and Qwen3-MoE computes them: router logits = h @ ffn_gate_inp.T, a softmax over
all experts, the expert_used_count largest probabilities kept and divided by their sum
(Qwen3-MoE's norm_topk_prob; Mixtral takes the softmax of the top-k logits, the same numbers),
and the feed-forward output is sum_k p_k * down_e(silu(gate_e(h)) * up_e(h)) over the chosen
experts e, whose weights are slices [e] of the 3-D tensors ffn_{gate,up,down}_exps
(GGUF ne = [cols, rows, n_expert], so numpy shape [n_expert, rows, cols]).
"""
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


class RefModel:
    def __init__(self, path):
        r = GGUFReader(path)
        self.arch = _field(r, "general.architecture")
        a = self.arch
        self.n_layer = int(_field(r, f"{a}.block_count"))
        self.n_embd = int(_field(r, f"{a}.embedding_length"))
        self.n_head = int(_field(r, f"{a}.attention.head_count"))
        self.n_head_kv = int(_field(r, f"{a}.attention.head_count_kv", self.n_head))
        self.head_dim = int(_field(r, f"{a}.attention.key_length", self.n_embd // self.n_head))
        self.rope_dim = int(_field(r, f"{a}.rope.dimension_count", self.head_dim))
        self.rope_base = float(_field(r, f"{a}.rope.freq_base", 10000.0))
        self.eps = float(_field(r, f"{a}.attention.layer_norm_rms_epsilon", 1e-5))
        self.neox = a in ("qwen2", "qwen3", "qwen3moe")
        self.n_expert = int(_field(r, f"{a}.expert_count", 0))
        self.n_expert_used = int(_field(r, f"{a}.expert_used_count", 0))
        tensors = {t.name: t for t in r.tensors}

        def w(name):
            t = tensors[name]
            return np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float64).reshape(
                [int(d) for d in reversed(t.shape)] if len(t.shape) > 1 else [-1])

        self.tok_embd = w("token_embd.weight")
        self.output_norm = w("output_norm.weight")
        self.output = w("output.weight") if "output.weight" in tensors else self.tok_embd
        freqs = w("rope_freqs.weight") if "rope_freqs.weight" in tensors else None
        self.layers = []
        for l in range(self.n_layer):
            p = f"blk.{l}."
            ffn = [("router", "ffn_gate_inp.weight"), ("gate", "ffn_gate_exps.weight"),
                   ("up", "ffn_up_exps.weight"), ("down", "ffn_down_exps.weight")] \
                if self.n_expert else [("gate", "ffn_gate.weight"), ("up", "ffn_up.weight"),
                                       ("down", "ffn_down.weight")]
            layer = {k: w(p + n) for k, n in [
                ("attn_norm", "attn_norm.weight"), ("wq", "attn_q.weight"),
                ("wk", "attn_k.weight"), ("wv", "attn_v.weight"),
                ("wo", "attn_output.weight"), ("ffn_norm", "ffn_norm.weight")] + ffn}
            for b in ("q", "k", "v"):
                name = p + f"attn_{b}.bias"
                layer["b" + b] = w(name) if name in tensors else None
            for b in ("q", "k"):
                name = p + f"attn_{b}_norm.weight"
                layer[b + "_norm"] = w(name) if name in tensors else None
            self.layers.append(layer)
        i = np.arange(self.rope_dim // 2, dtype=np.float64)
        self.inv_freq = self.rope_base ** (-2.0 * i / self.rope_dim)
        if freqs is not None:
            self.inv_freq = self.inv_freq / freqs
        self.n_vocab = self.tok_embd.shape[0]

    def _rms(self, x, g):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * g

    def _rope(self, x, pos):
        """x: [T, H, D]; pos: [T]."""
        ang = pos[:, None] * self.inv_freq[None, :]  # [T, R/2]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        out = x.copy()
        R = self.rope_dim
        if self.neox:
            a, b = x[..., : R // 2], x[..., R // 2 : R]
            out[..., : R // 2] = a * cos - b * sin
            out[..., R // 2 : R] = a * sin + b * cos
        else:
            a, b = x[..., 0:R:2], x[..., 1:R:2]
            out[..., 0:R:2] = a * cos - b * sin
            out[..., 1:R:2] = a * sin + b * cos
        return out

    def forward(self, tokens, cache=None):
        """Logits [T, n_vocab] for `tokens` appended after the cached prefix.

        cache: list of per-layer (K, V) arrays [P, Hkv, D] for the P earlier positions (updated
        in place when given)."""
        return self.hidden(tokens, cache) @ self.output.T

    def hidden(self, tokens, cache=None):
        """The final hidden states [T, n_embd] after the output RMSNorm (what the logits are
        computed from; what an embedding pools) for `tokens` after the cached prefix (cache as
        in forward)."""
        return self._rms(self._blocks(tokens, cache), self.output_norm)

    def _blocks(self, tokens, cache=None):
        """The residual stream [T, n_embd] after the last block (before the output norm)."""
        tokens = np.asarray(tokens, dtype=np.int64)
        T = len(tokens)
        P = 0 if not cache else cache[0][0].shape[0]
        pos = np.arange(P, P + T, dtype=np.float64)
        H, Hkv, D = self.n_head, self.n_head_kv, self.head_dim
        x = self.tok_embd[tokens]
        mask = np.triu(np.full((T, P + T), -np.inf), k=P + 1)  # causal over prefix + new
        for l, L in enumerate(self.layers):
            h = self._rms(x, L["attn_norm"])
            q, k, v = h @ L["wq"].T, h @ L["wk"].T, h @ L["wv"].T
            if L["bq"] is not None:
                q, k, v = q + L["bq"], k + L["bk"], v + L["bv"]
            q, k = q.reshape(T, H, D), k.reshape(T, Hkv, D)
            if L["q_norm"] is not None:  # qwen3: each head RMS-normalised
                q, k = self._rms(q, L["q_norm"]), self._rms(k, L["k_norm"])
            q, k = self._rope(q, pos), self._rope(k, pos)
            v = v.reshape(T, Hkv, D)
            if cache is not None:
                if len(cache) <= l:
                    cache.append((np.zeros((0, Hkv, D)), np.zeros((0, Hkv, D))))
                kc, vc = cache[l]
                k, v = np.concatenate([kc, k]), np.concatenate([vc, v])
                cache[l] = (k, v)
            g = H // Hkv
            kh = np.repeat(k, g, axis=1)  # [P+T, H, D]
            vh = np.repeat(v, g, axis=1)
            s = np.einsum("thd,shd->hts", q, kh) / np.sqrt(D) + mask[None]
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s /= s.sum(axis=-1, keepdims=True)
            o = np.einsum("hts,shd->thd", s, vh).reshape(T, H * D)
            x = x + o @ L["wo"].T
            h = self._rms(x, L["ffn_norm"])
            x = x + (self._moe(h, L) if self.n_expert else self._swiglu(h, L["gate"], L["up"],
                                                                        L["down"]))
        return x

    @staticmethod
    def _swiglu(h, gate, up, down):
        gt, u = h @ gate.T, h @ up.T
        return ((gt / (1.0 + np.exp(-gt))) * u) @ down.T

    def route(self, h, L):
        """The experts [T, k] each row of h goes to and their weights [T, k]."""
        logits = h @ L["router"].T  # [T, n_expert]
        p = np.exp(logits - logits.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        top = np.argsort(-p, axis=-1, kind="stable")[:, : self.n_expert_used]
        pk = np.take_along_axis(p, top, axis=-1)
        return top, pk / pk.sum(axis=-1, keepdims=True)

    def _moe(self, h, L):
        top, wk = self.route(h, L)
        out = np.zeros_like(h)
        for t in range(h.shape[0]):
            for e, p in zip(top[t], wk[t]):
                out[t] += p * self._swiglu(h[t : t + 1], L["gate"][e], L["up"][e], L["down"][e])[0]
        return out

    def greedy(self, prompt, n, stop_ids=()):
        """Greedy continuation of `prompt` for n tokens (stops early on a stop id)."""
        cache = []
        logits = self.forward(prompt, cache)
        out = []
        for _ in range(n):
            t = int(np.argmax(logits[-1]))
            out.append(t)
            if t in stop_ids:
                break
            logits = self.forward([t], cache)
        return out
