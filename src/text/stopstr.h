/* stopstr: stop strings over streamed generated text. Text arrives in
 * arbitrary chunks; the matcher releases what can no longer be part of a
 * stop string and holds back the rest (fewer than the longest stop string's
 * length, plus an incomplete UTF-8 sequence at the end). The match that
 * wins is the one starting earliest in the text (a shorter one on a tie),
 * wherever chunk boundaries fall: when one stop string has matched but a
 * longer one that began earlier may still complete, the matcher waits for
 * it. The result is the text before the winning match; everything after it
 * is dropped. Released text never ends inside a UTF-8 sequence (a match
 * that begins mid-sequence, possible only with stop strings that are not
 * valid UTF-8, cuts the text back to the sequence start). With no stop
 * strings every push is passed through unchanged. */
#ifndef DS_STOPSTR_H
#define DS_STOPSTR_H

#include <stddef.h>

#include "base/strbuf.h"

typedef struct {
    int n;           /* stop strings (empty ones left out) */
    char **stops;    /* copies */
    size_t *lens;
    size_t **fail;   /* per stop: KMP failure table (lens[i] entries) */
    size_t *state;   /* per stop: longest suffix of the text so far that is
                        a proper prefix of the stop string */
    size_t pos;      /* bytes pushed so far */
    size_t base;     /* stream offset of held.s[0] */
    strbuf held;
    int best;        /* a complete match seen but not yet final: its index */
    size_t best_at;  /* ... and its stream offset */
    int matched;     /* index of the winning stop string, or -1 */
} stop_matcher;

/* Copies the non-empty strings of stops[0..n). */
void stop_init(stop_matcher *m, const char *const *stops, int n);
/* Appends to out the text that can no longer be part of a stop string.
 * Returns 1 once a stop string has matched: the text before the match has
 * then been appended, the rest is dropped, and later pushes append nothing
 * (and return 1). */
int stop_push(stop_matcher *m, const char *s, size_t n, strbuf *out);
/* End of generation: releases the held tail. A match that was complete but
 * waiting on a longer candidate becomes final here (stop_matched is then 1
 * and only the text before it is released). */
void stop_flush(stop_matcher *m, strbuf *out);
int stop_matched(const stop_matcher *m);
/* The matched stop string (the matcher's copy), or NULL. */
const char *stop_which(const stop_matcher *m);
void stop_free(stop_matcher *m);

/* The largest q <= p such that cutting s[0..n) at q does not split a UTF-8
 * sequence: when p is inside a sequence whose lead byte is before p, the
 * lead's offset (p == n counts as inside when the tail sequence is still
 * incomplete). Malformed bytes are taken one at a time. */
size_t utf8_cut_before(const char *s, size_t n, size_t p);

#endif
