/* WebSocket frame scanning and masking (RFC 6455 section 5.2, 5.3): the per-byte loops of
 * the WebSocket layer. Every decision (is this frame allowed, what to close with) is made in
 * Python (dataplane/ws/); this file only finds frame boundaries and XORs masking keys.
 * dataplane/ws/scan.py holds a pure-Python twin of each function, tested for equality.
 */
#ifndef WSGW_WS_H
#define WSGW_WS_H

#include "wsgw_shim.h"

/* Words per scanned frame in wsgw_ws_scan's out[] array. */
#define WSGW_WS_SCAN_WORDS 4

/* Bits of word 0 of a scanned frame. The low byte is the first header byte as sent. */
#define WSGW_WS_FIN 0x80u
#define WSGW_WS_RSV1 0x40u
#define WSGW_WS_RSV2 0x20u
#define WSGW_WS_RSV3 0x10u
#define WSGW_WS_OPCODE 0x0fu
#define WSGW_WS_MASKED 0x100u /* the MASK bit of the second header byte */
#define WSGW_WS_HEADER_SHIFT 16 /* header length in bytes (2..14) sits at bits 16.. */

/* Scan buf[start..len) for complete frames, at most max_frames of them, and describe each
 * in WSGW_WS_SCAN_WORDS words of out:
 *   out[0] = first header byte | WSGW_WS_MASKED | header length << WSGW_WS_HEADER_SHIFT
 *   out[1] = offset of the payload in buf
 *   out[2] = payload length (as declared: up to 2^64-1, the caller checks the MSB rule)
 *   out[3] = masking key bytes k0 | k1 << 8 | k2 << 16 | k3 << 24, or 0 when not masked
 * Scanning stops at the first frame that is not wholly in the buffer. tail receives:
 *   tail[0] = offset just past the last complete frame (where the next scan starts)
 *   tail[1] = bytes, counted from tail[0], the next frame needs before it can be scanned:
 *             its whole length when its header is complete, the header length known so
 *             far otherwise, 0 when the buffer ends on a frame boundary or max_frames was hit
 *   tail[2] = the payload length the next frame's header declares, or UINT64_MAX when its
 *             header is incomplete (lets the caller refuse an oversized frame early)
 * Returns the number of complete frames described (>= 0), or -EINVAL. */
WSGW_API int wsgw_ws_scan(const uint8_t *buf, size_t start, size_t len, uint64_t *out,
                          uint32_t max_frames, uint64_t *tail);

/* XOR buf[0..len) in place with the 4-byte masking key (RFC 6455 section 5.3), byte i using
 * key[(i + phase) % 4]: phase continues a payload that is unmasked in pieces. */
WSGW_API void wsgw_ws_mask(uint8_t *buf, size_t len, const uint8_t *key, size_t phase);

/* The same, reading src and writing dst (which may be src): masks an outgoing payload
 * straight into the frame being built. */
WSGW_API void wsgw_ws_mask_copy(uint8_t *dst, const uint8_t *src, size_t len, const uint8_t *key,
                                size_t phase);

#endif
