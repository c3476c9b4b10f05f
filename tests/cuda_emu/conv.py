#!/usr/bin/env python3
"""Rewrite a .cu file into C++ for the emulator (tests/cuda_emu/run):
  K<<<g, b, smem, stream>>>(args)          -> emu_launch(emu_cfg(g, b, smem, stream), K, "K", args)
  __shared__ [__align__(N)] T name[dims];  -> a per-CTA block from emu_smem_get (poisoned, bounds
                                              checked under ASan)
  extern __shared__ T name[];              -> T *name = (T *)emu_dyn_smem();
  __launch_bounds__(X[, Y]) ... {          -> ... { emu_check_bounds(X);
Usage: conv.py in.cu [--small-grid]"""
import re, sys

src = open(sys.argv[1]).read()
if "--small-grid" in sys.argv:  # before any include: kernels/cuda/cuda_util.cuh keeps it
    src = "#define PGD_CUDA_MAX_CTAS 3u\n#line 1\n" + src

# launches
out = ""
s = src
while True:
    i = s.find("<<<")
    if i < 0:
        break
    end = i
    while s[end - 1].isspace():
        end -= 1
    j = end
    if s[j - 1] == ">":  # template arguments: K<T> <<<...
        depth, j = 0, j - 1
        while True:
            if s[j] == ">": depth += 1
            elif s[j] == "<":
                depth -= 1
                if depth == 0: break
            j -= 1
    k0 = re.search(r"[A-Za-z_][A-Za-z_0-9:]*$", s[:j]).start()
    kname = s[k0:end]
    e = s.find(">>>", i)
    p = s.find("(", e)
    out += s[:k0] + "emu_launch(emu_cfg(" + s[i + 3:e] + "), " + kname + ', "' + \
        re.sub(r"\s+", "", kname) + '", '
    s = s[p + 1:]
    # a launch with no arguments: "emu_launch(..., )" -> fix the trailing comma
    if s.lstrip().startswith(")"):
        out = out[:-2]
src = out + s

# dynamic shared memory
src = re.sub(r"extern\s+__shared__\s+(?:__align__\(\d+\)\s+)?([\w:]+)\s+(\w+)\s*\[\s*\]\s*;",
             r"\1 *\2 = (\1 *)emu_dyn_smem();", src)

# static shared memory
counter = [0]
def shared(m):
    align, typ, name, dims = m.group(1), m.group(2), m.group(3), m.group(4) or ""
    counter[0] += 1
    n = counter[0]
    t = "emu_sh_%d_t" % n
    al = align if align else "alignof(%s)" % t
    return "typedef %s %s%s; %s &%s = *(%s *)emu_smem_get(%d, sizeof(%s), %s);" % (
        typ, t, dims, t, name, t, n, t, al)
src = re.sub(r"__shared__\s+(?:__align__\((\d+)\)\s+)?([\w:]+)\s+(\w+)\s*((?:\[[^\]]*\])*)\s*;",
             shared, src)

# launch bounds
out, pos = "", 0
for m in re.finditer(r"__launch_bounds__\(([^)]*)\)", src):
    if m.start() < pos:
        continue
    b = src.find("{", m.end())
    # the first argument only: the most threads (a minimum of CTAs an SM means nothing here)
    out += src[pos:m.start()] + src[m.end():b + 1] + " emu_check_bounds(%s);" % m.group(1).split(",")[0]
    pos = b + 1
src = out + src[pos:]
sys.stdout.write(src)
