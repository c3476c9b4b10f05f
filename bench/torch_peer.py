"""The peer for scripts/gpu-check: PyTorch + transformers on the same preset shapes
(configs/models/NAME.json) with random bf16 weights and a static KV cache, on the same GPU, in
the same run as pagoda's numbers. Measures batch-1 decode ms/token at a 1k-token context and
prefill tokens/s over a 2k-token prompt. Prints one JSON object (an "error" field if something
was unavailable: the peer is a reference, not a gate).

    python3 bench/torch_peer.py configs/models/llama-3-8b.json
"""
import json
import sys
import time


def main(preset_path, ctx=1024, gen=64, prefill=2048):
    out = {"peer": "pytorch+transformers", "preset": preset_path}
    try:
        import torch
        import transformers
        from transformers import AutoConfig, AutoModelForCausalLM
    except Exception as e:  # pragma: no cover - depends on the GPU machine
        out["error"] = f"import: {e}"
        return out
    out["torch"] = torch.__version__
    out["transformers"] = transformers.__version__
    cfg_dict = {k: v for k, v in json.load(open(preset_path)).items() if not k.startswith("_")}
    try:
        model_type = cfg_dict.pop("model_type")
        cfg = AutoConfig.for_model(model_type, **cfg_dict)
        cfg.torch_dtype = torch.bfloat16
        with torch.device("cuda"):
            model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16)
        model.eval()
        dev = torch.device("cuda")
        gen_ids = torch.randint(0, cfg.vocab_size, (1, ctx), device=dev)
        with torch.inference_mode():
            # prefill rate over a 2k prompt
            ids = torch.randint(0, cfg.vocab_size, (1, prefill), device=dev)
            model(ids)  # warm-up
            torch.cuda.synchronize()
            t = time.perf_counter()
            model(ids)
            torch.cuda.synchronize()
            out["prefill_tokens_per_s"] = prefill / (time.perf_counter() - t)
            # decode at a 1k context with a static cache
            try:
                from transformers import StaticCache
                cache = StaticCache(config=cfg, max_batch_size=1, max_cache_len=ctx + gen + 8,
                                    device=dev, dtype=torch.bfloat16)
                out["cache"] = "static"
            except Exception:  # older/newer signatures: fall back to the default cache
                cache = None
                out["cache"] = "dynamic"
            r = model(gen_ids, past_key_values=cache, use_cache=True)
            past = r.past_key_values
            nxt = r.logits[:, -1:].argmax(-1)
            pos = ctx
            for _ in range(4):  # warm-up steps
                r = model(nxt, past_key_values=past, use_cache=True,
                          cache_position=torch.tensor([pos], device=dev))
                past, nxt, pos = r.past_key_values, r.logits[:, -1:].argmax(-1), pos + 1
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(gen):
                r = model(nxt, past_key_values=past, use_cache=True,
                          cache_position=torch.tensor([pos], device=dev))
                past, nxt, pos = r.past_key_values, r.logits[:, -1:].argmax(-1), pos + 1
            torch.cuda.synchronize()
            out["decode_ms_per_token"] = (time.perf_counter() - t) * 1e3 / gen
    except Exception as e:  # pragma: no cover
        out["error"] = f"{type(e).__name__}: {e}"
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1] if len(sys.argv) > 1 else "configs/models/llama-3-8b.json")))
