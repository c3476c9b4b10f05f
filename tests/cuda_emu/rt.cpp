/*
 * tests/cuda_emu/rt.cpp — a CPU emulator of the CUDA runtime subset pagoda uses (a testing tool,
 * never linked into pagoda; tests/cuda_emu/run says how it is used). Device memory is host memory
 * that the host cannot touch outside "device" execution (normal mode: an mprotect'ed arena with
 * guard pages; ASan mode: malloc blocks with redzones). Streams queue their work and run it only
 * when the host synchronises (EMU_DEFER=0: at once), so a missing synchronisation shows up as stale
 * data or a fault on a protected pinned page. A CTA runs its threads as fibers on one OS thread,
 * switching at __syncthreads and warp shuffles; EMU_ORDER=fwd|rev|shuf picks the order threads (and
 * CTAs) run between synchronisations, each thread up to its next one, a warp's shuffle completing
 * once every thread has had its turn; EMU_ORDER=warp runs each warp alone from one __syncthreads
 * to the next (its shuffles completing at once), warp 0 first, so a warp that reads what a later
 * warp writes to shared memory without a barrier between reads it unwritten. Stream capture records
 * a stream's work into a graph instead of queuing it (a synchronisation or a pageable host copy
 * while capturing is an error, as on a GPU); a graph launch queues the recorded work again, with
 * the arguments it was captured with. EMU_DEVICES=N (default 1) emulates N devices sharing one
 * memory arena: each host thread has its current device (0 until cudaSetDevice), allocations,
 * streams and events belong to the device current at their creation, and what the runtime refuses
 * across devices is an error here too — a kernel (or cuBLASLt) launched into a stream of another
 * device than the current one, an event recorded into another device's stream — as is a kernel
 * argument in another device's memory (no peer access is enabled).
 */
#include "emu.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <execinfo.h>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <signal.h>
#include <string>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#include <sanitizer/common_interface_defs.h>
#else
#define EMU_ASAN 0
#endif

/* ---- errors --------------------------------------------------------------------------------- */

static int g_errors;
static thread_local cudaError_t g_last = cudaSuccess;
static const char *g_ctx = "host";

void emu_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "EMU ERROR [%s]: ", g_ctx);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    g_errors++;
    if (getenv("EMU_ABORT")) {
        void *bt[64];
        int n = backtrace(bt, 64);
        backtrace_symbols_fd(bt, n, 2);
        abort();
    }
}

static cudaError_t fail(cudaError_t e) {
    g_last = e;
    return e;
}

extern "C" int emu_live_allocs(int device);
static void at_exit_report() {
    int nd = emu_live_allocs(1), nh = emu_live_allocs(0);
    if (nd || nh) {
        fprintf(stderr, "EMU: at exit %d device and %d pinned host allocation(s) are still live\n",
                nd, nh);
        if (getenv("EMU_LEAK_CHECK")) g_errors++;
    }
    if (g_errors) {
        fprintf(stderr, "EMU: %d emulator error(s) reported\n", g_errors);
        fflush(stderr);
        _exit(97);
    }
}

/* fault injection: the Nth call of a kind fails (1-based; 0: never), from the environment
 * (EMU_FAIL_MALLOC, EMU_FAIL_HOSTALLOC, EMU_FAIL_LAUNCH, EMU_FAIL_SYNC) or emu_fail_set */
enum { F_MALLOC, F_HOSTALLOC, F_LAUNCH, F_SYNC, F_N };
static uint64_t g_fail_at[F_N], g_fail_count[F_N];
extern "C" void emu_fail_set(int kind, uint64_t nth) {
    g_fail_at[kind] = nth;
    g_fail_count[kind] = 0;
}
extern "C" uint64_t emu_fail_calls(int kind) {
    return g_fail_count[kind];
}
static bool inject(int kind) {
    g_fail_count[kind]++;
    return g_fail_at[kind] && g_fail_count[kind] == g_fail_at[kind];
}

/* A sticky error, as a kernel that faults (an illegal address) leaves on a GPU: the Nth kernel
 * launched after emu_fail_sticky(N) runs as nothing and, when it runs, poisons the context —
 * from then on every runtime call that launches, copies, allocates or synchronises fails with
 * cudaErrorIllegalAddress, and cudaGetLastError reports it without clearing it. On a GPU only a
 * new process recovers; emu_sticky_clear() lets a test go on. */
static cudaError_t g_sticky = cudaSuccess;
static uint64_t g_sticky_at, g_sticky_launches;
extern "C" void emu_fail_sticky(uint64_t nth_launch) {
    g_sticky_at = nth_launch;
    g_sticky_launches = 0;
}
extern "C" void emu_sticky_clear(void) {
    g_sticky = cudaSuccess;
    g_sticky_at = 0;
}
#define STICKY()                                                                                   \
    do {                                                                                           \
        if (g_sticky != cudaSuccess) return fail(g_sticky);                                        \
    } while (0)

static bool env_on(const char *name, bool dflt) {
    const char *v = getenv(name);
    return v ? strcmp(v, "0") != 0 : dflt;
}

/* ---- memory --------------------------------------------------------------------------------- */

static const size_t PAGE = 4096;
static size_t round_up(size_t x, size_t a) {
    return (x + a - 1) / a * a;
}

struct Alloc {
    uintptr_t start;
    size_t size;
    uintptr_t region; /* page-aligned pages holding it (normal mode) */
    size_t region_size;
    bool device, live;
    int dev; /* the device current at its allocation (device memory) */
};
static std::map<uintptr_t, Alloc> g_allocs; /* by start; freed ones stay (normal mode) */
static char *g_arena;
static size_t g_arena_size = 256ull << 30, g_arena_used = PAGE;
static size_t g_dev_used, g_dev_total = 80ull << 30;
static const size_t k_ctx_reserve = 512ull << 20;
static int g_in_device; /* > 0 while emulated device work runs */

/* ---- devices -------------------------------------------------------------------------------- */

