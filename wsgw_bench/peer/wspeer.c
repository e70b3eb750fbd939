/* wspeer: a minimal WebSocket server (RFC 6455) for the wsgw benchmarks.
 *
 *   wspeer HOST PORT [echo | flood N SIZE [binary|text]]
 *
 * One thread, epoll, non-blocking sockets, any number of connections. It does as little
 * as it can per message, so that the client is what a benchmark measures.
 *
 *   echo   every data frame comes back as it came (opcode, FIN, payload; unmasked), pings
 *          get pongs, a close frame is answered and the connection closed (the default).
 *   flood  right after the handshake: N messages of SIZE bytes as fast as the socket takes
 *          them, then a close frame (1000); the connection ends when the client answers.
 *          Binary message: 8-byte big-endian sequence number (0, 1, ...), 8-byte big-endian
 *          send time (CLOCK_REALTIME, ns), then 'x' up to SIZE (SIZE >= 16).
 *          Text message: the same two numbers as 16 lowercase hex digits each (a raw
 *          number is not valid UTF-8), then 'x' up to SIZE (SIZE >= 32).
 *
 * The request path can choose per connection: /echo, or /flood/N/SIZE[/binary|/text];
 * any other path gets the mode of the command line. No extension and no subprotocol is
 * ever accepted. Prints "ready port=<port>" once listening (PORT 0: the kernel picks).
 * SIGTERM or SIGINT ends it.
 *
 * Build: gcc -O2 -Wall -Wextra -Werror -std=gnu11 -o wspeer wspeer.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_HEADER 16384              /* an upgrade request larger than this is refused */
#define MAX_PAYLOAD (64u << 20)       /* a client frame larger than this closes with 1009 */
#define FLOOD_HIGH_WATER (256u << 10) /* bytes queued per connection before a write */
#define READ_CHUNK (256u << 10)

enum mode { MODE_ECHO, MODE_FLOOD };
enum state { ST_HTTP, ST_OPEN, ST_CLOSING };

struct buf {
    uint8_t *data;
    size_t len; /* bytes held */
    size_t off; /* bytes already consumed (out: written) */
    size_t cap;
};

struct conn {
    int fd;
    enum state state;
    enum mode mode;
    int text;
    int close_after_flush;
    int want_out; /* EPOLLOUT is armed */
    uint64_t flood_n, flood_next;
    uint32_t flood_size;
    struct buf in, out;
};

static struct {
    enum mode mode;
    uint64_t n;
    uint32_t size;
    int text;
} defaults = {MODE_ECHO, 0, 0, 0};

static int epfd;
static volatile sig_atomic_t stopping;

/* ---- SHA-1 (FIPS 180-4) and base64, for Sec-WebSocket-Accept ---------------------- */
static uint32_t rol(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

static void sha1_block(uint32_t h[5], const uint8_t *p)
{
    uint32_t w[80];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 80; i++)
        w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; i++) {
        uint32_t f, k;
        if (i < 20) {
            f = (b & c) | (~b & d);
            k = 0x5A827999;
        } else if (i < 40) {
            f = b ^ c ^ d;
            k = 0x6ED9EBA1;
        } else if (i < 60) {
            f = (b & c) | (b & d) | (c & d);
            k = 0x8F1BBCDC;
        } else {
            f = b ^ c ^ d;
            k = 0xCA62C1D6;
        }
        uint32_t t = rol(a, 5) + f + e + k + w[i];
        e = d;
        d = c;
        c = rol(b, 30);
        b = a;
        a = t;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
}

static void sha1(const uint8_t *msg, size_t len, uint8_t out[20])
{
    uint32_t h[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
    size_t i = 0;
    for (; i + 64 <= len; i += 64)
        sha1_block(h, msg + i);
    uint8_t tail[128];
    size_t rest = len - i;
    memset(tail, 0, sizeof(tail));
    memcpy(tail, msg + i, rest);
    tail[rest] = 0x80;
    size_t blocks = rest + 1 + 8 <= 64 ? 1 : 2;
    uint64_t bits = (uint64_t)len * 8;
    for (int j = 0; j < 8; j++)
        tail[blocks * 64 - 1 - j] = (uint8_t)(bits >> (8 * j));
    for (size_t b = 0; b < blocks; b++)
        sha1_block(h, tail + 64 * b);
    for (int j = 0; j < 5; j++) {
        out[4 * j] = (uint8_t)(h[j] >> 24);
        out[4 * j + 1] = (uint8_t)(h[j] >> 16);
        out[4 * j + 2] = (uint8_t)(h[j] >> 8);
        out[4 * j + 3] = (uint8_t)h[j];
    }
}

static void base64(const uint8_t *in, size_t len, char *out)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < len)
            v |= in[i + 2];
        out[o++] = abc[(v >> 18) & 63];
        out[o++] = abc[(v >> 12) & 63];
        out[o++] = i + 1 < len ? abc[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < len ? abc[v & 63] : '=';
    }
    out[o] = '\0';
}

