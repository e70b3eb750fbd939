/* WebSocket frame scan and masking (RFC 6455 section 5.2 and 5.3). See wsgw_ws.h. */
#include <errno.h>
#include <limits.h>
#include <string.h>

#include "shim_internal.h"
#include "wsgw_ws.h"

/* RFC 6455 5.2: the payload length of the frame at p, whose 7-bit field is len7 (126: the
 * next 16 bits, 127: the next 64, else len7 itself); p holds the whole header. */
static inline uint64_t payload_len(const uint8_t *p, uint64_t len7)
{
    if (len7 == 126)
        return (uint64_t)p[2] << 8 | p[3];
    if (len7 == 127) {
        uint64_t n = 0;
        for (int i = 0; i < 8; i++)
            n = n << 8 | p[2 + i];
        return n;
    }
    return len7;
}

/* The arguments both scanners check alike: the window buf[start, len), the tail word, and
 * room for max_frames results (have_out: the result arrays are there). Returns how many
 * frames to scan at most (the count must fit the int result), or -EINVAL with the error
 * set under the entry point's name. */
static int64_t scan_limit(const char *fn, const uint8_t *buf, size_t start, size_t len,
                          const uint64_t *tail, int have_out, uint32_t max_frames)
{
    if (unlikely(start > len || (buf == NULL && len != 0) || tail == NULL ||
                 (!have_out && max_frames != 0))) {
        wsgw_set_error("%s: bad arguments (start %zu, len %zu)", fn, start, len);
        return -EINVAL;
    }
    return max_frames > INT_MAX ? INT_MAX : max_frames;
}

WSGW_API int wsgw_ws_scan(const uint8_t *buf, size_t start, size_t len, uint64_t *out,
                          uint32_t max_frames, uint64_t *tail)
{
    int64_t limit = scan_limit("wsgw_ws_scan", buf, start, len, tail, out != NULL, max_frames);
    if (unlikely(limit < 0))
        return (int)limit;
    max_frames = (uint32_t)limit;

    size_t pos = start;
    uint32_t n = 0;
    uint64_t need = 0;
    uint64_t pending = UINT64_MAX;
    while (n < max_frames) {
        size_t avail = len - pos;
        if (avail == 0)
            break;
        if (unlikely(avail < 2)) {
            need = 2;
            break;
        }
        const uint8_t *p = buf + pos;
        /* Section 5.2: 7-bit length, or 126 + 16-bit, or 127 + 64-bit; then the key. */
        uint64_t plen = p[1] & 0x7fu;
        size_t hlen = 2;
        if (plen == 126)
            hlen += 2;
        else if (plen == 127)
            hlen += 8;
        if (p[1] & 0x80u)
            hlen += 4;
        if (unlikely(avail < hlen)) {
            need = hlen;
            break;
        }
        plen = payload_len(p, plen);
        if (plen > avail - hlen) {
            /* Incomplete: report what the frame needs, saturating at UINT64_MAX. */
            need = plen > UINT64_MAX - hlen ? UINT64_MAX : plen + hlen;
            pending = plen;
            break;
        }
        uint64_t key = 0;
        if (p[1] & 0x80u) {
            const uint8_t *k = p + hlen - 4;
            key = (uint64_t)k[0] | (uint64_t)k[1] << 8 | (uint64_t)k[2] << 16 |
                  (uint64_t)k[3] << 24;
        }
        uint64_t *f = out + (size_t)n * WSGW_WS_SCAN_WORDS;
        f[0] = (uint64_t)p[0] | ((uint64_t)(p[1] & 0x80u) << 1) |
               ((uint64_t)hlen << WSGW_WS_HEADER_SHIFT);
        f[1] = pos + hlen;
        f[2] = plen;
        f[3] = key;
        pos += hlen + (size_t)plen;
        n++;
    }
    tail[0] = pos;
    tail[1] = need;
    tail[2] = pending;
    return (int)n;
}

WSGW_API void wsgw_ws_mask_copy(uint8_t *dst, const uint8_t *src, size_t len, const uint8_t *key,
                                size_t phase)
{
    /* Eight key bytes rotated by phase: byte i of the payload uses k8[i % 8]. */
    uint8_t k8[8];
    for (size_t i = 0; i < 8; i++)
        k8[i] = key[(i + phase) & 3u];
    uint64_t k64;
    memcpy(&k64, k8, sizeof(k64));
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, src + i, sizeof(w));
        w ^= k64;
        memcpy(dst + i, &w, sizeof(w));
    }
    for (; i < len; i++)
        dst[i] = src[i] ^ k8[i & 7u];
}

WSGW_API void wsgw_ws_mask(uint8_t *buf, size_t len, const uint8_t *key, size_t phase)
{
    wsgw_ws_mask_copy(buf, buf, len, key, phase);
}

/* Is c1 a second byte lead c may take? RFC 3629 section 4's table: 80..BF but for E0 (A0..,
 * no overlong below U+0800), ED (..9F, no surrogates), F0 (90.., no overlong below U+10000)
 * and F4 (..8F, nothing above U+10FFFF). */