/* EMU_DEVICES (1 to 8, default 1) */
static int n_devices() {
    const char *e = getenv("EMU_DEVICES");
    const int n = e ? atoi(e) : 1;
    return n < 1 ? 1 : n > 8 ? 8 : n;
}
static thread_local int g_dev = 0; /* the calling thread's current device, as the runtime's */

static Alloc *find_alloc(const void *p, bool allow_end) {
    uintptr_t a = (uintptr_t)p;
    auto it = g_allocs.upper_bound(a);
    if (it == g_allocs.begin()) return nullptr;
    --it;
    Alloc &al = it->second;
    if (a < al.start + al.size || (allow_end && a == al.start + al.size)) return &al;
    return nullptr;
}

static Alloc *live_device(const void *p, size_t n) {
    Alloc *a = find_alloc(p, n == 0);
    if (!a || !a->device || !a->live) return nullptr;
    if ((uintptr_t)p + n > a->start + a->size) return nullptr;
    return a;
}

static bool is_device_addr(const void *p) {
    Alloc *a = find_alloc(p, false);
    return a && a->device;
}

/* pending async copies to or from pinned host memory: pages protected until they run */
struct PinRange {
    uintptr_t lo, hi; /* page range */
    bool write;       /* the device writes it (host may not even read) */
};
static std::multiset<std::pair<uintptr_t, uintptr_t>> g_pin_read, g_pin_write;

static void set_device_prot(bool device_view) {
#if !EMU_ASAN
    for (auto &kv : g_allocs) {
        Alloc &a = kv.second;
        if (!a.device || !a.live) continue;
        mprotect((void *)a.region, a.region_size, device_view ? PROT_READ | PROT_WRITE : PROT_NONE);
    }
#else
    (void)device_view;
#endif
    for (auto &kv : g_allocs) {
        Alloc &a = kv.second;
        if (a.device || !a.live) continue;
        mprotect((void *)a.start, round_up(a.size, PAGE), PROT_READ | PROT_WRITE);
    }
    if (!device_view) {
        for (auto &r : g_pin_read) mprotect((void *)r.first, r.second - r.first, PROT_READ);
        for (auto &r : g_pin_write) mprotect((void *)r.first, r.second - r.first, PROT_NONE);
    }
}

struct DeviceScope {
    const char *prev;
    DeviceScope(const char *what) : prev(g_ctx) {
        if (g_in_device++ == 0) set_device_prot(true);
        g_ctx = what;
    }
    ~DeviceScope() {
        g_ctx = prev;
        if (--g_in_device == 0) set_device_prot(false);
    }
};

static void segv_handler(int sig, siginfo_t *si, void *) {
    const void *p = si->si_addr;
    char buf[512];
    const char *why = "unknown address";
    Alloc *a = find_alloc(p, false);
    uintptr_t x = (uintptr_t)p;
    if (g_arena && x >= (uintptr_t)g_arena && x < (uintptr_t)g_arena + g_arena_size) {
        if (a && a->live)
            why = g_in_device ? "device access to a live allocation?"
                              : "HOST CODE DEREFERENCED DEVICE MEMORY";
        else if (a)
            why = "access to FREED device memory";
        else
            why = "OUT-OF-BOUNDS device access (guard page or slack)";
        if (!a) {
            auto it = g_allocs.upper_bound(x);
            if (it != g_allocs.begin()) {
                --it;
                snprintf(buf, sizeof buf,
                         " (nearest allocation below: %p, %zu bytes, %zd bytes past its end)",
                         (void *)it->second.start, it->second.size,
                         (ssize_t)(x - (it->second.start + it->second.size)));
                fprintf(stderr, "EMU FAULT%s\n", buf);
            }
        }
    } else if (a && !a->device) {
        why = "HOST TOUCHED A PINNED BUFFER WHILE AN ASYNC COPY ON IT IS PENDING";
    }
    fprintf(stderr, "EMU FAULT [%s] at %p: %s\n", g_ctx, p, why);
    void *bt[64];
    int n = backtrace(bt, 64);
    backtrace_symbols_fd(bt, n, 2);
    signal(sig, SIG_DFL);
    raise(sig);
}

