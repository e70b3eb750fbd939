/* book.c under AddressSanitizer and UBSan (tests/fuzz/test_book_sanitizers.py builds and runs
 * it): reads records "venue (1 byte), length (4 bytes, little endian), message" and feeds each
 * to a joined book of that venue, each message in a buffer of its exact size so that a read
 * past its end is reported. A break or a repeat is joined (the book's sequence set to what
 * the message follows) and the message tried again, so that most real ones apply. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include "wsgw_book.h"
int main(int argc, char **argv) {
    (void)argc;
    FILE *f = fopen(argv[1], "rb");
    const char *syms[] = {"", "BTCUSDT", "BTC-USDT", "BTCUSDT", "BTC/USD", "BTC-USD", "btcusd"};
    struct wsgw_book *books[7] = {0};
    for (int v = 1; v <= 6; v++) { books[v] = wsgw_book_new(v, syms[v], strlen(syms[v])); wsgw_book_set_joined(books[v], 1); }
    wsgw_book_set_depth(books[3], 50);
    wsgw_book_set_depth(books[4], 10);
    static char out[1 << 20]; int64_t info[WSGW_BOOK_INFO_N]; long n = 0, applied = 0;
    unsigned char hdr[5];
    while (fread(hdr, 1, 5, f) == 5) {
        uint32_t len = hdr[1] | hdr[2] << 8 | hdr[3] << 16 | (uint32_t)hdr[4] << 24;
        char *msg = malloc(len ? len : 1);  /* exact size: ASan sees any over-read */
        if (fread(msg, 1, len, f) != len) break;
        int v = hdr[0];
        int rc = wsgw_book_on_message(books[v], msg, len, 1, 3, out, (n % 7) ? sizeof(out) : 100, info);
        if (rc == WSGW_BOOK_GAP || rc == WSGW_BOOK_IGNORED) { /* join it: the seq it follows */
            int64_t prev = v == 1 ? (info[WSGW_BOOK_INFO_PREV_SEQ] ? info[WSGW_BOOK_INFO_PREV_SEQ] : info[WSGW_BOOK_INFO_FIRST_SEQ] - 1)
                         : v == 2 ? info[WSGW_BOOK_INFO_PREV_SEQ] : v == 6 ? info[WSGW_BOOK_INFO_SEQ] : info[WSGW_BOOK_INFO_SEQ] - 1;
            wsgw_book_set_seq(books[v], prev);
            rc = wsgw_book_on_message(books[v], msg, len, 1, 3, out, sizeof(out), info);
        }
        if (rc == WSGW_BOOK_APPLIED) applied++;
        if (n % 1000 == 0) { char top[1 << 16]; wsgw_book_top_json(books[v], 0, 100, top, sizeof(top)); wsgw_book_update(books[v], 1, msg, len); }
        free(msg); n++;
    }
    for (int v = 1; v <= 6; v++) wsgw_book_free(books[v]);
    printf("%ld messages, %ld applied\n", n, applied);
    return 0;
}
