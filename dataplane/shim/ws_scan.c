/* WebSocket frame scan and masking (RFC 6455 section 5.2 and 5.3). See wsgw_ws.h. */
#include <errno.h>
#include <limits.h>
#include <string.h>

#include "shim_internal.h"
#include "wsgw_ws.h"

WSGW_API int wsgw_ws_scan(const uint8_t *buf, size_t start, size_t len, uint64_t *out,
                          uint32_t max_frames, uint64_t *tail)
{
    if (unlikely(start > len || (buf == NULL && len != 0) || tail == NULL ||
                 (out == NULL && max_frames != 0))) {
        wsgw_set_error("wsgw_ws_scan: bad arguments (start %zu, len %zu)", start, len);
        return -EINVAL;
    }
    if (max_frames > INT_MAX)
        max_frames = INT_MAX;

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
        if (plen == 126) {
            plen = (uint64_t)p[2] << 8 | p[3];
        } else if (plen == 127) {
            plen = 0;
            for (int i = 0; i < 8; i++)
                plen = plen << 8 | p[2 + i];
        }
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