struct Init {
    Init() {
#if !EMU_ASAN
        g_arena = (char *)mmap(nullptr, g_arena_size, PROT_NONE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (g_arena == MAP_FAILED) {
            perror("emu arena");
            abort();
        }
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = segv_handler;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        static char altstack[1 << 16];
        stack_t ss = {altstack, 0, sizeof altstack};
        sigaltstack(&ss, nullptr);
        sigaction(SIGSEGV, &sa, nullptr);
        sigaction(SIGBUS, &sa, nullptr);
#endif
        if (const char *m = getenv("EMU_MEM_GB")) g_dev_total = strtoull(m, nullptr, 10) << 30;
        const char *fe[F_N] = {"EMU_FAIL_MALLOC", "EMU_FAIL_HOSTALLOC", "EMU_FAIL_LAUNCH",
                               "EMU_FAIL_SYNC"};
        for (int i = 0; i < F_N; i++)
            if (const char *v = getenv(fe[i])) g_fail_at[i] = strtoull(v, nullptr, 10);
        atexit(at_exit_report);
    }
} g_init;

extern "C" int emu_live_allocs(int device) {
    int n = 0;
    for (auto &kv : g_allocs) n += kv.second.live && kv.second.device == (device != 0);
    return n;
}

static void *dev_alloc(size_t n) {
    size_t rs = round_up(n ? n : 1, 256);
#if EMU_ASAN
    void *p = nullptr;
    if (posix_memalign(&p, 256, n ? n : 1)) return nullptr;
    memset(p, 0xFF, n ? n : 1);
    g_allocs[(uintptr_t)p] = Alloc{(uintptr_t)p, n, (uintptr_t)p, n, true, true, g_dev};
    (void)rs;
    return p;
#else
    size_t pages = round_up(rs, PAGE);
    if (g_arena_used + pages + PAGE > g_arena_size) return nullptr;
    char *region = g_arena + g_arena_used;
    g_arena_used += pages + PAGE; /* a guard page after every allocation */
    mprotect(region, pages, PROT_READ | PROT_WRITE);
    char *p = region + pages - rs;
    memset(p, 0xFF, rs);
    if (!g_in_device) mprotect(region, pages, PROT_NONE);
    g_allocs[(uintptr_t)p] = Alloc{(uintptr_t)p, n, (uintptr_t)region, pages, true, true, g_dev};
    return p;
#endif
}

static void dev_free(Alloc *a) {
    a->live = false;
#if EMU_ASAN
    free((void *)a->start);
    g_allocs.erase(a->start);
#else
    mprotect((void *)a->region, a->region_size, PROT_NONE);
    madvise((void *)a->region, a->region_size, MADV_DONTNEED);
#endif
}

/* ---- streams, events ------------------------------------------------------------------------ */

struct Op {
    uint64_t seq;
    std::function<void()> fn;
    std::string what;
    std::vector<PinRange> pins;
};
struct Stream {
    bool legacy, nonblocking;
    std::deque<Op> q;
    int dev = -1; /* its device (-1: the legacy stream, the current device's) */
    bool capturing = false, cap_invalid = false;
    std::vector<Op> cap; /* what a capture recorded */
};
struct Graph {
    std::vector<Op> ops;
};
static std::set<Graph *> g_graphs, g_execs;
static Stream g_legacy = {true, false, {}};
static std::set<Stream *> g_streams = {&g_legacy};
static uint64_t g_seq;
static bool g_defer = env_on("EMU_DEFER", true);

struct Event {
    Stream *s;
    uint64_t seq;
    bool recorded, timing;
    int dev; /* the device current at its creation */
};
static std::set<Event *> g_events;

/* The device a stream's work runs on: its own, or the current one for the legacy stream. */
static int dev_of(const Stream *S) {
    return S->dev < 0 ? g_dev : S->dev;
}

static Stream *stream_of(cudaStream_t s) {
    if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return &g_legacy;
    Stream *st = (Stream *)s;
    return g_streams.count(st) ? st : nullptr;
}

static void unpin(const std::vector<PinRange> &pins) {
    for (auto &r : pins) {
        auto &set = r.write ? g_pin_write : g_pin_read;
        auto it = set.find({r.lo, r.hi});
        if (it != set.end()) set.erase(it);
    }
}

static void flush(Stream *s, uint64_t upto);

static void exec_front(Stream *s) {
    Op op = std::move(s->q.front());
    s->q.pop_front();
    /* implicit ordering of the legacy stream with the blocking streams */
    if (s->legacy) {
        for (Stream *b : g_streams)
            if (!b->legacy && !b->nonblocking) flush(b, op.seq - 1);
    } else if (!s->nonblocking) {
        flush(&g_legacy, op.seq - 1);
    }
    unpin(op.pins);
    if (g_sticky != cudaSuccess) return; /* a poisoned context runs nothing more */
    DeviceScope d(op.what.c_str());
    op.fn();
}

static void flush(Stream *s, uint64_t upto) {
    while (!s->q.empty() && s->q.front().seq <= upto) exec_front(s);
}

static void flush_all() {
    for (;;) {
        Stream *best = nullptr;
        for (Stream *s : g_streams)
            if (!s->q.empty() && (!best || s->q.front().seq < best->q.front().seq)) best = s;
        if (!best) return;
        exec_front(best);
    }
}

static uint64_t enqueue(Stream *s, std::string what, std::function<void()> fn,
                        std::vector<PinRange> pins = {}) {
    if (s->capturing) { /* recorded, not run: its pins apply when a launch enqueues it */
        s->cap.push_back(Op{0, std::move(fn), std::move(what), std::move(pins)});
        return 0;
    }
    uint64_t seq = ++g_seq;
    const bool has_pins = !pins.empty();
    for (auto &r : pins) (r.write ? g_pin_write : g_pin_read).insert({r.lo, r.hi});
    s->q.push_back(Op{seq, std::move(fn), std::move(what), std::move(pins)});
    if (!g_defer)
        flush(s, seq);
    else if (has_pins && !g_in_device)
        set_device_prot(false); /* protect the pinned pages now */
    return seq;
}

/* The pinned pages of host range [p, p + n) (none for pageable memory). */
static std::vector<PinRange> pins_of(const void *p, size_t n, bool device_writes) {
    std::vector<PinRange> v;
    Alloc *a = find_alloc(p, false);
    if (!a || a->device || !n) return v;
    uintptr_t lo = (uintptr_t)p & ~(PAGE - 1), hi = round_up((uintptr_t)p + n, PAGE);
    v.push_back(PinRange{lo, hi, device_writes});
    return v;
}

/* ---- runtime API: errors, device ------------------------------------------------------------ */

extern "C" {

cudaError_t cudaGetLastError(void) {
    if (g_sticky != cudaSuccess) return g_sticky;
    cudaError_t e = g_last;
    g_last = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) {
    return g_sticky != cudaSuccess ? g_sticky : g_last;
}

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess:
        return "no error";
    case cudaErrorInvalidValue:
        return "invalid argument (emulated)";
    case cudaErrorMemoryAllocation:
        return "out of memory (emulated)";
    case cudaErrorInvalidConfiguration:
        return "invalid configuration argument (emulated)";
    case cudaErrorInvalidResourceHandle:
        return "invalid resource handle (emulated)";
    case cudaErrorLaunchOutOfResources:
        return "too many resources requested for launch (emulated)";
    case cudaErrorInvalidDevice:
        return "invalid device ordinal (emulated)";
    case cudaErrorNoDevice:
        return "no CUDA-capable device is detected (emulated)";
    case cudaErrorIllegalAddress:
        return "an illegal memory access was encountered (emulated)";
    default:
        return "emulated CUDA error";
    }
}
const char *cudaGetErrorName(cudaError_t e) {
    return cudaGetErrorString(e);
}

