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

/* Why wsgw_ws_scan_batch stopped (tail[1]). */
#define WSGW_WS_BATCH_END 0       /* the buffer ends on a frame boundary */
#define WSGW_WS_BATCH_FULL 1      /* max_frames were described: call again from tail[0] */
#define WSGW_WS_BATCH_PARTIAL 2   /* the next frame is batchable so far but not all here */
#define WSGW_WS_BATCH_OTHER 3     /* the next frame is not for the batch (see below) */

/* Scan buf[start..len) for the run of frames the batch path takes without any decision in
 * Python: complete, FIN set, RSV1-3 clear, unmasked, opcode text (1) or binary (2), payload
 * <= max_size, and for text frames valid UTF-8 (RFC 3629: no overlongs, no surrogates,
 * nothing above U+10FFFF). For frame i:
 *   spans[2i] = offset of its payload in buf, spans[2i + 1] = its payload length,
 *   ops[i] = its opcode.
 * The run stops at the first frame that is anything else (control frame, fragment, RSV bit,
 * mask, other opcode, oversized, bad UTF-8: WSGW_WS_BATCH_OTHER), at an incomplete frame
 * (WSGW_WS_BATCH_PARTIAL; a header whose fields already rule the batch out is OTHER), at
 * the end of the buffer (WSGW_WS_BATCH_END) or after max_frames (WSGW_WS_BATCH_FULL).
 * tail[0] = offset where the run stopped, tail[1] = why. Returns the frames described
 * (>= 0), or -EINVAL. */
WSGW_API int wsgw_ws_scan_batch(const uint8_t *buf, size_t start, size_t len, uint64_t max_size,
                                uint64_t *spans, uint8_t *ops, uint32_t max_frames,
                                uint64_t *tail);

/* 1 when buf[0..len) is valid UTF-8 (RFC 3629, the same rule as Python's strict decoder),
 * else 0. ASCII runs go 8 bytes at a time. */
WSGW_API int wsgw_utf8_valid(const uint8_t *buf, size_t len);

/* Verify sequence-numbered messages (the benchmark's floods: the first 8 payload bytes are a
 * big-endian counter, consecutive from 0) described by spans as wsgw_ws_scan_batch writes
 * them, n of them. state (in and out): state[0] = next expected sequence number,
 * state[1] += messages missing (a jump forward), state[2] += messages seen again (a step
 * back), state[3] += payloads whose length is not size. A payload shorter than 8 bytes
 * reads as the big-endian number of the bytes it has. */
WSGW_API void wsgw_ws_seq_check(const uint8_t *buf, const uint64_t *spans, uint32_t n,
                                uint64_t size, uint64_t *state);

#endif