/* ---- buffers ------------------------------------------------------------------------ */
static uint8_t *buf_reserve(struct buf *b, size_t extra)
{
    if (b->off && b->off == b->len)
        b->off = b->len = 0;
    if (b->len + extra > b->cap) {
        if (b->off) { /* compact first */
            memmove(b->data, b->data + b->off, b->len - b->off);
            b->len -= b->off;
            b->off = 0;
        }
        if (b->len + extra > b->cap) {
            size_t cap = b->cap ? b->cap : 4096;
            while (cap < b->len + extra)
                cap *= 2;
            uint8_t *data = realloc(b->data, cap);
            if (!data) {
                perror("wspeer: realloc");
                exit(1);
            }
            b->data = data;
            b->cap = cap;
        }
    }
    return b->data + b->len;
}

static void buf_append(struct buf *b, const void *p, size_t n)
{
    memcpy(buf_reserve(b, n), p, n);
    b->len += n;
}

/* ---- connections ---------------------------------------------------------------------- */
static void conn_free(struct conn *c)
{
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c->in.data);
    free(c->out.data);
    free(c);
}

static void arm_out(struct conn *c, int on)
{
    if (c->want_out == on)
        return;
    struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0), .data.ptr = c};
    epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
    c->want_out = on;
}

static size_t frame_header(uint8_t *h, int fin, int opcode, uint64_t len)
{
    h[0] = (uint8_t)((fin ? 0x80 : 0) | opcode);
    if (len < 126) {
        h[1] = (uint8_t)len;
        return 2;
    }
    if (len <= 0xFFFF) {
        h[1] = 126;
        h[2] = (uint8_t)(len >> 8);
        h[3] = (uint8_t)len;
        return 4;
    }
    h[1] = 127;
    for (int i = 0; i < 8; i++)
        h[2 + i] = (uint8_t)(len >> (56 - 8 * i));
    return 10;
}

static void send_frame(struct conn *c, int fin, int opcode, const uint8_t *p, uint64_t len)
{
    uint8_t h[10];
    size_t hl = frame_header(h, fin, opcode, len);
    uint8_t *dst = buf_reserve(&c->out, hl + len);
    memcpy(dst, h, hl);
    if (len)
        memcpy(dst + hl, p, len);
    c->out.len += hl + len;
}

static void send_close(struct conn *c, uint16_t code)
{
    uint8_t p[2] = {(uint8_t)(code >> 8), (uint8_t)code};
    send_frame(c, 1, 8, p, code ? 2 : 0);
}

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

static void put_hex64(uint8_t *p, uint64_t v)
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 15; i >= 0; i--, v >>= 4)
        p[i] = (uint8_t)hex[v & 15];
}

/* Queue flood messages until the high-water mark or the end (then the close frame). */
static void flood_fill(struct conn *c)
{
    if (c->state != ST_OPEN || c->mode != MODE_FLOOD)
        return;
    uint8_t h[10];
    size_t hl = frame_header(h, 1, c->text ? 1 : 2, c->flood_size);
    size_t frame = hl + c->flood_size;
    while (c->flood_next < c->flood_n && c->out.len - c->out.off < FLOOD_HIGH_WATER) {
        uint64_t batch = (FLOOD_HIGH_WATER + frame - 1) / frame;
        if (batch > c->flood_n - c->flood_next)
            batch = c->flood_n - c->flood_next;
        uint8_t *dst = buf_reserve(&c->out, batch * frame);
        for (uint64_t i = 0; i < batch; i++, dst += frame) {
            memcpy(dst, h, hl);
            uint8_t *p = dst + hl;
            uint64_t seq = c->flood_next++;
            if (c->text) {
                put_hex64(p, seq);
                put_hex64(p + 16, realtime_ns());
                memset(p + 32, 'x', c->flood_size - 32);
            } else {
                put_be64(p, seq);
                put_be64(p + 8, realtime_ns());
                memset(p + 16, 'x', c->flood_size - 16);
            }
        }
        c->out.len += batch * frame;
    }
    if (c->flood_next == c->flood_n) {
        send_close(c, 1000);
        c->state = ST_CLOSING;
    }
}