static inline int second_byte_ok(uint8_t c, uint8_t c1)
{
    uint8_t lo = 0x80, hi = 0xBF;
    if (c == 0xE0)
        lo = 0xA0;
    else if (c == 0xED)
        hi = 0x9F;
    else if (c == 0xF0)
        lo = 0x90;
    else if (c == 0xF4)
        hi = 0x8F;
    return c1 >= lo && c1 <= hi;
}

/* RFC 3629 section 4 (Unicode 3-7 well-formed byte sequences); ASCII 8 bytes at a time. */
static inline int utf8_valid(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, sizeof(w));
            if (w & 0x8080808080808080ull)
                break;
            i += 8;
        }
        if (i >= n)
            break;
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c < 0xC2) /* a stray continuation byte, or an overlong 2-byte lead */
            return 0;
        if (c < 0xE0) {
            if (n - i < 2 || (s[i + 1] & 0xC0) != 0x80)
                return 0;
            i += 2;
            continue;
        }
        if (c < 0xF0) {
            if (n - i < 3 || !second_byte_ok(c, s[i + 1]) || (s[i + 2] & 0xC0) != 0x80)
                return 0;
            i += 3;
            continue;
        }
        if (c < 0xF5) {
            if (n - i < 4 || !second_byte_ok(c, s[i + 1]) || (s[i + 2] & 0xC0) != 0x80 ||
                (s[i + 3] & 0xC0) != 0x80)
                return 0;
            i += 4;
            continue;
        }
        return 0; /* 0xF5..0xFF never appear in UTF-8 */
    }
    return 1;
}

WSGW_API int wsgw_utf8_valid(const uint8_t *buf, size_t len)
{
    return buf == NULL ? len == 0 : utf8_valid(buf, len);
}

WSGW_API int wsgw_ws_scan_batch(const uint8_t *buf, size_t start, size_t len, uint64_t max_size,
                                uint64_t *spans, uint8_t *ops, uint32_t max_frames,
                                uint64_t *tail)
{
    int64_t limit = scan_limit("wsgw_ws_scan_batch", buf, start, len, tail,
                               spans != NULL && ops != NULL, max_frames);
    if (unlikely(limit < 0))
        return (int)limit;
    max_frames = (uint32_t)limit;
    size_t pos = start;
    uint32_t n = 0;
    uint64_t why = WSGW_WS_BATCH_END;
    for (;;) {
        size_t avail = len - pos;
        if (avail == 0) {
            why = WSGW_WS_BATCH_END;
            break;
        }
        if (n == max_frames) {
            why = WSGW_WS_BATCH_FULL;
            break;
        }
        const uint8_t *p = buf + pos;
        uint8_t b0 = p[0];
        /* FIN set, RSV clear, opcode 1 or 2: 0x81 or 0x82. */
        if (b0 != 0x81 && b0 != 0x82) {
            why = WSGW_WS_BATCH_OTHER;
            break;
        }
        if (avail < 2) {
            why = WSGW_WS_BATCH_PARTIAL;
            break;
        }
        uint8_t b1 = p[1];
        if (b1 & 0x80u) { /* masked by the server: the per-frame code fails it */
            why = WSGW_WS_BATCH_OTHER;
            break;
        }
        uint64_t plen = b1;
        size_t hlen = 2;
        if (plen == 126)
            hlen = 4;
        else if (plen == 127)
            hlen = 10;
        if (avail < hlen) {
            why = WSGW_WS_BATCH_PARTIAL;
            break;
        }
        plen = payload_len(p, plen);
        if (plen > max_size) {
            why = WSGW_WS_BATCH_OTHER;
            break;
        }
        if (plen > avail - hlen) {
            why = WSGW_WS_BATCH_PARTIAL;
            break;
        }
        if (b0 == 0x81 && !utf8_valid(p + hlen, (size_t)plen)) {
            why = WSGW_WS_BATCH_OTHER;
            break;
        }
        spans[2 * (size_t)n] = pos + hlen;
        spans[2 * (size_t)n + 1] = plen;
        ops[n] = b0 & WSGW_WS_OPCODE;
        pos += hlen + (size_t)plen;
        n++;
    }
    tail[0] = pos;
    tail[1] = why;
    return (int)n;
}

WSGW_API void wsgw_ws_seq_check(const uint8_t *buf, const uint64_t *spans, uint32_t n,
                                uint64_t size, uint64_t *state)
{
    uint64_t next = state[0], gaps = state[1], dups = state[2], bad = state[3];
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *p = buf + spans[2 * (size_t)i];
        uint64_t plen = spans[2 * (size_t)i + 1];
        if (plen != size)
            bad++;
        uint64_t seq;
        if (likely(plen >= 8)) {
            memcpy(&seq, p, sizeof(seq));
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            seq = __builtin_bswap64(seq);
#endif
        } else {
            seq = 0;
            for (uint64_t k = 0; k < plen; k++)
                seq = seq << 8 | p[k];
        }
        if (seq != next) {
            if (seq > next)
                gaps += seq - next;
            else
                dups++;
        }
        if (seq >= next)
            next = seq == UINT64_MAX ? UINT64_MAX : seq + 1;
    }
    state[0] = next;
    state[1] = gaps;
    state[2] = dups;
    state[3] = bad;
}
