/* tests/cuda_emu/test_cuda_faults.c — on the emulator only (it injects failures into the emulated
 * runtime): the CUDA backend's create and forward under injected CUDA
 * failures, in bf16 and in 4 bits with the step's products on cuBLASLt over the weights
 * dequantized (gemm.h's pgd_cuda_gemm_deq), and (with PGD_TEST_GGUF_DIR) in 4 bits a GGUF file
 * whose fused QKV has a 4-bit and an 8-bit part, each with its own plans. Every failed create must
 * release all device and pinned memory (and, under ASan, all host memory); a forward that failed
 * must leave the backend usable: the next forward gives the same logits as a clean run. Weights
 * past the device's memory fail create with the sizes said, before any allocation. And with two
 * emulated devices (EMU_DEVICES=2), a backend created on device 1 by one thread steps from another
 * — as the scheduler's thread steps what the loading thread made — with the logits of device 0's. A
 * kernel that faults (a sticky error: the context is poisoned for good) makes the step fail with
 * PGD_EDEVLOST, and every later one at once. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/backends/factory.h"
#include "engine/model/dummy.h"
#include "engine/model/gguf.h"
#include "engine/model/model.h"
#include "engine/model/preset.h"
#include "support/preset_json.h"

void emu_fail_set(int kind, uint64_t nth);
void emu_fail_sticky(uint64_t nth_launch);
void emu_sticky_clear(void);
uint64_t emu_fail_calls(int kind);
int emu_live_allocs(int device);
enum { F_MALLOC, F_HOSTALLOC, F_LAUNCH, F_SYNC, F_N };
static const char *kind_name[F_N] = {"cudaMalloc", "cudaMallocHost", "kernel launch",
                                     "synchronize"};

enum { V = 1000, BS = 8, MAXT = 64 };
static int failures;

static pgd_cuda_weights g_weights = PGD_CUDA_WEIGHTS_AUTO; /* --gpu-weights */

static int make_on(const pgd_model *m, const char *device, pgd_backend **b) {
    pgd_backend_config bc = {
        .block_size = BS, .kv_dtype = PGD_KV_F16, .kv_blocks = 64, .max_tokens = MAXT};
    pgd_device_options o;
    pgd_device_options_default(&o);
    if (pgd_device_parse(device, &o)) return PGD_EINVAL;
    o.cuda.weights = g_weights;
    return pgd_backend_create(m, &bc, &o, b);
}
static int make(const pgd_model *m, pgd_backend **b) {
    return make_on(m, "cuda", b);
}

static int32_t tok[MAXT], pos[MAXT];
static int64_t slots[MAXT];
static uint32_t qs[3] = {0, 20, 30}, kvl[2] = {20, 10}, rows[MAXT];
static int32_t tables[2][4] = {{1, 2, 3, 0}, {4, 5, 0, 0}};
static pgd_sample_row smp[2];

static int step(pgd_backend *b, float *logits, pgd_sample_result *res) {
    for (uint32_t t = 0; t < 30; t++) {
        uint32_t s = t < 20 ? 0 : 1, p = t - qs[s];
        tok[t] = (int32_t)((t * 37 + 5) % V), pos[t] = (int32_t)p;
        slots[t] = (int64_t)tables[s][p / BS] * BS + p % BS;
    }
    for (uint32_t i = 0; i < 8; i++) rows[i] = i * 2; /* host rows, then the two sampled ones */
    smp[0] = (pgd_sample_row){.token = 19, .spec = {.temperature = 0.0f, .top_p = 1.0f}};
    smp[1] = (pgd_sample_row){.token = 29, .spec = {.temperature = 0.0f, .top_p = 1.0f}};
    pgd_batch bt = {.n_tokens = 30,
                    .tokens = tok,
                    .positions = pos,
                    .slots = slots,
                    .n_seqs = 2,
                    .q_start = qs,
                    .kv_len = kvl,
                    .block_tables = &tables[0][0],
                    .bt_stride = 4,
                    .n_logits = 8,
                    .logit_rows = rows,
                    .n_samples = 2,
                    .samples = smp};
    return pgd_backend_forward(b, &bt, logits, res);
}

/* Weights larger than the device's memory (Llama-3-405B's shapes: ~810 GB in bf16, the emulated
 * GPU 80 GiB): create says so, in GiB, before it allocates anything, and leaves nothing behind —
 * in bf16 (--gpu-weights bf16, naming the 8- and 4-bit sizes), in 8 bits (naming the 4-bit
 * size) and in 4 bits (auto's choice here: these dummy weights take 4 bits whole). */