cudaError_t cudaGetDeviceCount(int *n) {
    if (env_on("EMU_NO_DEVICE", false)) {
        *n = 0;
        return fail(cudaErrorNoDevice);
    }
    *n = n_devices();
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
    if (d < 0 || d >= n_devices()) return fail(cudaErrorInvalidDevice);
    g_dev = d;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int *d) {
    *d = g_dev;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr attr, int dev) {
    if (dev < 0 || dev >= n_devices()) return fail(cudaErrorInvalidDevice);
    switch (attr) {
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
        *v = 232448;
        return cudaSuccess; /* H100 */
    case cudaDevAttrMaxSharedMemoryPerBlock:
        *v = 49152;
        return cudaSuccess;
    case cudaDevAttrMultiProcessorCount:
        *v = 132;
        return cudaSuccess;
    case cudaDevAttrMaxThreadsPerBlock:
        *v = 1024;
        return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor:
        *v = 9;
        return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
        *v = 0;
        return cudaSuccess;
    case cudaDevAttrWarpSize:
        *v = 32;
        return cudaSuccess;
    default:
        emu_error("cudaDeviceGetAttribute(%d) not emulated", (int)attr);
        return fail(cudaErrorInvalidValue);
    }
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev) {
    if (dev < 0 || dev >= n_devices()) return fail(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "CUDA emulation on the CPU");
    p->totalGlobalMem = g_dev_total;
    p->multiProcessorCount = 132;
    p->major = 9;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->sharedMemPerBlock = 49152;
    p->sharedMemPerBlockOptin = 232448;
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) {
    *total = g_dev_total;
    size_t used = g_dev_used + k_ctx_reserve;
    *free_b = used < g_dev_total ? g_dev_total - used : 0;
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
    STICKY();
    flush_all();
    STICKY();
    return cudaSuccess;
}

/* ---- memory ---------------------------------------------------------------------------------- */

cudaError_t cudaMalloc(void **p, size_t n) {
    STICKY();
    *p = nullptr;
    if (inject(F_MALLOC)) return fail(cudaErrorMemoryAllocation);
    if (g_dev_used + n + k_ctx_reserve > g_dev_total) return fail(cudaErrorMemoryAllocation);
    void *q = dev_alloc(n);
    if (!q) return fail(cudaErrorMemoryAllocation);
    g_dev_used += round_up(n, 256);
    *p = q;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    flush_all(); /* cudaFree synchronises */
    Alloc *a = find_alloc(p, false);
    if (!a || !a->device || !a->live || a->start != (uintptr_t)p) {
        emu_error("cudaFree(%p): not the start of a live device allocation", p);
        return fail(cudaErrorInvalidValue);
    }
    g_dev_used -= round_up(a->size, 256);
    dev_free(a);
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t n) {
    STICKY();
    if (inject(F_HOSTALLOC)) {
        *p = nullptr;
        return fail(cudaErrorMemoryAllocation);
    }
    size_t sz = round_up(n ? n : 1, PAGE);
    void *q = mmap(nullptr, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (q == MAP_FAILED) {
        *p = nullptr;
        return fail(cudaErrorMemoryAllocation);
    }
    memset(q, 0xFF, sz); /* uninitialised: poisoned */
    g_allocs[(uintptr_t)q] = Alloc{(uintptr_t)q, n ? n : 1, (uintptr_t)q, sz, false, true};
    *p = q;
    return cudaSuccess;
}
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int) {
    return cudaMallocHost(p, n);
}

cudaError_t cudaFreeHost(void *p) {
    if (!p) return cudaSuccess;
    flush_all();
    auto it = g_allocs.find((uintptr_t)p);
    if (it == g_allocs.end() || it->second.device) {
        emu_error("cudaFreeHost(%p): not a pinned allocation", p);
        return fail(cudaErrorInvalidValue);
    }
    munmap(p, it->second.region_size);
    g_allocs.erase(it);
    return cudaSuccess;
}

