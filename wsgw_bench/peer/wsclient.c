/* wsclient: the floor of the WebSocket echo round trip on the lab, for the wsgw benchmarks.
 *
 *   wsclient HOST PORT rtt SIZE[,SIZE...] COUNT WARMUP
 *
 * A client in C over kernel TCP that busy-polls its socket (non-blocking recv in a loop,
 * never sleeping): what a round trip costs on this link with this peer when the client
 * spends nearly nothing and never waits to be woken. It is a reference for the `rtt`
 * scenario, not a contender: no Python client can go below it.
 *
 * One connection: the upgrade request (the 101 status line is checked), then per size
 * WARMUP + COUNT round trips of one masked binary frame (payload: the 8-byte big-endian
 * round-trip number, then 'r' up to SIZE, as the Python contenders send), each echo
 * compared with what was sent. Prints one JSON line: {"ok": true, "results": {"SIZE": {"n",
 * "p50", "p99", "p999", "max", "mismatches"}, ...}} with nanoseconds, the nearest-rank
 * percentiles of wsgw_bench/ws_runner.py. The masking keys come from getrandom(2).
 *
 * Build: gcc -O2 -Wall -Wextra -Werror -std=gnu11 -o wsclient wsclient.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_SIZE 65535       /* payloads up to this (16-bit extended length at most) */
#define MAX_SIZES 8
#define KEY_POOL 4096        /* masking keys fetched from getrandom at a time */