/* Write what is queued; 0 when the connection lives on, -1 when it was freed. */
static int flush_out(struct conn *c)
{
    for (;;) {
        while (c->out.off < c->out.len) {
            ssize_t n = send(c->fd, c->out.data + c->out.off, c->out.len - c->out.off,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0) {
                c->out.off += (size_t)n;
                continue;
            }
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                arm_out(c, 1);
                return 0;
            }
            if (n < 0 && errno == EINTR)
                continue;
            conn_free(c);
            return -1;
        }
        c->out.off = c->out.len = 0;
        if (c->mode == MODE_FLOOD && c->state == ST_OPEN) {
            flood_fill(c);
            continue;
        }
        break;
    }
    arm_out(c, 0);
    if (c->close_after_flush) {
        conn_free(c);
        return -1;
    }
    return 0;
}

static int parse_flood_path(const char *path, struct conn *c)
{
    unsigned long long n;
    unsigned size;
    char kind[16] = "binary";
    if (sscanf(path, "/flood/%llu/%u/%15[a-z]", &n, &size, kind) < 2)
        return -1;
    c->mode = MODE_FLOOD;
    c->flood_n = n;
    c->flood_size = size;
    c->text = strcmp(kind, "text") == 0;
    return 0;
}

static void http_error(struct conn *c, const char *status)
{
    char resp[256];
    int n = snprintf(resp, sizeof(resp),
                     "HTTP/1.1 %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", status);
    buf_append(&c->out, resp, (size_t)n);
    c->close_after_flush = 1;
}

/* Handle the upgrade request once complete; returns bytes consumed (0: need more). */
static size_t handle_http(struct conn *c)
{
    const char *start = (const char *)c->in.data + c->in.off;
    size_t avail = c->in.len - c->in.off;
    const char *end = memmem(start, avail, "\r\n\r\n", 4);
    if (!end) {
        if (avail > MAX_HEADER)
            http_error(c, "431 Request Header Fields Too Large");
        return 0;
    }
    size_t used = (size_t)(end - start) + 4;
    char reqline[600], path[512] = "";
    size_t first = strcspn(start, "\r"); /* stops at the terminator found above */
    if (first >= sizeof(reqline))
        first = sizeof(reqline) - 1;
    memcpy(reqline, start, first);
    reqline[first] = '\0';
    if (sscanf(reqline, "GET %511s HTTP/1.1", path) != 1) {
        http_error(c, "400 Bad Request");
        return used;
    }
    const char *key = NULL;
    size_t key_len = 0;
    for (const char *line = start; line < end;) {
        const char *eol = memmem(line, (size_t)(end - line) + 2, "\r\n", 2);
        if (!eol)
            break;
        if ((size_t)(eol - line) > 18 && strncasecmp(line, "Sec-WebSocket-Key:", 18) == 0) {
            key = line + 18;
            while (key < eol && (*key == ' ' || *key == '\t'))
                key++;
            key_len = (size_t)(eol - key);
            while (key_len && (key[key_len - 1] == ' ' || key[key_len - 1] == '\t'))
                key_len--;
        }
        line = eol + 2;
    }
    if (!key || key_len == 0 || key_len > 64) {
        http_error(c, "400 Bad Request");
        return used;
    }
    c->mode = defaults.mode;
    c->flood_n = defaults.n;
    c->flood_size = defaults.size;
    c->text = defaults.text;
    if (strncmp(path, "/flood/", 7) == 0 && parse_flood_path(path, c) < 0) {
        http_error(c, "400 Bad Request");
        return used;
    }
    if (strncmp(path, "/echo", 5) == 0)
        c->mode = MODE_ECHO;
    if (c->mode == MODE_FLOOD && c->flood_size < (c->text ? 32u : 16u)) {
        http_error(c, "400 Bad Request");
        return used;
    }
    static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    uint8_t material[64 + sizeof(guid)], digest[20];
    memcpy(material, key, key_len);
    memcpy(material + key_len, guid, sizeof(guid) - 1);
    sha1(material, key_len + sizeof(guid) - 1, digest);
    char accept[32];
    base64(digest, 20, accept);
    char resp[256];
    int n = snprintf(resp, sizeof(resp),
                     "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                     "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
                     accept);
    buf_append(&c->out, resp, (size_t)n);
    c->state = ST_OPEN;
    flood_fill(c);
    return used;
}

static void unmask(uint8_t *p, uint64_t len, const uint8_t key[4])
{
    uint32_t k32;
    memcpy(&k32, key, 4);
    uint64_t k64 = (uint64_t)k32 << 32 | k32;
    uint64_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        v ^= k64;
        memcpy(p + i, &v, 8);
    }
    for (; i < len; i++)
        p[i] ^= key[i & 3];
}

