"""Loads in flight, read from what the compiler made of the CUDA kernels — first the one-row
GEMV's, kernels/cuda/gemv.cu: the SASS of the build's object (sm_90a and sm_80), disassembled by NVIDIA's
cuobjdump and nvdisasm (PyPI: nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm).

A batch-1 decode step reads every weight once through this kernel, so its speed is how many
bytes are on their way from memory at once: a lane issues a round of L 16-byte loads of W, then
their FMAs. That is the source's order, not necessarily the machine's: the compiler may issue
each load after the previous chunk's FMAs (which wait for their own load), leaving one load a
lane in flight — as it did, unseen, for every GPU measurement before this check (the rounds had
a bound check per chunk, and the compiler was free to spend as few registers as it liked). So,
in the inner loop of every default one-row instance, every W load of a round (LDG.E.EF: the
streamed loads) must come before the round's first FFMA; and the lean instances
(PGD_CUDA_GEMV_LEAN=1, kept for the A/B on a GPU) must still show the problem, which is how this
check is known to see it; the same of the 4-bit GEMV's one-row instances with and without
PGD_CUDA_GEMV_Q4_ROUND. Then other loops whose speed is their loads in flight: the device
sampler's argmax and block sums, the split decode attention's V loads, RoPE + KV write's vector form. Last,
the tensor-core attention kernels' block loops: their exponentials bare, and the prefill kernel's
instructions per tensor-core product within a budget. No GPU needed; skipped in a build without
the CUDA backend.
"""
import importlib.util
import os
import pathlib
import re
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
OBJ = ROOT / "build" / "CMakeFiles" / "pgd_core.dir" / "kernels" / "cuda" / "gemv.cu.o"


def tool_dir():
    """The folder of cuobjdump (the PyPI wheels' nvidia/cu*/bin, or the PATH's)."""
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations if spec else []):
        for d in sorted(pathlib.Path(base).glob("cu*/bin")):
            if (d / "cuobjdump").exists() and (d / "nvdisasm").exists():
                return str(d)
    found = shutil.which("cuobjdump")
    return os.path.dirname(found) if found and shutil.which("nvdisasm") else None


def functions(sass):
    """{(arch, mangled name): [(address, instruction)]} from `cuobjdump -sass`."""
    out, cur, arch = {}, None, "?"
    for line in sass.splitlines():
        m = re.search(r"arch = (sm_\w+)", line)
        if m:
            arch = m.group(1)
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = (arch, m.group(1))
            out[cur] = []
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if m and cur:
            out[cur].append((int(m.group(1), 16), m.group(2)))
    return out


def back_spans(ins, predicated=True):
    """(target, branch) address spans of the branches back to an earlier address: loops. By
    default only predicated ones (the unpredicated ones back are the slow paths of divergent
    shuffles)."""
    pat = r"@!?U?P\w+ BRA (?:`\()?0x([0-9a-f]+)" if predicated else \
        r"(?:@!?U?P\w+ )?BRA (?:`\()?0x([0-9a-f]+)"
    spans = []
    for addr, text in ins:
        m = re.match(pat, text)
        if m and int(m.group(1), 16) < addr:
            spans.append((int(m.group(1), 16), addr))
    return spans


def innermost(spans):
    """The spans with no other span inside."""
    return sorted(s for s in spans
                  if not any(o != s and s[0] <= o[0] and o[1] <= s[1] for o in spans))


def inner_loops(ins):
    """The bodies of the innermost loops: a predicated branch back to an earlier address, no such
    loop inside."""
    return [[(a, t) for a, t in ins if lo <= a <= hi] for lo, hi in innermost(back_spans(ins))]


def loads_before_fma(body):
    """(streamed W loads before the first FFMA, all of them in the body)."""
    first, total = None, 0
    for _, text in body:
        if text.startswith("FFMA") and first is None:
            first = total
        if text.startswith("LDG.E.EF"):
            total += 1
    return (total if first is None else first), total