/* Check a copy's pointers against its kind; fills the kind when cudaMemcpyDefault. */
static bool check_copy(void *d, const void *s, size_t n, cudaMemcpyKind &k, const char *fn) {
    bool dd = is_device_addr(d), sd = is_device_addr(s);
    if (k == cudaMemcpyDefault)
        k = dd ? (sd ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
               : (sd ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    bool want_dd = k == cudaMemcpyHostToDevice || k == cudaMemcpyDeviceToDevice;
    bool want_sd = k == cudaMemcpyDeviceToHost || k == cudaMemcpyDeviceToDevice;
    if (dd != want_dd || sd != want_sd) {
        emu_error("%s(%p <- %p, %zu bytes, kind %d): the pointers do not match the kind "
                  "(dst %s, src %s)",
                  fn, d, s, n, (int)k, dd ? "device" : "host", sd ? "device" : "host");
        return false;
    }
    if (n && dd && !live_device(d, n)) {
        emu_error("%s: destination [%p, +%zu) is not inside one live device allocation", fn, d, n);
        return false;
    }
    if (n && sd && !live_device(s, n)) {
        emu_error("%s: source [%p, +%zu) is not inside one live device allocation", fn, s, n);
        return false;
    }
    return true;
}

cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind k) {
    STICKY();
    if (!check_copy(d, s, n, k, "cudaMemcpy")) return fail(cudaErrorInvalidValue);
    /* the runtime API's synchronisation rules for cudaMemcpy (legacy default stream):
     *   H2D from pageable memory: the legacy stream is synchronised, the source staged, the call
     *     returns "but the DMA to final destination may not have completed" — modelled as the
     *     DMA queued on the legacy stream (a non-blocking stream does not wait for it);
     *   H2D from pinned memory, D2H: synchronous; D2D: no host-side synchronisation (queued). */
    if (k == cudaMemcpyDeviceToDevice) {
        enqueue(&g_legacy, "cudaMemcpy D2D", [=]() {
            if (n) memmove(d, s, n);
        });
        return cudaSuccess;
    }
    flush(&g_legacy, UINT64_MAX);
    for (Stream *b : g_streams)
        if (!b->legacy && !b->nonblocking) flush(b, UINT64_MAX);
    Alloc *src = find_alloc(s, false);
    if (k == cudaMemcpyHostToDevice && !(src && !src->device) && env_on("EMU_PAGEABLE_DMA", true)) {
        auto staged = std::make_shared<std::vector<char>>((const char *)s, (const char *)s + n);
        enqueue(&g_legacy, "cudaMemcpy H2D (pageable: DMA after return)", [=]() {
            if (n) memcpy(d, staged->data(), n);
        });
        return cudaSuccess;
    }
    DeviceScope ds("cudaMemcpy");
    if (n) memmove(d, s, n);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t st) {
    STICKY();
    Stream *S = stream_of(st);
    if (!S) {
        emu_error("cudaMemcpyAsync on an invalid stream %p", (void *)st);
        return fail(cudaErrorInvalidResourceHandle);
    }
    if (!check_copy(d, s, n, k, "cudaMemcpyAsync")) return fail(cudaErrorInvalidValue);
    std::vector<PinRange> pins;
    if (k == cudaMemcpyHostToDevice) pins = pins_of(s, n, false);
    if (k == cudaMemcpyDeviceToHost) pins = pins_of(d, n, true);
    if (S->capturing && n && (k == cudaMemcpyHostToDevice || k == cudaMemcpyDeviceToHost) &&
        pins.empty()) {
        emu_error("cudaMemcpyAsync of pageable host memory captured into a graph");
        S->cap_invalid = true;
        return fail(cudaErrorStreamCaptureUnsupported);
    }
    char what[96];
    snprintf(what, sizeof what, "cudaMemcpyAsync kind %d %zu bytes", (int)k, n);
    enqueue(
        S, what,
        [=]() {
            if (n) memmove(d, s, n);
        },
        pins);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t st) {
    STICKY();
    Stream *S = stream_of(st);
    if (!S) return fail(cudaErrorInvalidResourceHandle);
    if (n && !live_device(d, n)) {
        emu_error("cudaMemset(%p, %zu bytes): not inside one live device allocation", d, n);
        return fail(cudaErrorInvalidValue);
    }
    enqueue(S, "cudaMemset", [=]() { memset(d, v, n); });
    return cudaSuccess;
}
cudaError_t cudaMemset(void *d, int v, size_t n) {
    return cudaMemsetAsync(d, v, n, nullptr);
}

/* ---- streams and events ---------------------------------------------------------------------- */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    Stream *st = new Stream{false, (flags & cudaStreamNonBlocking) != 0, {}};
    st->dev = g_dev;
    g_streams.insert(st);
    *s = (cudaStream_t)st;
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) {
    return cudaStreamCreateWithFlags(s, 0);
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    Stream *st = stream_of(s);
    if (!st || st->legacy) {
        emu_error("cudaStreamDestroy(%p): not a live stream", (void *)s);
        return fail(cudaErrorInvalidResourceHandle);
    }
    flush(st, UINT64_MAX); /* pending work still completes */
    g_streams.erase(st);
    delete st;
    return cudaSuccess;
}
/* An injected synchronisation failure stands for a fault of the queued work (on a GPU a sticky
 * error): that work is dropped, as a faulting context runs nothing more of it. */
static void drop_queue(Stream *st, uint64_t upto) {
    while (st && !st->q.empty() && st->q.front().seq <= upto) {
        unpin(st->q.front().pins);
        st->q.pop_front();
    }
    if (!g_in_device) set_device_prot(false);
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    STICKY();
    if (inject(F_SYNC)) {
        drop_queue(stream_of(s), UINT64_MAX);
        return fail(cudaErrorLaunchFailure);
    }
    Stream *st = stream_of(s);
    if (!st) {
        emu_error("cudaStreamSynchronize(%p): not a live stream", (void *)s);
        return fail(cudaErrorInvalidResourceHandle);
    }
    if (st->capturing) {
        emu_error("cudaStreamSynchronize on a capturing stream");
        st->cap_invalid = true;
        return fail(cudaErrorStreamCaptureUnsupported);
    }
    flush(st, UINT64_MAX);
    STICKY(); /* a kernel that ran just now may have faulted */
    return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode) {
    STICKY();
    Stream *st = stream_of(s);
    if (!st || st->legacy || st->capturing) {
        emu_error("cudaStreamBeginCapture: not a live non-legacy stream, or already capturing");
        return fail(cudaErrorIllegalState);
    }
    st->capturing = true;
    st->cap_invalid = false;
    st->cap.clear();
    return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
    Stream *st = stream_of(s);
    *g = nullptr;
    if (!st || !st->capturing) {
        emu_error("cudaStreamEndCapture: the stream is not capturing");
        return fail(cudaErrorIllegalState);
    }
    st->capturing = false;
    if (st->cap_invalid) {
        st->cap.clear();
        return fail(cudaErrorStreamCaptureInvalidated);
    }
    Graph *gr = new Graph{std::move(st->cap)};
    st->cap.clear();
    g_graphs.insert(gr);
    *g = (cudaGraph_t)gr;
    return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *status) {
    Stream *st = stream_of(s);
    if (!st) return fail(cudaErrorInvalidResourceHandle);
    *status = st->capturing ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long) {
    STICKY();
    Graph *gr = (Graph *)g;
    if (!g_graphs.count(gr)) return fail(cudaErrorInvalidValue);
    Graph *ex = new Graph{gr->ops};
    g_execs.insert(ex);
    *e = (cudaGraphExec_t)ex;
    return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    Graph *gr = (Graph *)g;
    if (!g_graphs.erase(gr)) return fail(cudaErrorInvalidValue);
    delete gr;
    return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
    Graph *ex = (Graph *)e;
    if (!g_execs.erase(ex)) return fail(cudaErrorInvalidValue);
    delete ex;
    return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) {
    STICKY();
    Graph *ex = (Graph *)e;
    Stream *st = stream_of(s);
    if (!g_execs.count(ex) || !st) return fail(cudaErrorInvalidResourceHandle);
    if (inject(F_LAUNCH)) return fail(cudaErrorLaunchOutOfResources);
    for (const Op &op : ex->ops) {
        std::vector<PinRange> pins = op.pins;
        enqueue(st, "graph: " + op.what, op.fn, pins);
    }
    return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t s) {
    return cudaStreamSynchronize(s);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
    Event *ev = new Event{nullptr, 0, false, !(flags & cudaEventDisableTiming), g_dev};
    g_events.insert(ev);
    *e = (cudaEvent_t)ev;
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) {
    return cudaEventCreateWithFlags(e, 0);
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    Event *ev = (Event *)e;
    if (!g_events.count(ev)) return fail(cudaErrorInvalidResourceHandle);
    g_events.erase(ev);
    delete ev;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    STICKY();
    Event *ev = (Event *)e;
    Stream *st = stream_of(s);
    if (!g_events.count(ev) || !st) {
        emu_error("cudaEventRecord: invalid event or stream");
        return fail(cudaErrorInvalidResourceHandle);
    }
    if (ev->dev != dev_of(st)) {
        emu_error("cudaEventRecord: an event of device %d into a stream of device %d", ev->dev,
                  dev_of(st));
        return fail(cudaErrorInvalidResourceHandle);
    }
    ev->s = st;
    ev->recorded = true;
    ev->seq = enqueue(st, "event", []() {});
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    STICKY();
    Event *ev = (Event *)e;
    if (inject(F_SYNC)) {
        if (g_events.count(ev) && ev->recorded && g_streams.count(ev->s))
            drop_queue(ev->s, ev->seq);
        return fail(cudaErrorLaunchFailure);
    }
    if (!g_events.count(ev)) return fail(cudaErrorInvalidResourceHandle);
    if (ev->recorded && g_streams.count(ev->s)) flush(ev->s, ev->seq);
    STICKY();
    return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
    return cudaEventSynchronize(e);
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    Event *x = (Event *)a, *y = (Event *)b;
    if (!g_events.count(x) || !g_events.count(y) || !x->timing || !y->timing)
        return fail(cudaErrorInvalidResourceHandle);
    cudaEventSynchronize(a);
    cudaEventSynchronize(b);
    *ms = 1.0f; /* no timing in emulation */
    return cudaSuccess;
}

} /* extern "C" */