/* Handle every complete frame in the input; -1: protocol error (close queued). */
static void handle_frames(struct conn *c)
{
    while (!c->close_after_flush) {
        uint8_t *p = c->in.data + c->in.off;
        size_t avail = c->in.len - c->in.off;
        if (avail < 2)
            return;
        int fin = p[0] >> 7, opcode = p[0] & 15, masked = p[1] >> 7;
        uint64_t len = p[1] & 127;
        size_t hl = 2;
        if (len == 126) {
            if (avail < 4)
                return;
            len = (uint64_t)p[2] << 8 | p[3];
            hl = 4;
        } else if (len == 127) {
            if (avail < 10)
                return;
            len = 0;
            for (int i = 0; i < 8; i++)
                len = len << 8 | p[2 + i];
            hl = 10;
        }
        if (!masked || (p[0] & 0x70)) {
            send_close(c, 1002);
            c->close_after_flush = 1;
            return;
        }
        if (len > MAX_PAYLOAD) {
            send_close(c, 1009);
            c->close_after_flush = 1;
            return;
        }
        if (avail < hl + 4 + len)
            return;
        uint8_t *payload = p + hl + 4;
        unmask(payload, len, p + hl);
        c->in.off += hl + 4 + len;
        switch (opcode) {
        case 0: case 1: case 2:
            if (c->mode == MODE_ECHO && c->state == ST_OPEN)
                send_frame(c, fin, opcode, payload, len);
            break;
        case 8: /* close: answer (echo its code) and end, or end if we closed first */
            if (c->state == ST_OPEN)
                send_close(c, len >= 2 ? (uint16_t)(payload[0] << 8 | payload[1]) : 0);
            c->state = ST_CLOSING;
            c->close_after_flush = 1;
            return;
        case 9:
            if (c->state == ST_OPEN)
                send_frame(c, 1, 10, payload, len);
            break;
        case 10:
            break;
        default:
            send_close(c, 1002);
            c->close_after_flush = 1;
            return;
        }
    }
}

static void on_readable(struct conn *c)
{
    for (;;) {
        uint8_t *dst = buf_reserve(&c->in, READ_CHUNK);
        ssize_t n = recv(c->fd, dst, READ_CHUNK, MSG_DONTWAIT);
        if (n > 0) {
            c->in.len += (size_t)n;
            if ((size_t)n < READ_CHUNK)
                break;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n < 0 && errno == EINTR)
            continue;
        conn_free(c); /* EOF or error: nothing more to say to this client */
        return;
    }
    if (c->state == ST_HTTP) {
        c->in.off += handle_http(c);
        if (c->state == ST_HTTP) {
            flush_out(c);
            return;
        }
    }
    handle_frames(c);
    if (c->in.off == c->in.len)
        c->in.off = c->in.len = 0;
    flush_out(c);
}

static void on_stop(int sig)
{
    (void)sig;
    stopping = 1;
}

static int usage(void)
{
    fprintf(stderr, "usage: wspeer HOST PORT [echo | flood N SIZE [binary|text]]\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return usage();
    if (argc >= 4 && strcmp(argv[3], "flood") == 0) {
        if (argc < 6)
            return usage();
        defaults.mode = MODE_FLOOD;
        defaults.n = strtoull(argv[4], NULL, 10);
        defaults.size = (uint32_t)strtoul(argv[5], NULL, 10);
        defaults.text = argc >= 7 && strcmp(argv[6], "text") == 0;
        if (defaults.size < (defaults.text ? 32u : 16u)) {
            fprintf(stderr, "wspeer: SIZE must be >= %u for %s messages\n",
                    defaults.text ? 32u : 16u, defaults.text ? "text" : "binary");
            return 2;
        }
    } else if (argc >= 4 && strcmp(argv[3], "echo") != 0) {
        return usage();
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    struct sockaddr_in addr;
    memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)atoi(argv[2]));
    if (inet_pton(AF_INET, argv[1], &addr.sin_addr) != 1) {
        fprintf(stderr, "wspeer: bad IPv4 address %s\n", argv[1]);
        return 2;
    }
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) < 0 || listen(lfd, 1024) < 0) {
        perror("wspeer: bind/listen");
        return 1;
    }
    socklen_t alen = sizeof(addr);
    getsockname(lfd, (struct sockaddr *)&addr, &alen);
    epfd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &lev);
    printf("ready port=%u\n", ntohs(addr.sin_port));
    fflush(stdout);

    struct epoll_event events[256];
    while (!stopping) {
        int n = epoll_wait(epfd, events, 256, 500);
        for (int i = 0; i < n; i++) {
            struct conn *c = events[i].data.ptr;
            if (!c) {
                int fd;
                while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                    c = calloc(1, sizeof(*c));
                    if (!c) {
                        close(fd);
                        continue;
                    }
                    c->fd = fd;
                    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
                    epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
                }
                continue;
            }
            /* One event per connection per wait: a freed connection is never seen again
             * in this batch. Writable first, so a flood refills before it reads. */
            if (events[i].events & EPOLLOUT) {
                if (flush_out(c) < 0)
                    continue;
            }
            if (events[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
                on_readable(c);
        }
    }
    return 0;
}