static void weights_too_large(void) {
    pgd_model_preset p;
    pgd_model *m = NULL;
    if (pgd_test_preset_json(
            "{\"model_type\": \"llama\", \"hidden_size\": 16384, \"intermediate_size\": "
            "53248, \"num_hidden_layers\": 126, \"num_attention_heads\": 128, "
            "\"num_key_value_heads\": 8, \"vocab_size\": 128256, "
            "\"max_position_embeddings\": 8192, \"rope_theta\": 500000, "
            "\"tie_word_embeddings\": false}",
            &p) ||
        pgd_model_dummy(&p, PGD_DUMMY_SEED, true, &m)) {
        fprintf(stderr, "  the 405B-shaped preset: %s\n", pgd_error_detail());
        failures++;
        return;
    }
    static const struct {
        pgd_cuda_weights w;
        const char *said[2];
    } cases[] = {
        {PGD_CUDA_WEIGHTS_BF16,
         {"weights need 755.97 GiB", "--gpu-weights q8_0 (401.62 GiB) or q4 (236.25 GiB)"}},
        {PGD_CUDA_WEIGHTS_Q8_0,
         {"weights need 401.62 GiB of GPU memory in 8 bits", "--gpu-weights q4 (236.25 GiB)"}},
        {PGD_CUDA_WEIGHTS_AUTO, {"weights need 236.25 GiB of GPU memory in 4 bits", "cpu"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const int base_d = emu_live_allocs(1), base_h = emu_live_allocs(0);
        const uint64_t mallocs = emu_fail_calls(F_MALLOC);
        pgd_backend *b = NULL;
        g_weights = cases[i].w;
        int rc = make(m, &b);
        g_weights = PGD_CUDA_WEIGHTS_AUTO;
        const char *why = pgd_error_detail();
        if (rc != PGD_ECUDA || !strstr(why, cases[i].said[0]) || !strstr(why, cases[i].said[1]) ||
            !strstr(why, "--device cpu") || emu_fail_calls(F_MALLOC) != mallocs ||
            emu_live_allocs(1) != base_d || emu_live_allocs(0) != base_h) {
            fprintf(stderr,
                    "  weights past the GPU's memory (%s): rc %d, \"%s\", %llu cudaMalloc calls\n",
                    pgd_cuda_weights_name(cases[i].w), rc, why,
                    (unsigned long long)(emu_fail_calls(F_MALLOC) - mallocs));
            failures++;
        }
        if (!rc) pgd_backend_destroy(b);
    }
    pgd_model_free(m);
}

/* a forward on a thread of its own (whose current CUDA device is the runtime's default, 0) */
typedef struct {
    pgd_backend *b;
    float *logits;
    pgd_sample_result *res;
    int rc;
    char why[256]; /* its error detail (the detail is the thread's own) */
} step_job;
static void *step_thread(void *arg) {
    step_job *j = arg;
    j->rc = step(j->b, j->logits, j->res);
    snprintf(j->why, sizeof j->why, "%s", j->rc ? pgd_error_detail() : "");
    return NULL;
}

/* --device cuda:1 with two devices: created here, stepped twice from another thread (the second
 * step's copies and launches after the first's), destroyed here again — logits and tokens those
 * of device 0's backend (ref, rref). Without the backend making its device current on the calling
 * thread, the emulator refuses the step's launches into device 1's stream from device 0. */
static void second_device(const pgd_model *m, const float *ref, const pgd_sample_result *rref,
                          float *got) {
    setenv("EMU_DEVICES", "2", 1);
    pgd_backend *b = NULL;
    pgd_backend *none = NULL;
    if (make_on(m, "cuda:2", &none) != PGD_EUNSUPPORTED ||
        !strstr(pgd_error_detail(), "2 CUDA devices are visible (cuda:0 to cuda:1)")) {
        fprintf(stderr, "  cuda:2 with two devices: \"%s\"\n", pgd_error_detail());
        failures++;
    }
    if (make_on(m, "cuda:1", &b)) {
        fprintf(stderr, "  cuda:1: %s\n", pgd_error_detail());
        failures++;
        unsetenv("EMU_DEVICES");
        return;
    }
    if (!b->caps.device || strcmp(b->caps.device, "cuda:1, CUDA emulation on the CPU")) {
        fprintf(stderr, "  cuda:1 says it is \"%s\"\n", b->caps.device ? b->caps.device : "");
        failures++;
    }
    pgd_sample_result res[2];
    for (int i = 0; i < 2; i++) {
        memset(got, 0, 8 * V * sizeof(float));
        step_job j = {b, got, res, -1, ""};
        pthread_t t;
        if (pthread_create(&t, NULL, step_thread, &j) || pthread_join(t, NULL)) {
            failures++;
            break;
        }
        if (j.rc || memcmp(got, ref, 8 * V * sizeof(float)) || res[0].token != rref[0].token ||
            res[1].token != rref[1].token) {
            fprintf(stderr, "  cuda:1 stepped from another thread: rc %d (%s), other results\n",
                    j.rc, j.why);
            failures++;
        }
    }
    pgd_backend_destroy(b);
    unsetenv("EMU_DEVICES");
}

/* The 5th kernel of a step faults: that step fails with PGD_EDEVLOST naming the error, so does
 * the next one (without launching anything), and the backend still frees all it holds. A
 * failure that is not sticky (a failed launch: above) leaves the backend usable instead. */
static void device_lost(const pgd_model *m, float *got) {
    pgd_backend *b = NULL;
    if (make(m, &b)) {
        failures++;
        return;
    }
    pgd_sample_result res[2];
    const int base_d = emu_live_allocs(1);
    emu_fail_sticky(5);
    int rc = step(b, got, res);
    if (rc != PGD_EDEVLOST || !strstr(pgd_error_detail(), "illegal memory access") ||
        !strstr(pgd_error_detail(), "failed for good")) {
        fprintf(stderr, "  a faulting kernel: rc %d, \"%s\"\n", rc, pgd_error_detail());
        failures++;
    }
    emu_fail_sticky(0);
    rc = step(b, got, res);
    if (rc != PGD_EDEVLOST || !strstr(pgd_error_detail(), "failed for good")) {
        fprintf(stderr, "  the step after: rc %d, \"%s\"\n", rc, pgd_error_detail());
        failures++;
    }
    pgd_backend_destroy(b);
    emu_sticky_clear();
    if (emu_live_allocs(1) >= base_d) {
        fprintf(stderr, "  a lost backend destroyed: %d device allocations still live (of %d)\n",
                emu_live_allocs(1), base_d);
        failures++;
    }
}

/* Every cudaMalloc, cudaMallocHost, launch and synchronize of a create failing in turn: each
 * failed create releases all it holds. models[i] is named names[i]. */
static void create_faults(pgd_model *const *models, const char *const *names, int n_models,
                          const char *wname) {
    for (int mi = 0; mi < n_models; mi++) {
        const int base_d = emu_live_allocs(1), base_h = emu_live_allocs(0);
        for (int kind = 0; kind < F_N; kind++) {
            int n_fail = 0;
            for (uint64_t n = 1;; n++) {
                emu_fail_set(kind, n);
                pgd_backend *b = NULL;
                int rc = make(models[mi], &b);
                uint64_t calls = emu_fail_calls(kind);
                emu_fail_set(kind, 0);
                if (!rc) {
                    pgd_backend_destroy(b);
                    if (calls >= n) {
                        fprintf(stderr, "  %s model%s: create succeeded although %s %llu failed\n",
                                names[mi], wname, kind_name[kind], (unsigned long long)n);
                        failures++;
                    }
                    break;
                }
                n_fail++;
                int d = emu_live_allocs(1) - base_d, h = emu_live_allocs(0) - base_h;
                if (d || h) {
                    fprintf(stderr,
                            "  %s model%s, %s %llu failing: create returned %d (%s) and left %d "
                            "device, %d pinned allocations\n",
                            names[mi], wname, kind_name[kind], (unsigned long long)n, rc,
                            pgd_error_detail(), d, h);
                    failures++;
                }
            }
            fprintf(stderr, "%s model%s: %d failing %s(s) during create checked\n", names[mi],
                    wname, n_fail, kind_name[kind]);
        }
    }
}

/* Every launch and synchronize of a forward failing in turn: the forward fails, and the next one
 * gives the clean run's logits and tokens (ref, rref: made here). -1 where no clean run. */
static int forward_faults(const pgd_model *m, const char *wname, float *ref,
                          pgd_sample_result *rref, float *got, pgd_sample_result *rgot) {
    pgd_backend *b = NULL;
    if (make(m, &b)) return -1;
    if (step(b, ref, rref)) {
        pgd_backend_destroy(b);
        return -1;
    }
    for (int kind = 0; kind < F_N; kind++) {
        if (kind == F_MALLOC || kind == F_HOSTALLOC) continue;
        for (uint64_t n = 1;; n++) {
            emu_fail_set(kind, n);
            int rc = step(b, got, rgot);
            uint64_t calls = emu_fail_calls(kind);
            emu_fail_set(kind, 0);
            if (calls < n) break;
            if (!rc) {
                fprintf(stderr, "  forward%s succeeded although %s %llu failed\n", wname,
                        kind_name[kind], (unsigned long long)n);
                failures++;
            }
            rc = step(b, got, rgot);
            if (rc || memcmp(got, ref, 8 * V * sizeof(float)) || rgot[0].token != rref[0].token ||
                rgot[1].token != rref[1].token) {
                fprintf(stderr,
                        "  after a failed forward%s (%s %llu) the next one gives rc %d / other "
                        "results\n",
                        wname, kind_name[kind], (unsigned long long)n, rc);
                failures++;
            }
        }
    }
    pgd_backend_destroy(b);
    return 0;
}

int main(void) {
    pgd_model_preset p;
    if (pgd_test_preset_json(
            "{\"model_type\": \"qwen2\", \"hidden_size\": 256, \"intermediate_size\": 640, "
            "\"num_hidden_layers\": 2, \"num_attention_heads\": 8, \"num_key_value_heads\": 2, "
            "\"vocab_size\": 1000, \"max_position_embeddings\": 512, \"rope_theta\": 1000000, "
            "\"tie_word_embeddings\": true}",
            &p))
        return 1;
    weights_too_large();
    pgd_model *models[2];
    if (pgd_model_dummy(&p, PGD_DUMMY_SEED, true, &models[0]) ||
        pgd_model_dummy(&p, PGD_DUMMY_SEED, false, &models[1]))
        return 1;
    /* a file whose fused QKV's parts take 4 bits and 8 (tests/gpu/make_gguf.py) */
    const char *dir = getenv("PGD_TEST_GGUF_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/tiny-Q4_K_V8.gguf", dir ? dir : ".");
    pgd_gguf *gguf = NULL;
    pgd_model *file = NULL;
    if (dir && (pgd_gguf_open(path, &gguf) ||
                pgd_model_load(gguf, PGD_MODEL_RAW | PGD_MODEL_QUIET, &file))) {
        fprintf(stderr, "%s: %s\n", path, pgd_error_detail());
        return 1;
    }
    if (!dir) fprintf(stderr, "PGD_TEST_GGUF_DIR unset: no GGUF file's create faults checked\n");
    float *ref = malloc(8 * V * sizeof(float)), *got = malloc(8 * V * sizeof(float));
    pgd_sample_result rref[2], rgot[2];
    /* bf16 weights (auto's choice), then 4-bit ones with the step's 30 rows on cuBLASLt over
     * them dequantized (PGD_CUDA_DEQ_ROWS=16: its plans and scratch made at create) */
    for (int wi = 0; wi < 2; wi++) {
        g_weights = wi ? PGD_CUDA_WEIGHTS_Q4 : PGD_CUDA_WEIGHTS_AUTO;
        if (wi) setenv("PGD_CUDA_DEQ_ROWS", "16", 1);
        const char *wname = wi ? ", 4 bits dequantized" : "";
        static const char *const names[] = {"shapes", "data", "Q4_K_V8 file"};
        create_faults(models, names, 2, wname);
        if (forward_faults(models[0], wname, ref, rref, got, rgot)) return 1;
        if (wi && file) create_faults(&file, names + 2, 1, wname);
        unsetenv("PGD_CUDA_DEQ_ROWS");
    }
    g_weights = PGD_CUDA_WEIGHTS_AUTO;
    pgd_backend *b = NULL;
    if (make(models[0], &b) || step(b, ref, rref)) return 1;
    pgd_backend_destroy(b);
    second_device(models[0], ref, rref, got);
    device_lost(models[0], got);
    pgd_model_free(models[0]);
    pgd_model_free(models[1]);
    pgd_model_free(file);
    pgd_gguf_close(gguf);
    free(ref);
    free(got);
    fprintf(stderr, "%d failure(s)\n", failures);
    return failures != 0;
}
