/* Core NATS message scan. See wsgw_nats.h. */
#define _GNU_SOURCE /* memmem */
#include <errno.h>
#include <limits.h>
#include <string.h>

#include "shim_internal.h"
#include "wsgw_nats.h"

#define MAX_DIGITS 19
#define MAX_TOKENS 5 /* HMSG: subject, sid, header size, total size; one more: a reply */

static inline int is_sep(uint8_t c)
{
    return c == ' ' || c == '\t';
}

/* buf[at, at + n) is the operation name given (upper case), any case, then a separator. */
static inline int is_op(const uint8_t *p, const uint8_t *end, const char *op, size_t n)
{
    if ((size_t)(end - p) <= n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((p[i] & ~0x20u) != (uint8_t)op[i])
            return 0;
    return is_sep(p[n]);
}

/* A run of 1..MAX_DIGITS ASCII digits, all of [p, p + n), into *value (19 digits fit a
 * uint64_t: a nanosecond clock does); 0 when it is not one. */
static inline int number(const uint8_t *p, size_t n, uint64_t *value)
{
    if (n == 0 || n > MAX_DIGITS)
        return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return 0;
        v = v * 10 + (uint64_t)(p[i] - '0');
    }
    *value = v;
    return 1;
}

/* The value of the header line "\r\n<name>:" in block[0, n) as a number: 0 without such a
 * line, WSGW_NATS_ASK when it is not 1..MAX_DIGITS digits between blanks. */
static uint64_t header_number(const uint8_t *block, size_t n, const char *name)
{
    size_t name_len = strlen(name);
    const uint8_t *p = block, *end = block + n;
    for (;;) {
        p = memmem(p, (size_t)(end - p), "\r\n", 2);
        if (p == NULL)
            return 0;
        p += 2;
        if ((size_t)(end - p) > name_len && memcmp(p, name, name_len) == 0 &&
            p[name_len] == ':')
            break;
    }
    p += name_len + 1;
    while (p < end && is_sep(*p))
        p++;
    const uint8_t *digits = p;
    while (p < end && *p >= '0' && *p <= '9')
        p++;
    uint64_t value;
    int plain = number(digits, (size_t)(p - digits), &value);
    while (p < end && is_sep(*p))
        p++;
    if (!plain || end - p < 2 || p[0] != '\r' || p[1] != '\n')
        return WSGW_NATS_ASK;
    return value;
}

/* The message at p (the line's first byte) when it is one this scan takes, wholly before
 * end: fills words and returns the offset past its trailing CRLF; 0 to stop here. */
static size_t one_message(const uint8_t *buf, size_t at, size_t len, uint64_t max_payload,
                          const char *number_a, const char *number_b, uint64_t *words)
{
    const uint8_t *p = buf + at, *end = buf + len;
    int headers;
    if (is_op(p, end, "MSG", 3)) {
        headers = 0;
        p += 3;
    } else if (is_op(p, end, "HMSG", 4)) {
        headers = 1;
        p += 4;
    } else {
        return 0;
    }
    const uint8_t *eol = memchr(p, '\r', (size_t)(end - p));
    if (eol == NULL || eol + 1 >= end || eol[1] != '\n')
        return 0; /* incomplete, or a CR inside the line: the parser says which */
    const uint8_t *tok[MAX_TOKENS];
    size_t tok_len[MAX_TOKENS];
    int count = 0;
    while (p < eol) {
        while (p < eol && is_sep(*p))
            p++;
        if (p == eol)
            return 0; /* separators before the CRLF: not the protocol's form */
        const uint8_t *t = p;
        while (p < eol && !is_sep(*p)) {
            if (*p == '\n')
                return 0;
            p++;
        }
        if (count == MAX_TOKENS)
            return 0;
        tok[count] = t;
        tok_len[count++] = (size_t)(p - t);
    }
    if (count != 3 + headers)
        return 0; /* a reply subject (or too few or many arguments): the parser's case */
    uint64_t sid, hlen = 0, total;
    if (!number(tok[1], tok_len[1], &sid) ||
        (headers && !number(tok[2], tok_len[2], &hlen)) ||
        !number(tok[2 + headers], tok_len[2 + headers], &total) || total > max_payload ||
        hlen > total)
        return 0;
    size_t start = (size_t)(eol + 2 - buf);
    if ((uint64_t)(len - start) < total + 2)
        return 0; /* its payload is still on the way */
    size_t stop = start + (size_t)total;
    if (buf[stop] != '\r' || buf[stop + 1] != '\n')
        return 0;
    if (headers && (hlen < 5 || memcmp(buf + start, "NATS/", 5) != 0))
        return 0;
    words[0] = (uint64_t)(tok[0] - buf);
    words[1] = tok_len[0];
    words[2] = sid;
    words[3] = start;
    words[4] = hlen;
    words[5] = start + hlen;
    words[6] = total - hlen;
    words[7] = number_a && hlen ? header_number(buf + start, (size_t)hlen, number_a) : 0;
    words[8] = number_b && hlen ? header_number(buf + start, (size_t)hlen, number_b) : 0;
    return stop + 2;
}

WSGW_API int wsgw_nats_scan(const uint8_t *buf, size_t start, size_t len, uint64_t max_payload,
                            const char *number_a, const char *number_b, uint64_t *out,
                            uint32_t max_msgs, uint64_t *consumed)
{
    if (unlikely(start > len || (buf == NULL && len != 0) || consumed == NULL ||
                 (out == NULL && max_msgs != 0))) {
        wsgw_set_error("wsgw_nats_scan: bad arguments (start %zu, len %zu)", start, len);
        return -EINVAL;
    }
    uint32_t limit = max_msgs > INT_MAX ? INT_MAX : max_msgs;
    uint32_t n = 0;
    size_t at = start;
    while (n < limit && at < len) {
        size_t next = one_message(buf, at, len, max_payload, number_a, number_b,
                                  out + (size_t)n * WSGW_NATS_SCAN_WORDS);
        if (next == 0)
            break;
        at = next;
        n++;
    }
    *consumed = at;
    return (int)n;
}