def disassemble(obj):
    """functions() of a build object (skips the test without the object or the tools)."""
    if not obj.exists():
        pytest.skip(f"built without the CUDA backend (no {obj.name})")
    tools = tool_dir()
    if not tools:
        pytest.skip("no cuobjdump / nvdisasm (tests/requirements.txt installs them on x86_64)")
    env = dict(os.environ, PATH=tools + os.pathsep + os.environ.get("PATH", ""))
    p = subprocess.run([os.path.join(tools, "cuobjdump"), "-sass", str(obj)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return functions(p.stdout)


@pytest.fixture(scope="module")
def sass():
    return disassemble(OBJ)


GEMV = re.compile(r"gemv_kernelILi(\d)ELi(\d)ELb([01])ELj(\d+)ELb([01])ELb([01])E")


def test_one_row_rounds_in_flight(sass):
    seen = {"sm_80": 0, "sm_90a": 0}
    lean_short = []
    for (arch, name), ins in sass.items():
        m = GEMV.search(name)
        if not m or arch not in seen:
            continue
        mr, r, silu, loads, early, lean = (int(g) for g in m.groups())
        if mr != 1 or loads != 4:
            continue  # rows 2-8 run on cuBLASLt by default; 8 and 16 loads are the bench's
        bodies = [loads_before_fma(b) for b in inner_loops(ins)]
        bodies = [b for b in bodies if b[1]]
        assert bodies, f"{arch} {name}: no inner loop with W loads found"
        whole = loads * r  # a round: L chunks of each of the R rows
        main = max(bodies, key=lambda b: b[1])  # the whole-rounds loop
        assert main[1] == whole, (arch, name, bodies)
        if lean:
            lean_short.append(main[0] < whole)
        else:
            assert main[0] == whole, (
                f"{arch} {name}: only {main[0]} of a round's {whole} W loads issued before "
                f"its first FFMA (every inner loop: {bodies})")
        seen[arch] += 1
    # the plain and SiLU forms: early, not, and lean
    assert seen == {"sm_80": 6, "sm_90a": 6}, seen
    assert lean_short and all(lean_short), "the lean instances keep their rounds in flight too"


GEMV_Q4 = re.compile(r"gemv_q4_kernelILi(\d)ELi(\d)ELb([01])ELb([01])ELb([01])E")


def test_q4_one_row_round_first():
    """The 4-bit GEMV at one row (kernels/cuda/gemv_q4.cu): the instances PGD_CUDA_GEMV_Q4_ROUND
    selects issue every W load of a round (2 blocks of 2 rows: 4 of nibbles, 4 of scales) before
    the round's first FFMA; the default ones fewer (nvcc 13.0: 2 to 6 of 8; the reason for the
    switch, and how this check is known to see it). The loop back is unpredicated on sm_80."""
    seen, short = {"sm_80": 0, "sm_90a": 0}, []
    for (arch, name), ins in disassemble(OBJ.parent / "gemv_q4.cu.o").items():
        m = GEMV_Q4.search(name)
        if not m or arch not in seen or int(m.group(1)) != 1:
            continue
        spans = innermost(back_spans(ins, predicated=False))
        bodies = [loads_before_fma([(a, t) for a, t in ins if lo <= a <= hi]) for lo, hi in spans]
        rounds = [b for b in bodies if b[1] == 8]  # the whole-rounds loop (and a slow path's)
        assert rounds, f"{arch} {name}: no loop with a round's 8 W loads ({bodies})"
        best = max(b[0] for b in rounds)
        if int(m.group(5)):
            assert best == 8, f"{arch} {name}: {best} of 8 W loads before the first FFMA"
        else:
            short.append(best < 8)
        seen[arch] += 1
    # the plain and SiLU forms, early or not, round first or not
    assert seen == {"sm_80": 8, "sm_90a": 8}, seen
    assert short and all(short), "the default instances keep whole rounds in flight now"


@pytest.mark.parametrize("source,kernel,load,use,n", [
    # the device sampler's argmax: one CTA reads a 128k-logit row, four 16-byte chunks a thread
    ("sample", "sample_kernel", "LDG.E.128", r"FSETP|FMNMX", 4),
    # its block sums (sampling at a temperature): a block's 64 logits, 8 chunks at once
    ("sample", "sample_kernel", "LDG.E.128", r"FADD|FMUL|FSETP|FMNMX", 8),
    # the decode rows' split attention: a thread's 8 V loads (tuned on the H200) before its FMAs
    ("attention", "attention_split_kernel", "LDG.E.128", r"HADD2|FFMA|HFMA2", 8),
    # bias + RoPE + KV write, the vector form: a unit's q/k spans and (cos, sin) spans at once
    ("rope_kv", "rope_kv_kernel", "LDG.E.128", r"FADD|FMUL|FFMA", 4),
])
def test_other_loops_loads_in_flight(source, kernel, load, use, n):
    """Other loops whose speed is their loads in flight: somewhere in the kernel at least n such
    loads are issued one after another with no instruction that uses loaded values between
    them, on each architecture."""
    obj = OBJ.parent / f"{source}.cu.o"
    found = {}
    for (arch, name), ins in disassemble(obj).items():
        if kernel not in name:
            continue
        run = best = 0
        for _, text in ins:
            if re.match(use, text):
                run = 0
            elif text.split()[0] == load:
                run += 1
                best = max(best, run)
        found[arch] = best
    assert set(found) == {"sm_80", "sm_90a"}, found
    assert all(v >= n for v in found.values()), (kernel, found)


def block_loop(ins):
    """The innermost loop holding every tensor-core product (HMMA) of a function: the
    attention kernels' walk over blocks of keys (or chunks)."""
    hmma = [a for a, t in ins if t.startswith("HMMA")]
    spans = [s for s in back_spans(ins, predicated=False)
             if hmma and s[0] <= min(hmma) and max(hmma) <= s[1]]
    assert spans, "no loop around the tensor-core products"
    lo, hi = min(spans, key=lambda s: s[1] - s[0])
    return [t for a, t in ins if lo <= a <= hi], len(hmma)


@pytest.mark.parametrize("source,kernel", [("attention_tc", "attention_tc_kernel"),
                                           ("attention_dec", "attention_dec_kernel")])
def test_attention_block_loop_lean(source, kernel):
    """The tensor-core attention kernels (prefill tiles, decode rows): per block of 64 keys a
    warp does 128 products at head_dim 128, so what else its loop issues is the kernel's cost
    (the prefill kernel is limited by instruction issue at 3 CTAs an SM). The softmax's 32
    weights a lane are bare MUFU.EX2 (pgd_attn_exp2: exp2f would guard each for a subnormal
    result with a compare and two multiplies), and the prefill kernel's block loop stays within
    7 instructions a product at head_dim 128 (734 with this check's first compiler; 1280
    before its K/V copies took a key's offset once and the softmax its masks only in a
    partial block)."""
    seen = 0
    for (arch, name), ins in disassemble(OBJ.parent / f"{source}.cu.o").items():
        if kernel not in name or arch not in ("sm_80", "sm_90a"):
            continue
        body, n_mma = block_loop(ins)
        ex2 = sum(bool(re.match(r"(?:@!?U?P\w+ )?MUFU\.EX2", t)) for t in body)
        guarded = sum(bool(re.match(r"(?:@!?U?P\w+ )?FSETP\.GEU\.AND .*, -126", t)) for t in body)
        # the block's 32 weights a lane unguarded (the decode kernel's folds of its blocks'
        # and chunks' partials keep exp2f: few, off the products' path)
        assert ex2 - guarded >= 32, (arch, name, ex2, guarded)
        if source == "attention_tc" and "ILj128E" in name:
            assert len(body) <= 7 * n_mma, (
                f"{arch} {name}: {len(body)} instructions in the block loop, "
                f"{len(body) / n_mma:.1f} a tensor-core product")
        seen += 1
    # head_dim 64 and 128 on 2 architectures; the prefill kernel also in its wide form (two
    # 16-slot tiles a warp: 4.95 instructions a product at head_dim 128 on sm_90a, 6.21 narrow)
    assert seen == (8 if source == "attention_tc" else 4), seen


def test_sampler_passes_loads_together():
    """Every pass of the device sampler over a row (argmax, top-k / top-p radix selection,
    candidates, top_logprobs) reads 16-byte chunks, four a round: in every loop of the kernel
    that issues a round's four, they are issued one after another, not spread over the round's
    work (ptxas did that to the top-p passes, whose rounds now load behind a call: load_round).
    Loops with fewer (a row's last chunks, a few a thread) are what they are."""
    obj = OBJ.parent / "sample.cu.o"
    seen = {}
    for (arch, name), ins in disassemble(obj).items():
        if "sample_kernel" not in name:
            continue
        multi = 0
        for lo, hi in innermost(back_spans(ins, predicated=False)):
            body = [t for a, t in ins if lo <= a <= hi]
            at = [k for k, t in enumerate(body) if re.match(r"(?:@!?U?P\w+ )?LDG\.E\.128", t)]
            if len(at) < 4:
                continue
            multi += 1
            between = [t.split()[0] for t in body[at[0]:at[-1] + 1]
                       if not re.match(r"(?:@!?U?P\w+ )?(LDG\.E\.128|IMAD|IADD3|LEA|MOV)", t)]
            assert len(between) <= 4, (arch, hex(lo), between[:12])
        seen[arch] = multi
    assert set(seen) == {"sm_80", "sm_90a"} and all(seen.values()), seen