static int fail(const char *what)
{
    printf("{\"ok\": false, \"error\": \"%s: %s\"}\n", what, errno ? strerror(errno) : "");
    return 1;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest rank, as ws_runner.percentile: max(1, ceil(fraction * n)), 1-based. */
static uint64_t percentile(const uint64_t *sorted, size_t n, double fraction)
{
    if (n == 0)
        return 0;
    double want = fraction * (double)n - 1e-9;
    size_t rank = (size_t)want;
    if ((double)rank < want)
        rank++; /* ceil, without libm */
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return sorted[rank - 1];
}

static uint8_t keys[KEY_POOL];
static size_t key_pos = KEY_POOL;

static const uint8_t *next_key(void)
{
    if (key_pos + 4 > KEY_POOL) {
        if (getrandom(keys, sizeof(keys), 0) != (ssize_t)sizeof(keys))
            return NULL;
        key_pos = 0;
    }
    key_pos += 4;
    return keys + key_pos - 4;
}

/* Send all of buf (the socket is non-blocking: spin on EAGAIN). */
static int send_all(int fd, const uint8_t *buf, size_t len)
{
    while (len) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR)
                continue;
            return -1;
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Receive exactly len bytes, busy-polling. */
static int recv_exact(int fd, uint8_t *buf, size_t len)
{
    while (len) {
        ssize_t n = recv(fd, buf, len, MSG_DONTWAIT);
        if (n > 0) {
            buf += n;
            len -= (size_t)n;
        } else if (n == 0) {
            errno = ECONNRESET;
            return -1;
        } else if (errno != EAGAIN && errno != EINTR) {
            return -1;
        }
    }
    return 0;
}

static int upgrade(int fd, const char *host, int port)
{
    char request[512];
    int len = snprintf(request, sizeof(request),
                       "GET / HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\n"
                       "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                       "Sec-WebSocket-Version: 13\r\n\r\n",
                       host, port);
    if (send_all(fd, (const uint8_t *)request, (size_t)len) < 0)
        return -1;
    char head[4096];
    size_t got = 0;
    while (got < 4 || memcmp(head + got - 4, "\r\n\r\n", 4) != 0) {
        if (got == sizeof(head) || recv_exact(fd, (uint8_t *)head + got, 1) < 0)
            return -1;
        got++;
    }
    if (got < 12 || memcmp(head, "HTTP/1.1 101", 12) != 0) {
        errno = EPROTO;
        return -1;
    }
    return 0;
}

/* One round trip of size bytes; returns 1 if the echo differs, -1 on error. */
static int round_trip(int fd, uint64_t seq, size_t size, uint8_t *frame, uint8_t *echo)
{
    size_t header = size < 126 ? 2 : 4;
    const uint8_t *key = next_key();
    if (!key)
        return -1;
    frame[0] = 0x82;
    if (header == 2) {
        frame[1] = (uint8_t)(0x80 | size);
    } else {
        frame[1] = 0x80 | 126;
        frame[2] = (uint8_t)(size >> 8);
        frame[3] = (uint8_t)size;
    }
    memcpy(frame + header, key, 4);
    uint8_t *payload = frame + header + 4;
    for (size_t i = 0; i < size; i++) {
        uint8_t plain = i < 8 ? (uint8_t)(seq >> (56 - 8 * i)) : (uint8_t)'r';
        payload[i] = plain ^ key[i & 3];
    }
    if (send_all(fd, frame, header + 4 + size) < 0)
        return -1;
    if (recv_exact(fd, echo, header) < 0)
        return -1;
    size_t len = echo[1] & 0x7f;
    if (len == 126)
        len = (size_t)echo[2] << 8 | echo[3];
    if (echo[0] != 0x82 || (echo[1] & 0x80) || len != size) {
        errno = EPROTO;
        return -1;
    }
    if (recv_exact(fd, echo, size) < 0)
        return -1;
    for (size_t i = 0; i < size; i++) {
        uint8_t plain = i < 8 ? (uint8_t)(seq >> (56 - 8 * i)) : (uint8_t)'r';
        if (echo[i] != plain)
            return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 7 || strcmp(argv[3], "rtt") != 0) {
        fprintf(stderr, "usage: wsclient HOST PORT rtt SIZE[,SIZE...] COUNT WARMUP\n");
        return 2;
    }
    const char *host = argv[1];
    int port = atoi(argv[2]);
    size_t sizes[MAX_SIZES], nsizes = 0;
    for (char *p = argv[4]; *p && nsizes < MAX_SIZES;) {
        char *end;
        unsigned long size = strtoul(p, &end, 10);
        if (end == p || size < 8 || size > MAX_SIZE) {
            fprintf(stderr, "sizes must be 8..%d bytes\n", MAX_SIZE);
            return 2;
        }
        sizes[nsizes++] = size;
        p = *end == ',' ? end + 1 : end;
    }
    long count = atol(argv[5]), warmup = atol(argv[6]);
    if (count <= 0 || warmup < 0) {
        fprintf(stderr, "COUNT must be > 0 and WARMUP >= 0\n");
        return 2;
    }

    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int one = 1;
    if (fd < 0 || inet_pton(AF_INET, host, &addr.sin_addr) != 1)
        return fail("socket");
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0)
        return fail("connect");
    if (upgrade(fd, host, port) < 0)
        return fail("upgrade");

    uint64_t *samples = malloc(sizeof(uint64_t) * (size_t)count);
    uint8_t *frame = malloc(MAX_SIZE + 8), *echo = malloc(MAX_SIZE + 4);
    if (!samples || !frame || !echo)
        return fail("malloc");
    printf("{\"ok\": true, \"results\": {");
    for (size_t s = 0; s < nsizes; s++) {
        long mismatches = 0;
        for (long i = 0; i < warmup + count; i++) {
            uint64_t start = now_ns();
            int rc = round_trip(fd, (uint64_t)i, sizes[s], frame, echo);
            uint64_t elapsed = now_ns() - start;
            if (rc < 0)
                return fail("round trip");
            mismatches += rc;
            if (i >= warmup)
                samples[i - warmup] = elapsed;
        }
        qsort(samples, (size_t)count, sizeof(uint64_t), cmp_u64);
        size_t n = (size_t)count;
        printf("%s\"%zu\": {\"n\": %zu, \"p50\": %llu, \"p99\": %llu, \"p999\": %llu, "
               "\"max\": %llu, \"mismatches\": %ld}",
               s ? ", " : "", sizes[s], n, (unsigned long long)percentile(samples, n, 0.50),
               (unsigned long long)percentile(samples, n, 0.99),
               (unsigned long long)percentile(samples, n, 0.999),
               (unsigned long long)samples[n - 1], mismatches);
    }
    printf("}}\n");
    /* A close frame (1000), then wait for the server to close. */
    const uint8_t *key = next_key();
    uint8_t close_frame[8] = {0x88, 0x82, 0, 0, 0, 0, 0x03 ^ 0, 0xe8 ^ 0};
    if (key) {
        memcpy(close_frame + 2, key, 4);
        close_frame[6] = 0x03 ^ key[0];
        close_frame[7] = 0xe8 ^ key[1];
        send_all(fd, close_frame, sizeof(close_frame));
    }
    shutdown(fd, SHUT_WR);
    close(fd);
    free(samples);
    free(frame);
    free(echo);
    return 0;
}
