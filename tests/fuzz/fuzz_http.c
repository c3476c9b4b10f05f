/*
 * tests/fuzz/fuzz_http.c — libFuzzer target: raw bytes into the real server over loopback.
 *
 * At start-up the whole server (pgd_serve_run: libmicrohttpd on libuv, the routes, auth off,
 * the scheduler thread) starts on a thread of this process, on a free 127.0.0.1 port, serving a
 * tiny dummy model (a config.json preset written to a temporary folder: 2 layers, hidden 64,
 * the byte-level dummy vocabulary, context 256, one compute thread), and the harness waits for
 * GET /health to answer 200.
 *
 * Input: byte 0 is how to behave as a client: bit 0 half-close (shutdown(SHUT_WR)) after
 * writing; bits 1-2 how long to read the answer (not at all, or until the server closes or
 * 5, 25 or 100 ms pass); bit 3 write in two parts (split at byte 1) with a pause; bit 4 close with
 * a reset (SO_LINGER 0). The rest is written to a fresh connection as it is: request lines,
 * headers, bodies, pipelined requests, garbage. Then the server must still be alive: its thread
 * has not returned and a new connection's GET /health answers "HTTP/1.1 200" within 20 s (an
 * answer slower than 2 s is logged: CI's fuzz step runs two targets on two cores, and one run
 * there saw no answer within the 10 s this waited before); anything else aborts (a crash for
 * libFuzzer). ASan and UBSan watch the server's threads.
 *
 * Seeds (tests/fuzz/corpus/fuzz_http/) hold valid requests to every route; the dictionary
 * (tests/fuzz/dict/http.dict) the HTTP and API words.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "server/serve.h"
#include "fuzz_util.h"

static pgd_serve_config g_cfg;
static uint16_t g_port;
static pthread_t g_thread;
static atomic_int g_server_exited;
static char g_preset[256];

static const char k_preset[] =
    "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128,\n"
    " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,\n"
    " \"vocab_size\": 320, \"max_position_embeddings\": 256, \"rope_theta\": 10000.0,\n"
    " \"rms_norm_eps\": 1e-05, \"tie_word_embeddings\": true}\n";

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void *serve_thread(void *arg) {
    (void)arg;
    int rc = pgd_serve_run(&g_cfg);
    fprintf(stderr, "fuzz_http: the server returned %d\n", rc);
    atomic_store(&g_server_exited, 1);
    return NULL;
}

static int connect_server(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    FUZZ_CHECK(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(g_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void write_all(int fd, const uint8_t *p, size_t n) {
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return; /* the server closed or reset: fine */
        p += w;
        n -= (size_t)w;
    }
}

/* Read into buf (cap bytes, the rest dropped) until the peer closes or timeout_ms passes.
 * Returns the bytes kept. */
static size_t read_for(int fd, char *buf, size_t cap, int timeout_ms) {
    int64_t end = now_ms() + timeout_ms;
    size_t got = 0;
    char sink[4096];
    for (;;) {
        int64_t left = end - now_ms();
        if (left <= 0) break;
        struct pollfd p = {fd, POLLIN, 0};
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        char *dst = got < cap ? buf + got : sink;
        size_t room = got < cap ? cap - got : sizeof sink;
        ssize_t n = recv(fd, dst, room, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        if (got < cap) got += (size_t)n;
    }
    return got;
}

/* GET /health on a fresh connection: true when it answers 200 within timeout_ms. */
static bool health(int timeout_ms) {
    int fd = connect_server();
    if (fd < 0) return false;
    static const char req[] = "GET /health HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\n\r\n";
    write_all(fd, (const uint8_t *)req, sizeof req - 1);
    char buf[64];
    size_t n = read_for(fd, buf, sizeof buf, timeout_ms);
    close(fd);
    return n >= 12 && !memcmp(buf, "HTTP/1.1 200", 12);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    signal(SIGPIPE, SIG_IGN);
    char dir[] = "/tmp/pgd-fuzz-http-XXXXXX";
    FUZZ_CHECK(mkdtemp(dir) != NULL);
    snprintf(g_preset, sizeof g_preset, "%s/tiny.json", dir);
    FILE *f = fopen(g_preset, "w");
    FUZZ_CHECK(f && fputs(k_preset, f) >= 0 && fclose(f) == 0);

    /* a free port: bind port 0, read it, release it for the server */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    FUZZ_CHECK(s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
               getsockname(s, (struct sockaddr *)&a, &al) == 0);
    g_port = ntohs(a.sin_port);
    close(s);

    pgd_serve_config_default(&g_cfg);
    g_cfg.host = "127.0.0.1";
    g_cfg.port = g_port;
    g_cfg.served_model_name = "tiny";
    g_cfg.shutdown_timeout_s = 1;
    g_cfg.request_timeout_s = 5;
    g_cfg.idle_timeout_s = 5;
    g_cfg.max_body_mb = 1;
    g_cfg.load.format = PGD_LOAD_DUMMY;
    g_cfg.load.model_preset = g_preset;
    g_cfg.load.max_ctx = 256;
    g_cfg.load.runner.device.cpu.n_threads = 1;
    g_cfg.load.runner.backend.kv_cache_bytes = 4u << 20;
    g_cfg.sched.max_waiting = 64;
    FUZZ_CHECK(pthread_create(&g_thread, NULL, serve_thread, NULL) == 0);
    pthread_detach(g_thread);
    int64_t deadline = now_ms() + 60000;
    while (!health(1000)) {
        if (atomic_load(&g_server_exited) || now_ms() > deadline) {
            fprintf(stderr, "fuzz_http: the server did not become ready on port %u\n", g_port);
            abort();
        }
        sleep_ms(20);
    }
    fprintf(stderr, "fuzz_http: server ready on 127.0.0.1:%u\n", g_port);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t mode = data[0];
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    int fd = connect_server();
    FUZZ_CHECK(fd >= 0);
    if (mode & 8 && n > 1) {
        size_t cut = p[0] % n;
        write_all(fd, p, cut);
        sleep_ms(2);
        write_all(fd, p + cut, n - cut);
    } else {
        write_all(fd, p, n);
    }
    if (mode & 1) shutdown(fd, SHUT_WR);
    static const int waits[] = {0, 5, 25, 100};
    int wait = waits[(mode >> 1) & 3];
    if (wait) {
        char buf[1024];
        (void)read_for(fd, buf, sizeof buf, wait);
    }
    if (mode & 16) {
        struct linger l = {1, 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    }
    close(fd);
    int64_t t0 = now_ms();
    if (atomic_load(&g_server_exited) || !health(20000)) {
        fprintf(stderr, "fuzz_http: the server is gone or does not answer GET /health (%lld ms)\n",
                (long long)(now_ms() - t0));
        abort();
    }
    if (now_ms() - t0 > 2000)
        fprintf(stderr, "fuzz_http: GET /health took %lld ms\n", (long long)(now_ms() - t0));
    return 0;
}