/* ---- kernels: attributes -------------------------------------------------------------------- */

static std::map<const void *, int> g_max_dyn_smem;
static std::map<const void *, size_t> g_static_smem_seen;

extern "C" cudaError_t cudaFuncSetAttribute(const void *f, cudaFuncAttribute attr, int v) {
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (v < 0 || v > 232448) return fail(cudaErrorInvalidValue);
        g_max_dyn_smem[f] = v;
        return cudaSuccess;
    }
    return cudaSuccess;
}
extern "C" cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *a, const void *f) {
    memset(a, 0, sizeof *a);
    a->maxThreadsPerBlock = 1024;
    a->sharedSizeBytes = g_static_smem_seen.count(f) ? g_static_smem_seen[f] : 0;
    a->maxDynamicSharedSizeBytes = g_max_dyn_smem.count(f) ? g_max_dyn_smem[f] : 49152;
    a->binaryVersion = a->ptxVersion = 90;
    return cudaSuccess;
}

/* ---- kernels: fibers ------------------------------------------------------------------------ */
static uint3 emu_u3(unsigned x, unsigned y, unsigned z) {
    uint3 u;
    u.x = x, u.y = y, u.z = z;
    return u;
}

extern "C" void emu_switch(void **save_sp, void *new_sp);
extern "C" void emu_fiber_tramp();

emu_fiber *emu_cur;
uint3 emu_blockIdx;
dim3 emu_blockDim, emu_gridDim;

static std::vector<emu_fiber> g_fibers;
static void *g_sched_sp;
static void *g_sched_fake;
static const void *g_sched_bottom;
static size_t g_sched_size;
static const std::function<void()> *g_body;
static const size_t k_stack = EMU_ASAN ? (1u << 20) : (256u << 10);

static void asan_start(void **fake, const void *bottom, size_t size) {
#if EMU_ASAN
    __sanitizer_start_switch_fiber(fake, bottom, size);
#else
    (void)fake, (void)bottom, (void)size;
#endif
}
static void asan_finish(void *fake, const void **bottom, size_t *size) {
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, bottom, size);
#else
    (void)fake, (void)bottom, (void)size;
#endif
}

static void to_sched(bool dying) {
    emu_fiber *f = emu_cur;
    asan_start(dying ? nullptr : &f->asan_fake, g_sched_bottom, g_sched_size);
    emu_switch(&f->sp, g_sched_sp);
    asan_finish(f->asan_fake, &g_sched_bottom, &g_sched_size);
}

extern "C" void emu_fiber_main() {
    asan_finish(nullptr, &g_sched_bottom, &g_sched_size);
    (*g_body)();
    emu_cur->state = EMU_DONE;
    to_sched(true);
    abort(); /* never resumed */
}

static void resume(emu_fiber *f) {
    emu_cur = f;
    asan_start(&g_sched_fake, f->stack, f->stack_size);
    emu_switch(&g_sched_sp, f->sp);
    asan_finish(g_sched_fake, nullptr, nullptr);
    emu_cur = nullptr;
}

static void fiber_init(emu_fiber *f) {
    if (!f->stack) {
        char *m = (char *)mmap(nullptr, k_stack + PAGE, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) abort();
        mprotect(m, PAGE, PROT_NONE); /* overflow guard */
        f->stack = m + PAGE;
        f->stack_size = k_stack;
    }
    uintptr_t top = ((uintptr_t)f->stack + f->stack_size) & ~(uintptr_t)15;
    uint64_t *sp = (uint64_t *)(top - 80);
    uint32_t ctl[2];
    asm volatile("stmxcsr %0" : "=m"(ctl[0]));
    asm volatile("fnstcw %0" : "=m"(*(uint16_t *)&ctl[1]));
    memcpy(sp, ctl, 8);
    for (int i = 1; i <= 6; i++) sp[i] = 0;        /* r15 .. rbp */
    sp[7] = (uint64_t)(uintptr_t)&emu_fiber_tramp; /* the return address, at top - 24 */
    f->sp = sp;
    f->state = EMU_READY;
    f->nbar = 0;
    f->asan_fake = nullptr;
    f->n_pipe = f->pipe_groups = 0;
}

void emu_syncthreads() {
    emu_cur->state = EMU_BAR;
    to_sched(false);
}

