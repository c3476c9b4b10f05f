/*
 * kernels/cpu/isa.h — the instruction-set paths of the CPU kernels (matmul, attention,
 * elementwise ops) and the CPU probe behind them (implemented in matmul.c).
 *
 * Every SIMD path of a kernel gives the same bits as its scalar reference, so the choice only
 * changes speed; tests force each path through the *_isa entry points.
 * Threading: any thread (the probe is computed once, idempotently).
 */
#ifndef PGD_KERNELS_CPU_ISA_H
#define PGD_KERNELS_CPU_ISA_H

#include <stdbool.h>

/* Instruction-set paths of the CPU kernels. AUTO picks the best one this CPU supports. */
typedef enum pgd_cpu_isa {
    PGD_ISA_AUTO = 0,
    PGD_ISA_SCALAR = 1, /* portable C, the reference */
    PGD_ISA_AVX2 = 2,   /* x86-64 AVX2 + FMA + F16C */
    PGD_ISA_AVX512 = 3, /* AVX2 path + AVX-512 VL/VNNI integer dot products (256-bit) */
} pgd_cpu_isa;

/* The path AUTO resolves to on this CPU. */
pgd_cpu_isa pgd_cpu_isa_best(void);
/* Whether this CPU (and this build) can run `isa`; AUTO and SCALAR always can. */
bool pgd_cpu_isa_supported(pgd_cpu_isa isa);
/* For the *_isa entry points: AUTO becomes the best path; 0, or PGD_EINVAL (with a message
 * naming `kernel`) when this CPU or build cannot run *isa. */
int pgd_cpu_isa_resolve(pgd_cpu_isa *isa, const char *kernel);
/* "scalar", "avx2", "avx512"; "auto" for AUTO; "?" otherwise. */
const char *pgd_cpu_isa_name(pgd_cpu_isa isa);

#endif
