/* The /v1/stream consumer's read: recv + frame scan + the C sink's envelope. See wsgw_stream.h. */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "shim_internal.h"
#include "wsgw_stream.h"
#include "wsgw_ws.h"

/* The envelope's fixed pieces, as sink.c writes them (ENV_HEAD, the topic's middle as
 * gateway.hub builds it for wsgw_sink_envelope_topic, ENV_PAYLOAD, ENV_TAIL). */
static const char K_HEAD[] = "{\"type\":\"msg\",\"seq\":";
static const char K_SESSION[] = ",\"session\":";
static const char K_TOPIC[] = ",\"topic\":\"";
static const char K_TS[] = "\",\"recv_ts_ns\":";
static const char K_PAYLOAD[] = ",\"payload\":\"";
#define LIT(k) (k), (sizeof(k) - 1)

static inline int take_lit(const uint8_t **pp, const uint8_t *end, const char *lit, size_t n)
{
    if ((size_t)(end - *pp) < n || memcmp(*pp, lit, n) != 0)
        return 0;
    *pp += n;
    return 1;
}

/* A JSON number of 1..19 digits without a leading zero (so it fits 64 bits). */
static inline int take_u64(const uint8_t **pp, const uint8_t *end, uint64_t *v)
{
    const uint8_t *p = *pp;
    uint64_t n = 0;
    int d = 0;
    while (p < end && *p >= '0' && *p <= '9' && d < 20) {
        n = n * 10 + (uint64_t)(*p - '0');
        p++;
        d++;
    }
    if (d == 0 || d > 19 || (d > 1 && **pp == '0'))
        return 0;
    *v = n;
    *pp = p;
    return 1;
}

/* The frame payload b[0..n) when it is the sink's envelope: 1, w[0..4] and w[6] set (w[3] an
 * offset from base), P unescaped at o. Anything else: 0 (o may hold garbage). */
static int envelope(const uint8_t *b, size_t n, const uint8_t *base, uint64_t *w, uint8_t *o)
{
    const uint8_t *p = b, *end = b + n;
    if (!take_lit(&p, end, LIT(K_HEAD)) || !take_u64(&p, end, &w[0]) ||
        !take_lit(&p, end, LIT(K_SESSION)) || !take_u64(&p, end, &w[1]) ||
        !take_lit(&p, end, LIT(K_TOPIC)))
        return 0;
    const uint8_t *t = p;
    while (p < end && *p != '"') {
        if (*p == '\\' || *p < 0x20)
            return 0;
        p++;
    }
    w[3] = (uint64_t)(t - base);
    w[4] = (uint64_t)(p - t);
    if (!take_lit(&p, end, LIT(K_TS)) || !take_u64(&p, end, &w[2]) ||
        !take_lit(&p, end, LIT(K_PAYLOAD)))
        return 0;
    uint8_t *q = o;
    while (p < end) {
        uint8_t c = *p;
        if (c == '"')
            break;
        if (c < 0x20)
            return 0;
        if (c != '\\') {
            *q++ = c;
            p++;
            continue;
        }
        if (end - p < 2)
            return 0;
        switch (p[1]) {
        case '"': *q++ = '"'; break;
        case '\\': *q++ = '\\'; break;
        case '/': *q++ = '/'; break;
        case 'b': *q++ = '\b'; break;
        case 'f': *q++ = '\f'; break;
        case 'n': *q++ = '\n'; break;
        case 'r': *q++ = '\r'; break;
        case 't': *q++ = '\t'; break;
        case 'u': {
            if (end - p < 6 || p[2] != '0' || p[3] != '0')
                return 0;
            int hi = hexval(p[4]), lo = hexval(p[5]);
            if (hi < 0 || lo < 0 || hi > 7)
                return 0; /* U+0080 and up: the Python path's */
            *q++ = (uint8_t)(hi << 4 | lo);
            p += 6;
            continue;
        }
        default:
            return 0;
        }
        p += 2;
    }
    if (end - p != 2 || p[0] != '"' || p[1] != '}')
        return 0;
    w[6] = (uint64_t)(q - o);
    return 1;
}

WSGW_API int wsgw_stream_read(struct wsgw_stream_ctx *c, int fd)
{
    if (unlikely(c == NULL || c->buf == NULL || c->pay == NULL ||
                 (c->out == NULL && c->max_msgs) || c->cap > INT64_MAX ||
                 c->max_msgs > INT32_MAX)) {
        wsgw_set_error("wsgw_stream_read: bad arguments");
        return -EINVAL;
    }
    uint8_t *buf = c->buf, *pay = c->pay;
    uint64_t *out = c->out, max_payload = c->max_payload;
    uint32_t max_msgs = c->max_msgs;
    size_t got = (size_t)c->cap;
    c->consumed = 0;
    if (fd >= 0) {
        ssize_t r = recv(fd, buf, (size_t)c->cap, MSG_DONTWAIT);
        if (r <= 0) {
            c->got = r < 0 ? -(int64_t)errno : 0;
            return 0;
        }
        got = (size_t)r;
    }
    c->got = (int64_t)got;
    size_t at = 0, pay_at = 0;
    uint32_t count = 0;
    while (count < max_msgs && got - at >= 2) {
        const uint8_t *h = buf + at;
        if (h[0] != 0x81 || (h[1] & 0x80)) /* FIN text, no RSV; unmasked */
            break;
        uint64_t len = h[1];
        size_t head = 2;
        if (len == 126) {
            if (got - at < 4)
                break;
            len = (uint64_t)h[2] << 8 | h[3];
            head = 4;
            if (len < 126)
                break;
        } else if (len == 127) {
            if (got - at < 10)
                break;
            len = 0;
            for (int i = 0; i < 8; i++)
                len = len << 8 | h[2 + i];
            head = 10;
            if (len < 65536 || (len >> 63))
                break;
        }
        if (len > max_payload || len > got - at - head)
            break;
        const uint8_t *body = h + head;
        uint64_t *w = out + (size_t)count * WSGW_STREAM_WORDS;
        if (!wsgw_utf8_valid(body, (size_t)len) ||
            !envelope(body, (size_t)len, buf, w, pay + pay_at))
            break;
        w[5] = pay_at;
        pay_at += w[6];
        at += head + (size_t)len;
        count++;
    }
    c->consumed = at;
    return (int)count;
}