uint64_t emu_shfl(uint64_t v, int src, unsigned mask) {
    if (mask != 0xffffffffu)
        emu_error("warp shuffle with mask %#x: only full masks are emulated", mask);
    emu_cur->shfl_val = v;
    emu_cur->shfl_src = src;
    emu_cur->shfl_mask = mask;
    emu_cur->state = EMU_SHFL;
    to_sched(false);
    return emu_cur->shfl_out;
}

/* shared memory of the running CTA */
struct Smem {
    void *p;
    size_t size;
};
static std::vector<Smem> g_smem;
static size_t g_smem_static;
static void *g_dyn_smem;
static bool g_bounds_reported;

void *emu_smem_get(int id, size_t size, size_t align) {
    if ((size_t)id >= g_smem.size()) g_smem.resize(id + 1, Smem{nullptr, 0});
    Smem &s = g_smem[id];
    if (!s.p) {
        if (posix_memalign(&s.p, align < 16 ? 16 : align, size ? size : 1)) abort();
        memset(s.p, 0xFF, size); /* uninitialised shared memory: poisoned */
        s.size = size;
        g_smem_static += size;
        if (g_smem_static > 49152)
            emu_error("static shared memory of %zu bytes exceeds 48 KiB", g_smem_static);
    } else if (s.size != size) {
        emu_error("shared variable %d seen with two sizes", id);
    }
    return s.p;
}
void *emu_dyn_smem() {
    return g_dyn_smem;
}

void emu_check_bounds(unsigned max_threads) {
    unsigned n = emu_blockDim.x * emu_blockDim.y * emu_blockDim.z;
    if (n > max_threads && !g_bounds_reported) {
        g_bounds_reported = true;
        emu_error("%u threads per CTA exceed __launch_bounds__(%u): the launch would fail", n,
                  max_threads);
    }
}

void emu_check_kernel_ptr(const void *p, int idx, const char *kname) {
    if (!p) return;
    Alloc *a = find_alloc(p, true);
    if (a && a->live && a->device && a->dev != g_dev) {
        emu_error("kernel %s: argument %d = %p is memory of device %d, the kernel runs on device "
                  "%d (no peer access)",
                  kname, idx, p, a->dev, g_dev);
        return;
    }
    if (a && a->live) return; /* device memory, or pinned host memory (mapped) */
    emu_error("kernel %s: argument %d = %p is not device (or pinned) memory", kname, idx, p);
}

struct KernelRec {
    dim3 grid, block;
    size_t smem;
    const void *func;
    std::string name;
    std::function<void()> body;
    bool pdl; /* launched with programmatic stream serialization (cudaLaunchKernelEx) */
};

/* griddepcontrol.wait calls in the running kernel: a kernel launched with programmatic stream
 * serialization that never waits would, on a GPU, run beside its predecessor (see
 * kernels/cuda/cuda_util.cuh) */
static uint64_t g_pdl_waits;
void emu_pdl_wait() {
    g_pdl_waits++;
}

static int g_order = [] {
    const char *o = getenv("EMU_ORDER");
    if (!o || !strcmp(o, "fwd")) return 0;
    if (!strcmp(o, "rev")) return 1;
    if (!strcmp(o, "warp")) return 3;
    return 2;
}();
static std::mt19937 g_rng(12345);
static uint64_t g_launches;

static void order_of(std::vector<unsigned> &v, unsigned n) {
    v.resize(n);
    for (unsigned i = 0; i < n; i++) v[i] = i;
    if (g_order == 1) std::reverse(v.begin(), v.end());
    if (g_order == 2) std::shuffle(v.begin(), v.end(), g_rng);
}

static void run_cta(const KernelRec &k, unsigned nt, const std::vector<unsigned> &ord) {
    for (unsigned i = 0; i < nt; i++) {
        emu_fiber *f = &g_fibers[i];
        fiber_init(f);
        f->lin = i;
        f->tid = emu_u3(i % k.block.x, i / k.block.x % k.block.y, i / (k.block.x * k.block.y));
        f->lane = i % 32;
        f->warp = i / 32;
    }
    g_smem_static = 0;
    g_dyn_smem = nullptr;
    if (k.smem) {
        if (posix_memalign(&g_dyn_smem, 128, k.smem)) abort(); /* as a GPU's, 128-aligned */
        memset(g_dyn_smem, 0xFF, k.smem);
    }
    bool diverged = false;
    std::vector<unsigned> ord2;
    const unsigned nw = (nt + 31) / 32;
    /* warp w's shuffle completes when all its live lanes are in it: true if it did */
    auto release = [&](unsigned w) {
        unsigned lo = w * 32, hi = std::min(nt, lo + 32), ns = 0, nd = 0;
        for (unsigned l = lo; l < hi; l++) {
            ns += g_fibers[l].state == EMU_SHFL;
            nd += g_fibers[l].state == EMU_DONE;
        }
        if (!ns || ns + nd != hi - lo) return false;
        if (ns != 32)
            emu_error("kernel %s: warp %u shuffles with a full mask but only %u of 32 lanes "
                      "take part",
                      k.name.c_str(), w, ns);
        for (unsigned l = lo; l < hi; l++) {
            emu_fiber &f = g_fibers[l];
            if (f.state != EMU_SHFL) continue;
            int src = f.shfl_src;
            if (src >= 0 && lo + src < hi && g_fibers[lo + src].state == EMU_SHFL)
                f.shfl_out = g_fibers[lo + src].shfl_val;
            else
                f.shfl_out = f.shfl_val;
        }
        for (unsigned l = lo; l < hi; l++)
            if (g_fibers[l].state == EMU_SHFL) g_fibers[l].state = EMU_READY;
        return true;
    };
    for (;;) {
        if (g_order == 3) { /* each warp alone up to its next barrier (or its end) */
            for (unsigned w = 0; w < nw; w++) {
                bool more = true;
                while (more) {
                    for (unsigned l = w * 32; l < std::min(nt, w * 32 + 32); l++)
                        if (g_fibers[l].state == EMU_READY) resume(&g_fibers[l]);
                    more = release(w);
                }
            }
        } else {
            if (g_order == 2) {
                order_of(ord2, nt);
            }
            const std::vector<unsigned> &o = g_order == 2 ? ord2 : ord;
            for (unsigned idx : o)
                if (g_fibers[idx].state == EMU_READY) resume(&g_fibers[idx]);
        }
        bool released = false;
        for (unsigned w = 0; w < nw; w++) released |= release(w);
        if (released) continue;
        unsigned nb = 0, nd = 0, ns = 0;
        for (unsigned i = 0; i < nt; i++) {
            nb += g_fibers[i].state == EMU_BAR;
            nd += g_fibers[i].state == EMU_DONE;
            ns += g_fibers[i].state == EMU_SHFL;
        }
        if (nd == nt) break;
        if (nb && nb + nd == nt) {
            if (nd && !diverged) {
                diverged = true;
                emu_error("kernel %s: __syncthreads reached by %u threads while %u have exited "
                          "(divergent barrier)",
                          k.name.c_str(), nb, nd);
            }
            for (unsigned i = 0; i < nt; i++)
                if (g_fibers[i].state == EMU_BAR) {
                    g_fibers[i].state = EMU_READY;
                    g_fibers[i].nbar++;
                }
            continue;
        }
        emu_error("kernel %s: deadlock: %u threads at __syncthreads, %u at a warp shuffle, %u done",
                  k.name.c_str(), nb, ns, nd);
        abort();
    }
    for (auto &s : g_smem) free(s.p);
    g_smem.clear();
    size_t st = g_smem_static;
    if (st > g_static_smem_seen[k.func]) g_static_smem_seen[k.func] = st;
    int maxdyn = g_max_dyn_smem.count(k.func) ? g_max_dyn_smem[k.func] : 49152;
    if (k.smem + st > 232448 || (int)k.smem > maxdyn)
        emu_error("kernel %s: %zu bytes of dynamic + %zu of static shared memory exceed the limit",
                  k.name.c_str(), k.smem, st);
    free(g_dyn_smem);
    g_dyn_smem = nullptr;
}

static void run_kernel(const KernelRec &k) {
    unsigned nt = k.block.x * k.block.y * k.block.z;
    if (g_fibers.size() < nt) g_fibers.resize(nt);
    emu_blockDim = k.block;
    emu_gridDim = k.grid;
    g_body = &k.body;
    g_bounds_reported = false;
    g_pdl_waits = 0;
    std::vector<unsigned> ord;
    order_of(ord, nt);
    uint64_t nctas = (uint64_t)k.grid.x * k.grid.y * k.grid.z;
    for (uint64_t c = 0; c < nctas; c++) {
        uint64_t b = g_order == 1 ? nctas - 1 - c : c;
        emu_blockIdx = emu_u3((unsigned)(b % k.grid.x), (unsigned)(b / k.grid.x % k.grid.y),
                              (unsigned)(b / ((uint64_t)k.grid.x * k.grid.y)));
        run_cta(k, nt, ord);
    }
    if (k.pdl && !g_pdl_waits)
        emu_error("%s: launched with programmatic stream serialization, but no thread called "
                  "cudaGridDependencySynchronize (pgd_dev_pdl_enter)",
                  k.name.c_str());
    g_launches++;
}

/* A launch into stream S from this thread: S must belong to the current device (the runtime
 * fails a kernel launched into another device's stream). */
static bool same_device(const Stream *S, const char *name) {
    if (dev_of(S) == g_dev) return true;
    emu_error("%s launched into a stream of device %d while device %d is current: the launch "
              "fails on a GPU",
              name, S->dev, g_dev);
    return false;
}

cudaError_t emu_submit_kernel(dim3 grid, dim3 block, size_t smem, cudaStream_t s, const void *func,
                              const char *name, std::function<void()> body, bool pdl) {
    Stream *S = stream_of(s);
    if (!S) {
        emu_error("launch of %s on an invalid stream", name);
        return fail(cudaErrorInvalidResourceHandle);
    }
    if (!same_device(S, name)) return fail(cudaErrorInvalidResourceHandle);
    STICKY();
    if (inject(F_LAUNCH)) return fail(cudaErrorLaunchOutOfResources);
    uint64_t nt = (uint64_t)block.x * block.y * block.z;
    if (!nt || nt > 1024 || block.z > 64 || !grid.x || !grid.y || !grid.z || grid.x > 2147483647u ||
        grid.y > 65535 || grid.z > 65535) {
        fprintf(stderr,
                "EMU: launch of %s with grid (%u,%u,%u) block (%u,%u,%u): invalid configuration\n",
                name, grid.x, grid.y, grid.z, block.x, block.y, block.z);
        return fail(cudaErrorInvalidConfiguration);
    }
    int maxdyn = g_max_dyn_smem.count(func) ? g_max_dyn_smem[func] : 49152;
    if ((int64_t)smem > maxdyn) {
        fprintf(stderr, "EMU: launch of %s with %zu bytes of dynamic shared memory (max %d)\n",
                name, smem, maxdyn);
        return fail(cudaErrorInvalidValue);
    }
    if (g_sticky_at && ++g_sticky_launches == g_sticky_at) { /* emu_fail_sticky: it faults */
        enqueue(S, std::string("kernel ") + name + " (faults)",
                []() { g_sticky = cudaErrorIllegalAddress; });
        return cudaSuccess;
    }
    auto rec =
        std::make_shared<KernelRec>(KernelRec{grid, block, smem, func, name, std::move(body), pdl});
    enqueue(S, std::string("kernel ") + name, [rec]() { run_kernel(*rec); });
    return cudaSuccess;
}

/* ---- used by the cuBLASLt emulation -----------------------------------------------------------
 */

bool emu_dev_range_ok(const void *p, size_t bytes) {
    return live_device(p, bytes) != nullptr;
}
bool emu_stream_enqueue(cudaStream_t s, const char *what, std::function<void()> fn) {
    Stream *S = stream_of(s);
    if (!S || !same_device(S, what) || g_sticky != cudaSuccess) return false;
    enqueue(S, what, std::move(fn));
    return true;
}
