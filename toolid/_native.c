/* toolid._native: the optional native accelerator (toolid/native.py).
 *
 * parse(document: bytes, schema) -> (pruned, spans) | None
 *   Parse a JSON document keeping only the members a schema names, and record where each id
 *   literal is (toolid/prune.py builds the schema from the table).
 *
 * walk(document, tree, numbered, call, slots, found_type) -> list | None
 *   What positions.find_ids finds in a parsed document (toolid/positions.py: Tree), exactly
 *   as its generated Python walker does.
 *
 * restore(document, tree, spans, decode, roles, types) -> (edits, changes, defined) | None
 *   body's restore of every client id in a pruned request (no destination rules), fused with
 *   the walk: decode(value) gives None or (raw id, its literal); the edits (sorted, each
 *   position once) and the changes come in the order body's Python path makes them, and
 *   defined holds the values at definition positions. roles = (DEFINES, "restored"),
 *   types = (Change, Edit). None: as walk, or an id literal without a span.
 *
 * encode(buffer, start, end, *encoder) -> (edits, changes) | None
 *   encoder = (table, client_id, literal, REFERS, types, words) (body.native_encoder):
 *   body's encode of the ids of the document buffer[start:end], fused: parse (spans count
 *   from the buffer's start), walk (table = (schema, tree, roots, numbered, slots); the root
 *   call from the first int member named in roots), then, in the order of body._changes
 *   (calls first, by number, then what REFERS), client_id(found)
 *   for each find; the changes, and an edit (literal(client id)) for each member that
 *   changes, sorted. types = (Found, Change, Edit), words = ("encoded",). None: not ours.
 *
 * sse_encode(buffer, markers, changes, fallback, *encoder) -> (out: bytes, rest: int)
 *   (buffer: any bytes-like object)
 *   stream.StreamRewriter's framing and encoding of a piece of an SSE stream whose line
 *   endings are all LF: the events between hits of the markers (a tuple of words, as
 *   markers.Markers finds them) go out as they
 *   are, each event with a hit is encoded (one "data: " line: here, its changes appended to
 *   changes; any other: by fallback(event) -> bytes). out: what goes out; buffer[rest:] is
 *   an incomplete event, held by the caller.
 *
 * splice(document: bytes, edits) -> bytes
 *   body.apply: the (start, end, text) edits, sorted and apart, spliced into the document.
 *
 * A schema node is a tuple (members, elements): members is a tuple of (key bytes, key str,
 * spec) triples, elements the node applied to the objects in an array (or None). A spec is
 * LEAF (0: a string is kept, with the span of its literal), KEEP (1: a string without
 * escapes, a 64-bit integer, true, false or null is kept; other values are kept as None) or
 * a node. Every member named by a node is kept (as None when its value is of no use), so
 * that tests for a member's presence read the same; arrays keep every element (objects
 * pruned, anything else None), so that positions read the same. Members a node does not
 * name are validated and dropped.
 *
 * spans maps (id(object), key) to (start, end), the literal of a LEAF string with its quotes.
 *
 * None: the document is not one this parser vouches for (invalid JSON or UTF-8, a BOM, an
 * escape in a kept string or in any key, a key given twice in one object, an object of more
 * than MAX_KEYS members, a \u escape of a surrogate, NaN or Infinity, an integer beyond 64
 * bits where one is kept, nesting deeper than MAX_DEPTH): the caller falls back to a full
 * parse, which decides. It never guesses.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define LEAF 0
#define KEEP 1
#define MAX_DEPTH 200
#define MAX_KEYS 64 /* members of one object told apart without a hash */

static PyObject *_type_key, *_index_key, *_empty; /* "type", "index", "" */

typedef struct {
    const unsigned char *start, *p, *end;
    PyObject *spans;
    int depth;
    Py_ssize_t literal_start, literal_end; /* the last string literal read */
} Scan;

/* Bytes a string may hold as they are: printable ASCII but '"' and '\\'. */
static unsigned char plain[256];

/* The bytes of the 16 at p that are not plain, as a bit mask (bit k: p[k]); with SSE2 in one
 * go, else byte by byte. Strings are most of a body, and tool output is full of escapes. */
#if defined(__GNUC__) || defined(__clang__)
#define lowest_bit(mask) __builtin_ctz(mask)
#else
static inline int lowest_bit(unsigned int mask) {
    int k = 0;
    while (!(mask & 1u)) mask >>= 1, k++;
    return k;
}
#endif

#if defined(__SSE2__)
#include <emmintrin.h>
static inline unsigned int specials16(const unsigned char *p) {
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\');
    const __m128i space = _mm_set1_epi8(0x20);
    __m128i x = _mm_loadu_si128((const __m128i *)p);
    /* signed: a byte at or above 0x80 is negative, so below 0x20 too */
    __m128i special = _mm_or_si128(
        _mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, backslash)),
        _mm_cmplt_epi8(x, space));
    return (unsigned int)_mm_movemask_epi8(special);
}
#else
static inline unsigned int specials16(const unsigned char *p) {
    unsigned int mask = 0;
    for (int k = 0; k < 16; k++)
        if (!plain[p[k]]) mask |= 1u << k;
    return mask;
}
#endif

static void skip_ws(Scan *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t'))
        s->p++;
}

static int expect(Scan *s, unsigned char c) {
    skip_ws(s);
    if (s->p < s->end && *s->p == c) {
        s->p++;
        return 1;
    }
    return 0;
}

static int hex4(const unsigned char *p, unsigned int *out) {
    unsigned int v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else return 0;
    }
    *out = v;
    return 1;
}

/* One UTF-8 sequence starting at s->p (a byte >= 0x80): well formed, no surrogates. */
static int utf8(Scan *s) {
    const unsigned char *p = s->p;
    Py_ssize_t left = s->end - p;
    unsigned char c = p[0];
    int n;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) n = 1;
    else if (c == 0xE0) { n = 2; lo = 0xA0; }
    else if (c == 0xED) { n = 2; hi = 0x9F; }
    else if (c >= 0xE1 && c <= 0xEF) n = 2;
    else if (c == 0xF0) { n = 3; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) n = 3;
    else if (c == 0xF4) { n = 3; hi = 0x8F; }
    else return 0;
    if (left <= n || p[1] < lo || p[1] > hi) return 0;
    for (int i = 2; i <= n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF) return 0;
    s->p += n + 1;
    return 1;
}

/* The byte at *at, which is not plain, inside a string: 1 (go on, *at moved past it), 2 (the
 * string ended: s->p and s->literal_end set) or 0 (not a string this parser vouches for). */
static inline int special(Scan *s, const unsigned char **at, int *escaped) {
    const unsigned char *p = *at, *end = s->end;
    unsigned char c = *p;
    if (c == '"') {
        s->p = p + 1;
        s->literal_end = s->p - s->start;
        return 2;
    }
    if (c == '\\') {
        *escaped = 1;
        if (end - p < 2) return 0;
        unsigned char e = p[1];
        if (e == 'u') {
            unsigned int code;
            if (end - p < 6 || !hex4(p + 2, &code)) return 0;
            if (code >= 0xD800 && code <= 0xDFFF) return 0; /* surrogates: the full parse */
            *at = p + 6;
            return 1;
        }
        if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' ||
            e == 't') {
            *at = p + 2;
            return 1;
        }
        return 0;
    }
    if (c < 0x20) return 0;
    s->p = p;
    if (!utf8(s)) return 0;
    *at = s->p;
    return 1;
}

/* A string literal (s->p at its opening quote). Returns 1 and sets *escaped, or 0. The bytes
 * are taken 16 at a time: the ones that are not plain (quotes, escapes, control and non-ASCII
 * bytes) are handled in order from one mask, those an escape covers skipped. */
static int string(Scan *s, int *escaped) {
    const unsigned char *p = s->p + 1, *end = s->end;
    s->literal_start = s->p - s->start;
    *escaped = 0;
    for (;;) {
        while (end - p >= 16) {
            const unsigned char *block = p;
            unsigned int mask = specials16(block);
            while (mask) {
                const unsigned char *at = block + lowest_bit(mask);
                mask &= mask - 1;
                if (at < p) continue; /* covered by the escape or character before it */
                p = at;
                int done = special(s, &p, escaped);
                if (done != 1) return done == 2;
            }
            if (p < block + 16) p = block + 16;
        }
        while (p < end && plain[*p]) p++;
        if (p >= end) return 0;
        int done = special(s, &p, escaped);
        if (done != 1) return done == 2;
    }
}

/* A number (s->p at its first byte). *integer: no fraction, no exponent. */
static int number(Scan *s, int *integer) {
    const unsigned char *p = s->p;
    if (p < s->end && *p == '-') p++;
    if (p >= s->end) return 0;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') while (p < s->end && *p >= '0' && *p <= '9') p++;
    else return 0;
    *integer = 1;
    if (p < s->end && *p == '.') {
        *integer = 0;
        p++;
        if (p >= s->end || *p < '0' || *p > '9') return 0;
        while (p < s->end && *p >= '0' && *p <= '9') p++;
    }
    if (p < s->end && (*p == 'e' || *p == 'E')) {
        *integer = 0;
        p++;
        if (p < s->end && (*p == '+' || *p == '-')) p++;
        if (p >= s->end || *p < '0' || *p > '9') return 0;
        while (p < s->end && *p >= '0' && *p <= '9') p++;
    }
    s->p = p;
    return 1;
}

static int word(Scan *s, const char *w, Py_ssize_t n) {
    if (s->end - s->p < n || memcmp(s->p, w, n) != 0) return 0;
    s->p += n;
    return 1;
}

/* After a member or an element: 1 if a ',' follows (consumed), 0 if ``close`` does (consumed),
 * -1 otherwise. */
static int next_or_close(Scan *s, unsigned char close) {
    skip_ws(s);
    if (s->p < s->end && (*s->p == ',' || *s->p == close)) return *s->p++ == ',';
    return -1;
}

/* What a container read stands for: its pruned form, or None when it was only validated. */
static PyObject *result(PyObject *pruned) { return pruned ? pruned : Py_NewRef(Py_None); }

/* The failure value: NULL, with no exception set when the document is simply not ours. */
#define FAIL NULL

static PyObject *value(Scan *s, PyObject *spec);

static PyObject *spec_of(PyObject *members, const unsigned char *key, Py_ssize_t size,
                         PyObject **name) {
    Py_ssize_t n = PyTuple_GET_SIZE(members);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *entry = PyTuple_GET_ITEM(members, i);
        PyObject *raw = PyTuple_GET_ITEM(entry, 0);
        if (PyBytes_GET_SIZE(raw) == size && memcmp(PyBytes_AS_STRING(raw), key, size) == 0) {
            *name = PyTuple_GET_ITEM(entry, 1);
            return PyTuple_GET_ITEM(entry, 2);
        }
    }
    return NULL;
}

static int record_span(Scan *s, PyObject *holder, PyObject *name) {
    PyObject *address = PyLong_FromVoidPtr(holder);
    PyObject *start = PyLong_FromSsize_t(s->literal_start);
    PyObject *end = PyLong_FromSsize_t(s->literal_end);
    PyObject *key = address ? PyTuple_Pack(2, address, name) : NULL;
    PyObject *span = start && end ? PyTuple_Pack(2, start, end) : NULL;
    int ok = key && span && PyDict_SetItem(s->spans, key, span) == 0;
    Py_XDECREF(address);
    Py_XDECREF(start);
    Py_XDECREF(end);
    Py_XDECREF(key);
    Py_XDECREF(span);
    return ok;
}

/* Whether the key key[:size] is among the first count keys. */
static int repeated(const unsigned char **keys, const Py_ssize_t *sizes, int count,
                    const unsigned char *key, Py_ssize_t size) {
    for (int i = 0; i < count; i++)
        if (sizes[i] == size && memcmp(keys[i], key, size) == 0) return 1;
    return 0;
}

/* An object (s->p after its '{'); node: a schema node, or NULL to validate only. */
static PyObject *object(Scan *s, PyObject *node) {
    PyObject *members = node ? PyTuple_GET_ITEM(node, 0) : NULL;
    PyObject *pruned = node ? PyDict_New() : NULL;
    if (node && pruned == NULL) return FAIL;
    skip_ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return result(pruned);
    }
    const unsigned char *keys[MAX_KEYS];
    Py_ssize_t sizes[MAX_KEYS];
    int count = 0;
    for (;;) {
        int escaped;
        skip_ws(s);
        if (s->p >= s->end || *s->p != '"' || !string(s, &escaped)) break;
        const unsigned char *key = s->start + s->literal_start + 1;
        Py_ssize_t size = s->literal_end - s->literal_start - 2;
        /* A key spelled with escapes, or given twice, in any object: which member a parser
         * sees is the full parse's to say (and what toolid does then, its rewriter's). */
        if (escaped || count == MAX_KEYS || repeated(keys, sizes, count, key, size)) break;
        keys[count] = key;
        sizes[count++] = size;
        PyObject *spec = NULL, *name = NULL;
        if (members) spec = spec_of(members, key, size, &name);
        if (!expect(s, ':')) break;
        skip_ws(s);
        PyObject *item = value(s, spec);
        if (item == NULL) break;
        int ok = !spec || PyDict_SetItem(pruned, name, item) == 0;
        if (ok && spec && PyLong_Check(spec) && PyLong_AsLong(spec) == LEAF && PyUnicode_Check(item))
            ok = record_span(s, pruned, name);
        Py_DECREF(item);
        int more = ok ? next_or_close(s, '}') : -1;
        if (more == 0) return result(pruned);
        if (more < 0) break;
    }
    Py_XDECREF(pruned);
    return FAIL;
}

/* An array (s->p after its '['); node: its objects are pruned by the node's elements. */
static PyObject *array(Scan *s, PyObject *node) {
    PyObject *elements = NULL;
    PyObject *pruned = NULL;
    if (node) {
        elements = PyTuple_GET_ITEM(node, 1);
        if (elements == Py_None) elements = NULL;
        pruned = PyList_New(0);
        if (pruned == NULL) return FAIL;
    }
    skip_ws(s);
    if (s->p < s->end && *s->p == ']') {
        s->p++;
        return result(pruned);
    }
    for (;;) {
        skip_ws(s);
        int is_object = s->p < s->end && *s->p == '{';
        PyObject *item = value(s, is_object && elements ? elements : NULL);
        if (item == NULL) break;
        int ok = !pruned || PyList_Append(pruned, item) == 0;
        Py_DECREF(item);
        int more = ok ? next_or_close(s, ']') : -1;
        if (more == 0) return result(pruned);
        if (more < 0) break;
    }
    Py_XDECREF(pruned);
    return FAIL;
}

/* Any value (s->p at its first byte); spec: NULL (validate only), LEAF, KEEP or a node.
 * Returns what the pruned document holds for it (None when nothing). */
static PyObject *value(Scan *s, PyObject *spec) {
    if (s->p >= s->end) return FAIL;
    int kind = -1; /* -1: a node or nothing */
    if (spec && PyLong_Check(spec)) kind = (int)PyLong_AsLong(spec);
    PyObject *node = spec && PyTuple_Check(spec) ? spec : NULL;
    unsigned char c = *s->p;
    if (c == '{' || c == '[') {
        if (++s->depth > MAX_DEPTH) return FAIL;
        s->p++;
        PyObject *result = c == '{' ? object(s, node) : array(s, node);
        s->depth--;
        return result;
    }
    if (c == '"') {
        int escaped;
        const unsigned char *at = s->p;
        if (!string(s, &escaped)) return FAIL;
        if (kind == LEAF || kind == KEEP) {
            if (escaped) return FAIL; /* the full parse reads escapes */
            return PyUnicode_DecodeUTF8((const char *)at + 1, s->p - at - 2, "strict");
        }
        return Py_NewRef(Py_None);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        int integer;
        const unsigned char *at = s->p;
        if (!number(s, &integer)) return FAIL;
        if (kind == KEEP && integer) {
            Py_ssize_t digits = s->p - at - (*at == '-');
            if (digits > 18) return FAIL; /* parsers differ beyond 64 bits: the full parse */
            long long number = 0; /* at most 18 digits: no overflow */
            for (const unsigned char *d = at + (*at == '-'); d < s->p; d++)
                number = number * 10 + (*d - '0');
            return PyLong_FromLongLong(*at == '-' ? -number : number);
        }
        return Py_NewRef(Py_None);
    }
    if (word(s, "true", 4)) return Py_NewRef(kind == KEEP ? Py_True : Py_None);
    if (word(s, "false", 5)) return Py_NewRef(kind == KEEP ? Py_False : Py_None);
    if (word(s, "null", 4)) return Py_NewRef(Py_None);
    return FAIL;
}

/* Parse buffer[start:end] (spans count from the buffer's start): 1 and *pruned, *spans set;
 * 0: not ours; -1: an error. */
static int parse_range(const unsigned char *buffer, Py_ssize_t start, Py_ssize_t end,
                       PyObject *schema, PyObject **pruned, PyObject **spans) {
    Scan s = {buffer, buffer + start, buffer + end, PyDict_New(), 0, 0, 0};
    *pruned = NULL;
    *spans = NULL;
    if (s.spans == NULL) return -1;
    int done = 0;
    if (expect(&s, '{')) {
        s.depth = 1;
        PyObject *object_read = object(&s, schema);
        if (object_read != NULL) {
            skip_ws(&s);
            if (s.p == s.end) {
                *pruned = object_read;
                *spans = s.spans;
                return 1;
            }
            Py_DECREF(object_read);
        }
    }
    if (PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
            PyErr_Clear(); /* cannot happen for validated UTF-8; not ours either way */
        else
            done = -1;
    }
    Py_DECREF(s.spans);
    return done;
}

static PyObject *parse(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer document;
    if (nargs != 2 || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "parse(document: bytes, schema: tuple)");
        return NULL;
    }
    if (PyObject_GetBuffer(args[0], &document, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *pruned, *spans, *result = NULL;
    int done = parse_range(document.buf, 0, document.len, args[1], &pruned, &spans);
    if (done > 0) result = Py_BuildValue("(NN)", pruned, spans);
    else if (done == 0) result = Py_NewRef(Py_None);
    PyBuffer_Release(&document);
    return result;
}

/* --- walk: the table's tree over a parsed document ----------------------------------- */

#define PATH_SIZE 4096
#define MAX_NUMBERS 64

typedef struct {
    PyTypeObject *found_type; /* walk: Found; restore: Change */
    PyObject *slots;          /* a list of lists, one per position */
    PyObject *call;           /* the root call (a tuple) */
    int numbered;
    char path[PATH_SIZE];
    Py_ssize_t path_len;
    PyObject *numbers[MAX_NUMBERS]; /* owned */
    int count;
    /* restore only (decode is NULL for walk) */
    PyObject *decode, *spans, *defines, *restored, *edits, *defined;
    PyTypeObject *edit_type;
} Walk;

/* "[index]" into digits (room for 24); its length. */
static int bracketed(char *digits, Py_ssize_t index) {
    char reversed[20];
    int count = 0, size = 0;
    do reversed[count++] = (char)('0' + index % 10);
    while ((index /= 10) > 0);
    digits[size++] = '[';
    while (count > 0) digits[size++] = reversed[--count];
    digits[size++] = ']';
    return size;
}

static int push_path(Walk *w, const char *text, Py_ssize_t size, int member) {
    Py_ssize_t dot = member && w->path_len > 0;
    if (w->path_len + dot + size >= PATH_SIZE) return 0;
    if (dot) w->path[w->path_len++] = '.';
    memcpy(w->path + w->path_len, text, size);
    w->path_len += size;
    return 1;
}

static PyObject *path_of(Walk *w, PyObject *key) {
    Py_ssize_t size, saved = w->path_len;
    const char *text = PyUnicode_AsUTF8AndSize(key, &size);
    if (text == NULL) return NULL;
    if (!push_path(w, text, size, 1)) return Py_NewRef(Py_None);
    PyObject *path = PyUnicode_DecodeUTF8(w->path, w->path_len, "strict");
    w->path_len = saved;
    return path;
}

/* A restore at one position: the change and the edit, if decode changes the value. */
static int restore_at(Walk *w, PyObject *node, PyObject *key, PyObject *value, PyObject *role,
                      Py_ssize_t slot) {
    if (role == w->defines && PyList_Append(w->defined, value) < 0) return -1;
    PyObject *decoded = PyObject_CallOneArg(w->decode, value);
    if (decoded == NULL) return -1;
    if (decoded == Py_None) {
        Py_DECREF(decoded);
        return 1;
    }
    int done = -1;
    PyObject *address = NULL, *member = NULL, *path = NULL, *edit = NULL, *change = NULL;
    if (!PyTuple_Check(decoded) || PyTuple_GET_SIZE(decoded) != 2) {
        PyErr_SetString(PyExc_TypeError, "decode gives None or (raw, literal)");
        goto done;
    }
    address = PyLong_FromVoidPtr(node);
    member = address ? PyTuple_Pack(2, address, key) : NULL;
    if (member == NULL) goto done;
    PyObject *span = PyDict_GetItemWithError(w->spans, member);
    if (span == NULL || !PyTuple_Check(span) || PyTuple_GET_SIZE(span) != 2) {
        done = PyErr_Occurred() ? -1 : 0;
        goto done;
    }
    path = path_of(w, key);
    if (path == NULL || path == Py_None) {
        done = path ? 0 : -1;
        goto done;
    }
    edit = w->edit_type->tp_alloc(w->edit_type, 3);
    change = w->found_type->tp_alloc(w->found_type, 6);
    if (edit == NULL || change == NULL) goto done;
    PyTuple_SET_ITEM(edit, 0, Py_NewRef(PyTuple_GET_ITEM(span, 0)));
    PyTuple_SET_ITEM(edit, 1, Py_NewRef(PyTuple_GET_ITEM(span, 1)));
    PyTuple_SET_ITEM(edit, 2, Py_NewRef(PyTuple_GET_ITEM(decoded, 1)));
    PyTuple_SET_ITEM(change, 0, Py_NewRef(path));
    PyTuple_SET_ITEM(change, 1, Py_NewRef(PyTuple_GET_ITEM(decoded, 0)));
    PyTuple_SET_ITEM(change, 2, Py_NewRef(value));
    PyTuple_SET_ITEM(change, 3, Py_NewRef(w->restored));
    PyTuple_SET_ITEM(change, 4, Py_NewRef(_empty));
    PyTuple_SET_ITEM(change, 5, Py_NewRef(_empty));
    if (PyList_Append(w->edits, edit) == 0 &&
        PyList_Append(PyList_GET_ITEM(w->slots, slot), change) == 0)
        done = 1;
done:
    Py_DECREF(decoded);
    Py_XDECREF(address);
    Py_XDECREF(member);
    Py_XDECREF(path);
    Py_XDECREF(edit);
    Py_XDECREF(change);
    return done;
}

static int emit(Walk *w, PyObject *node, PyObject *key, PyObject *value, PyObject *role,
                Py_ssize_t slot) {
    if (w->decode != NULL) return restore_at(w, node, key, value, role, slot);
    Py_ssize_t size, saved = w->path_len;
    const char *text = PyUnicode_AsUTF8AndSize(key, &size);
    if (text == NULL) return -1;
    if (!push_path(w, text, size, 1)) return 0;
    PyObject *path = PyUnicode_DecodeUTF8(w->path, w->path_len, "strict");
    w->path_len = saved;
    if (path == NULL) return -1;
    PyObject *call;
    if (w->count == 0) {
        call = Py_NewRef(w->call);
    } else {
        Py_ssize_t root = PyTuple_GET_SIZE(w->call);
        call = PyTuple_New(root + w->count);
        if (call == NULL) {
            Py_DECREF(path);
            return -1;
        }
        for (Py_ssize_t i = 0; i < root; i++)
            PyTuple_SET_ITEM(call, i, Py_NewRef(PyTuple_GET_ITEM(w->call, i)));
        for (int i = 0; i < w->count; i++)
            PyTuple_SET_ITEM(call, root + i, Py_NewRef(w->numbers[i]));
    }
    PyObject *found = w->found_type->tp_alloc(w->found_type, 6);
    if (found == NULL) {
        Py_DECREF(path);
        Py_DECREF(call);
        return -1;
    }
    PyTuple_SET_ITEM(found, 0, Py_NewRef(node));
    PyTuple_SET_ITEM(found, 1, Py_NewRef(key));
    PyTuple_SET_ITEM(found, 2, Py_NewRef(value));
    PyTuple_SET_ITEM(found, 3, path);
    PyTuple_SET_ITEM(found, 4, Py_NewRef(role));
    PyTuple_SET_ITEM(found, 5, call);
    int ok = PyList_Append(PyList_GET_ITEM(w->slots, slot), found);
    Py_DECREF(found);
    return ok == 0 ? 1 : -1;
}

/* Whether an element goes on (positions.Tree.elements). -1: an error. */
static int admits(PyObject *element, PyObject *types, PyObject *needs, int bare) {
    if (bare) return 1;
    if (!PyDict_Check(element)) return 0;
    if (needs != Py_None) {
        PyObject *iterator = PyObject_GetIter(needs), *name;
        int any = 0;
        if (iterator == NULL) return -1;
        while (!any && (name = PyIter_Next(iterator)) != NULL) {
            any = PyDict_Contains(element, name);
            Py_DECREF(name);
        }
        Py_DECREF(iterator);
        if (any < 0 || PyErr_Occurred()) return -1;
        if (!any) return 0;
    }
    if (types != Py_None) {
        PyObject *kind = PyDict_GetItemWithError(element, _type_key);
        if (kind == NULL) return PyErr_Occurred() ? -1 : 0;
        if (!PyUnicode_Check(kind)) return 0;
        return PySet_Contains(types, kind);
    }
    return 1;
}

/* 1: done, 0: not ours (the Python walker decides), -1: an error. */
static int visit(Walk *w, PyObject *node, PyObject *tree) {
    PyObject *leaves = PyTuple_GET_ITEM(tree, 0), *members = PyTuple_GET_ITEM(tree, 1);
    PyObject *elements = PyTuple_GET_ITEM(tree, 2);
    if (PyDict_Check(node)) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(leaves); i++) {
            PyObject *leaf = PyTuple_GET_ITEM(leaves, i);
            PyObject *key = PyTuple_GET_ITEM(leaf, 0);
            PyObject *value = PyDict_GetItemWithError(node, key);
            if (value == NULL) {
                if (PyErr_Occurred()) return -1;
                continue;
            }
            if (!PyUnicode_CheckExact(value)) continue;
            Py_ssize_t slot = PyLong_AsSsize_t(PyTuple_GET_ITEM(leaf, 1));
            int done = emit(w, node, key, value, PyTuple_GET_ITEM(leaf, 2), slot);
            if (done <= 0) return done;
        }
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(members); i++) {
            PyObject *member = PyTuple_GET_ITEM(members, i);
            PyObject *key = PyTuple_GET_ITEM(member, 0);
            PyObject *child = PyDict_GetItemWithError(node, key);
            if (child == NULL) {
                if (PyErr_Occurred()) return -1;
                continue;
            }
            if (child == Py_None) continue;
            Py_ssize_t size, saved = w->path_len;
            const char *text = PyUnicode_AsUTF8AndSize(key, &size);
            if (text == NULL) return -1;
            if (!push_path(w, text, size, 1)) return 0;
            Py_INCREF(child); /* the walk must not outlive it (nothing mutates it; cheap) */
            int done = visit(w, child, PyTuple_GET_ITEM(member, 1));
            Py_DECREF(child);
            w->path_len = saved;
            if (done <= 0) return done;
        }
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(elements); i++) {
        PyObject *step = PyTuple_GET_ITEM(elements, i);
        PyObject *types = PyTuple_GET_ITEM(step, 0), *needs = PyTuple_GET_ITEM(step, 1);
        int bare = PyObject_IsTrue(PyTuple_GET_ITEM(step, 2));
        PyObject *inside = PyTuple_GET_ITEM(step, 3);
        if (PyList_Check(node)) {
            for (Py_ssize_t index = 0; index < PyList_GET_SIZE(node); index++) {
                PyObject *element = PyList_GET_ITEM(node, index);
                Py_INCREF(element);
                int admitted = admits(element, types, needs, bare);
                int done = 1;
                if (admitted < 0) done = -1;
                else if (admitted) {
                    char digits[24];
                    int size = bracketed(digits, index);
                    Py_ssize_t saved = w->path_len;
                    int pushed = 0;
                    if (!push_path(w, digits, size, 0)) done = 0;
                    else if (w->numbered && w->count >= MAX_NUMBERS) done = 0;
                    else if (w->numbered) {
                        /* its own "index" member if that is an int, else its position */
                        PyObject *number = NULL;
                        if (PyDict_Check(element)) {
                            number = PyDict_GetItemWithError(element, _index_key);
                            if (number == NULL && PyErr_Occurred()) done = -1;
                        }
                        if (done > 0) {
                            number = number && PyLong_CheckExact(number)
                                         ? Py_NewRef(number)
                                         : PyLong_FromSsize_t(index);
                            if (number == NULL) done = -1;
                            else {
                                w->numbers[w->count++] = number;
                                pushed = 1;
                            }
                        }
                    }
                    if (done > 0) done = visit(w, element, inside);
                    if (pushed) Py_CLEAR(w->numbers[--w->count]);
                    w->path_len = saved;
                }
                Py_DECREF(element);
                if (done <= 0) return done;
            }
        } else {
            int admitted = admits(node, types, needs, bare);
            if (admitted < 0) return -1;
            if (admitted) {
                int done = visit(w, node, inside);
                if (done <= 0) return done;
            }
        }
    }
    return 1;
}

/* The walk from the root: each position's finds (Found, or Change in a restore) in table
 * order, or None (not ours); NULL: an error. */
static PyObject *walk_all(Walk *w, PyObject *document, PyObject *tree, Py_ssize_t slots) {
    PyObject *result = NULL;
    w->slots = PyList_New(slots);
    if (w->slots == NULL) return NULL;
    for (Py_ssize_t i = 0; i < slots; i++) {
        PyObject *list = PyList_New(0);
        if (list == NULL) goto done;
        PyList_SET_ITEM(w->slots, i, list);
    }
    int walked = visit(w, document, tree);
    while (w->count > 0) Py_CLEAR(w->numbers[--w->count]);
    if (walked < 0) goto done;
    if (walked == 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    result = PyList_New(0);
    for (Py_ssize_t i = 0; result && i < slots; i++) {
        PyObject *list = PyList_GET_ITEM(w->slots, i);
        if (PyList_SetSlice(result, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, list) < 0) Py_CLEAR(result);
    }
done:
    Py_CLEAR(w->slots);
    return result;
}

static PyObject *walk(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6 || !PyTuple_Check(args[1]) || !PyTuple_Check(args[3]) ||
        !PyLong_Check(args[4]) || !PyType_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError,
                        "walk(document, tree, numbered, call, slots, found_type)");
        return NULL;
    }
    Py_ssize_t slots = PyLong_AsSsize_t(args[4]);
    Walk *w = PyMem_Calloc(1, sizeof(Walk));
    if (w == NULL) return PyErr_NoMemory();
    w->found_type = (PyTypeObject *)args[5];
    w->call = args[3];
    w->numbered = PyObject_IsTrue(args[2]);
    PyObject *result = walk_all(w, args[0], args[1], slots);
    PyMem_Free(w);
    return result;
}

/* Sort the edits by where they start, each position once (two finds of one member). */
static int sorted_apart(PyObject *edits) {
    if (PyList_Sort(edits) < 0) return -1;
    Py_ssize_t kept = 0, n = PyList_GET_SIZE(edits);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *edit = PyList_GET_ITEM(edits, i);
        if (kept > 0) {
            PyObject *last = PyList_GET_ITEM(edits, kept - 1);
            int same = PyObject_RichCompareBool(PyTuple_GET_ITEM(last, 0),
                                                PyTuple_GET_ITEM(edit, 0), Py_EQ);
            if (same < 0) return -1;
            if (same) continue;
        }
        if (kept != i) {
            Py_INCREF(edit);
            PyList_SetItem(edits, kept, edit); /* steals; drops the one there */
        }
        kept++;
    }
    return PyList_SetSlice(edits, kept, n, NULL);
}

static PyObject *restore(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7 || !PyTuple_Check(args[1]) || !PyDict_Check(args[2]) ||
        !PyTuple_Check(args[4]) || PyTuple_GET_SIZE(args[4]) != 2 || !PyTuple_Check(args[5]) ||
        PyTuple_GET_SIZE(args[5]) != 2 || !PyType_Check(PyTuple_GET_ITEM(args[5], 0)) ||
        !PyType_Check(PyTuple_GET_ITEM(args[5], 1)) || !PyLong_Check(args[6])) {
        PyErr_SetString(PyExc_TypeError,
                        "restore(document, tree, spans, decode, roles, types, slots)");
        return NULL;
    }
    Walk *w = PyMem_Calloc(1, sizeof(Walk));
    if (w == NULL) return PyErr_NoMemory();
    w->spans = args[2];
    w->decode = args[3];
    w->defines = PyTuple_GET_ITEM(args[4], 0);
    w->restored = PyTuple_GET_ITEM(args[4], 1);
    w->found_type = (PyTypeObject *)PyTuple_GET_ITEM(args[5], 0);
    w->edit_type = (PyTypeObject *)PyTuple_GET_ITEM(args[5], 1);
    w->edits = PyList_New(0);
    w->defined = PyList_New(0);
    PyObject *result = NULL, *changes = NULL;
    if (w->edits == NULL || w->defined == NULL) goto done;
    changes = walk_all(w, args[0], args[1], PyLong_AsSsize_t(args[6]));
    if (changes == NULL || changes == Py_None) {
        result = changes;
        changes = NULL;
        goto done;
    }
    if (sorted_apart(w->edits) < 0) goto done;
    result = PyTuple_Pack(3, w->edits, changes, w->defined);
done:
    Py_XDECREF(changes);
    Py_XDECREF(w->edits);
    Py_XDECREF(w->defined);
    PyMem_Free(w);
    return result;
}

/* --- encode: the ids of one response or event, made safe --------------------------------- */

/* What encoding reads: the table and body's callbacks (see encode's comment at the top). */
typedef struct {
    PyObject *schema, *tree, *roots, *client_id, *literal, *refers, *encoded;
    int numbered;
    Py_ssize_t slots;
    PyTypeObject *found_type, *change_type, *edit_type;
} Encoder;

/* Read kit = (table, client_id, literal, REFERS, types, words); 0 on a TypeError. */
static int encoder_from(Encoder *e, PyObject *const *kit) {
    PyObject *table = kit[0], *types = kit[4], *words = kit[5];
    if (!PyTuple_Check(table) || PyTuple_GET_SIZE(table) != 5 ||
        !PyTuple_Check(PyTuple_GET_ITEM(table, 0)) || !PyTuple_Check(PyTuple_GET_ITEM(table, 1)) ||
        !PyTuple_Check(PyTuple_GET_ITEM(table, 2)) || !PyLong_Check(PyTuple_GET_ITEM(table, 4)) ||
        !PyTuple_Check(types) || PyTuple_GET_SIZE(types) != 3 ||
        !PyType_Check(PyTuple_GET_ITEM(types, 0)) || !PyType_Check(PyTuple_GET_ITEM(types, 1)) ||
        !PyType_Check(PyTuple_GET_ITEM(types, 2)) || !PyTuple_Check(words) ||
        PyTuple_GET_SIZE(words) != 1) {
        PyErr_SetString(PyExc_TypeError,
                        "the encoder is ((schema, tree, roots, numbered, slots), client_id, "
                        "literal, REFERS, (Found, Change, Edit), (\"encoded\",))");
        return 0;
    }
    e->schema = PyTuple_GET_ITEM(table, 0);
    e->tree = PyTuple_GET_ITEM(table, 1);
    e->roots = PyTuple_GET_ITEM(table, 2);
    e->numbered = PyObject_IsTrue(PyTuple_GET_ITEM(table, 3));
    e->slots = PyLong_AsSsize_t(PyTuple_GET_ITEM(table, 4));
    e->client_id = kit[1];
    e->literal = kit[2];
    e->refers = kit[3];
    e->found_type = (PyTypeObject *)PyTuple_GET_ITEM(types, 0);
    e->change_type = (PyTypeObject *)PyTuple_GET_ITEM(types, 1);
    e->edit_type = (PyTypeObject *)PyTuple_GET_ITEM(types, 2);
    e->encoded = PyTuple_GET_ITEM(words, 0);
    return e->numbered >= 0 && !PyErr_Occurred();
}

/* The root call of an event: its first int member among names (positions.find_ids). */
static PyObject *root_call(PyObject *document, PyObject *names) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++) {
        PyObject *number = PyDict_GetItemWithError(document, PyTuple_GET_ITEM(names, i));
        if (number == NULL && PyErr_Occurred()) return NULL;
        if (number != NULL && PyLong_CheckExact(number)) return PyTuple_Pack(1, number);
    }
    return PyTuple_New(0);
}

/* Sort the finds as body._changes does (stably by body._calls_first: calls in order, by
 * number, then what refers to them): by (refers, call, position in the list). */
static int calls_first(Encoder *e, PyObject *found) {
    Py_ssize_t n = PyList_GET_SIZE(found);
    if (n < 2) return 0;
    PyObject *keyed = PyList_New(n);
    if (keyed == NULL) return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *one = PyList_GET_ITEM(found, i);
        PyObject *refers = PyTuple_GET_ITEM(one, 4) == e->refers ? Py_True : Py_False;
        PyObject *key = Py_BuildValue("(OOnO)", refers, PyTuple_GET_ITEM(one, 5), i, one);
        if (key == NULL) {
            Py_DECREF(keyed);
            return -1;
        }
        PyList_SET_ITEM(keyed, i, key);
    }
    int done = PyList_Sort(keyed);
    for (Py_ssize_t i = 0; done == 0 && i < n; i++)
        done = PyList_SetItem(found, i, Py_NewRef(PyTuple_GET_ITEM(PyList_GET_ITEM(keyed, i), 3)));
    Py_DECREF(keyed);
    return done;
}

/* The edit of one member that changes: its span and the literal of its new value. */
static int add_edit(Encoder *e, PyObject *edits, PyObject *spans, PyObject *member,
                    PyObject *client) {
    PyObject *span = PyDict_GetItemWithError(spans, member);
    if (span == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_KeyError, "an id without a span");
        return -1;
    }
    PyObject *text = PyObject_CallOneArg(e->literal, client);
    if (text == NULL) return -1;
    PyObject *edit = e->edit_type->tp_alloc(e->edit_type, 3);
    if (edit == NULL) {
        Py_DECREF(text);
        return -1;
    }
    PyTuple_SET_ITEM(edit, 0, Py_NewRef(PyTuple_GET_ITEM(span, 0)));
    PyTuple_SET_ITEM(edit, 1, Py_NewRef(PyTuple_GET_ITEM(span, 1)));
    PyTuple_SET_ITEM(edit, 2, text);
    int done = PyList_Append(edits, edit);
    Py_DECREF(edit);
    return done;
}

/* One find: its client id, and if that differs, its change and (once per member) edit. */
static int encode_one(Encoder *e, PyObject *one, PyObject *spans, PyObject *members,
                      PyObject *edits, PyObject *changes) {
    PyObject *holder = PyTuple_GET_ITEM(one, 0), *key = PyTuple_GET_ITEM(one, 1);
    PyObject *value = PyTuple_GET_ITEM(one, 2);
    PyObject *client = PyObject_CallOneArg(e->client_id, one);
    if (client == NULL) return -1;
    int done = -1;
    PyObject *change = NULL, *address = NULL, *member = NULL;
    if (!PyUnicode_Check(client)) {
        PyErr_SetString(PyExc_TypeError, "client_id gives a str");
        goto done;
    }
    if (PyUnicode_Compare(client, value) == 0) {
        done = 0;
        goto done;
    }
    change = e->change_type->tp_alloc(e->change_type, 6);
    if (change == NULL) goto done;
    PyTuple_SET_ITEM(change, 0, Py_NewRef(PyTuple_GET_ITEM(one, 3)));
    PyTuple_SET_ITEM(change, 1, Py_NewRef(value));
    PyTuple_SET_ITEM(change, 2, Py_NewRef(client));
    PyTuple_SET_ITEM(change, 3, Py_NewRef(e->encoded));
    PyTuple_SET_ITEM(change, 4, Py_NewRef(_empty));
    PyTuple_SET_ITEM(change, 5, Py_NewRef(_empty));
    if (PyList_Append(changes, change) < 0) goto done;
    address = PyLong_FromVoidPtr(holder); /* each member once, the first value: _Targets */
    member = address ? PyTuple_Pack(2, address, key) : NULL;
    int seen = member ? PySet_Contains(members, member) : -1;
    if (seen == 0) seen = PySet_Add(members, member);
    if (seen == 0) seen = add_edit(e, edits, spans, member, client);
    done = seen < 0 ? -1 : 0;
done:
    Py_DECREF(client);
    Py_XDECREF(change);
    Py_XDECREF(address);
    Py_XDECREF(member);
    return done;
}

/* buffer[start:end] encoded: (edits, changes) as lists, None (not ours) or NULL (an error).
 * The edits are sorted and count from the buffer's start. */
static PyObject *encode_range(Encoder *e, const unsigned char *buffer, Py_ssize_t start,
                              Py_ssize_t end) {
    PyObject *pruned, *spans, *call = NULL, *found = NULL, *result = NULL;
    PyObject *edits = NULL, *changes = NULL, *members = NULL;
    int done = parse_range(buffer, start, end, e->schema, &pruned, &spans);
    if (done <= 0) return done == 0 ? Py_NewRef(Py_None) : NULL;
    call = root_call(pruned, e->roots);
    if (call == NULL) goto done;
    Walk w; /* its path and numbers are filled as it goes: no need to clear 4 KiB */
    w.found_type = e->found_type;
    w.slots = NULL;
    w.call = call;
    w.numbered = e->numbered;
    w.path_len = 0;
    w.count = 0;
    w.decode = NULL;
    found = walk_all(&w, pruned, e->tree, e->slots);
    if (found == NULL || found == Py_None) {
        result = found;
        found = NULL;
        goto done;
    }
    edits = PyList_New(0);
    changes = PyList_New(0);
    members = PySet_New(NULL);
    if (edits == NULL || changes == NULL || members == NULL || calls_first(e, found) < 0)
        goto done;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(found); i++)
        if (encode_one(e, PyList_GET_ITEM(found, i), spans, members, edits, changes) < 0)
            goto done;
    if (PyList_Sort(edits) < 0) goto done;
    result = PyTuple_Pack(2, edits, changes);
done:
    Py_XDECREF(edits);
    Py_XDECREF(changes);
    Py_XDECREF(members);
    Py_XDECREF(found);
    Py_XDECREF(call);
    Py_DECREF(pruned);
    Py_DECREF(spans);
    return result;
}

static PyObject *encode(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    Encoder e;
    if (nargs != 9 || !PyBytes_Check(args[0]) || !PyLong_Check(args[1]) ||
        !PyLong_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "encode(buffer, start, end, *encoder)");
        return NULL;
    }
    if (!encoder_from(&e, args + 3)) return NULL;
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    Py_ssize_t start = PyLong_AsSsize_t(args[1]), end = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred()) return NULL;
    if (start < 0 || end < start || end > size) {
        PyErr_SetString(PyExc_ValueError, "start and end must be inside the buffer");
        return NULL;
    }
    return encode_range(&e, (const unsigned char *)PyBytes_AS_STRING(args[0]), start, end);
}

/* --- sse_encode: the events of a piece of an SSE stream (LF line endings) --------------- */

/* The bytes going out, written straight into a bytes object (grown as needed). */
typedef struct {
    PyObject *bytes;
    Py_ssize_t size;
} Out;

static int out_add(Out *o, const void *data, Py_ssize_t n) {
    Py_ssize_t capacity = PyBytes_GET_SIZE(o->bytes);
    if (o->size + n > capacity) {
        Py_ssize_t grown = capacity * 2 > o->size + n ? capacity * 2 : o->size + n;
        if (_PyBytes_Resize(&o->bytes, grown) < 0) return -1;
    }
    memcpy(PyBytes_AS_STRING(o->bytes) + o->size, data, n);
    o->size += n;
    return 0;
}

/* Where the first "\n\n" in b[start:stop] starts, or -1. */
static Py_ssize_t find_blank(const unsigned char *b, Py_ssize_t start, Py_ssize_t stop) {
    while (start + 1 < stop) {
        const unsigned char *lf = memchr(b + start, '\n', stop - 1 - start);
        if (lf == NULL) return -1;
        start = lf - b;
        if (b[start + 1] == '\n') return start;
        start += 2; /* b[start + 1] is no LF: no "\n\n" starts there either */
    }
    return -1;
}

/* Where the last "\n\n" in b[start:stop] starts, or -1. */
static Py_ssize_t rfind_blank(const unsigned char *b, Py_ssize_t start, Py_ssize_t stop) {
    for (Py_ssize_t at = stop - 2; at >= start;) {
        if (b[at] != '\n') {
            at -= 2; /* neither at nor at - 1 starts one: b[at] is no LF */
            continue;
        }
        if (b[at + 1] == '\n') return at;
        at--;
    }
    return -1;
}

/* One event with a marker, b[start:end]: encoded here when it is one "data: " line and the
 * native parser vouches for it, else by fallback(event) (stream.StreamRewriter._event). */
static int sse_event(Encoder *e, const unsigned char *b, Py_ssize_t start, Py_ssize_t end,
                     PyObject *changes, PyObject *fallback, Out *out) {
    const unsigned char *lf = memchr(b + start, '\n', end - start);
    if (end - start >= 8 && memcmp(b + start, "data: ", 6) == 0 && lf == b + end - 2) {
        PyObject *encoded = encode_range(e, b, start + 6, end - 2);
        if (encoded == NULL) PyErr_Clear(); /* the fallback meets it again, and decides */
        else if (encoded == Py_None) Py_DECREF(encoded);
        else {
            PyObject *edits = PyTuple_GET_ITEM(encoded, 0);
            PyObject *found = PyTuple_GET_ITEM(encoded, 1);
            int done = PyList_SetSlice(changes, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, found);
            Py_ssize_t at = start;
            for (Py_ssize_t i = 0; done == 0 && i < PyList_GET_SIZE(edits); i++) {
                PyObject *edit = PyList_GET_ITEM(edits, i), *text = PyTuple_GET_ITEM(edit, 2);
                Py_ssize_t from = PyLong_AsSsize_t(PyTuple_GET_ITEM(edit, 0));
                done = out_add(out, b + at, from - at);
                if (done == 0)
                    done = out_add(out, PyBytes_AS_STRING(text), PyBytes_GET_SIZE(text));
                at = PyLong_AsSsize_t(PyTuple_GET_ITEM(edit, 1));
            }
            if (done == 0) done = out_add(out, b + at, end - at);
            Py_DECREF(encoded);
            return done;
        }
    }
    PyObject *event = PyBytes_FromStringAndSize((const char *)b + start, end - start);
    PyObject *text = event ? PyObject_CallOneArg(fallback, event) : NULL;
    Py_XDECREF(event);
    if (text == NULL) return -1;
    int done = -1;
    if (!PyBytes_Check(text)) PyErr_SetString(PyExc_TypeError, "fallback gives bytes");
    else done = out_add(out, PyBytes_AS_STRING(text), PyBytes_GET_SIZE(text));
    Py_DECREF(text);
    return done;
}

/* The marker words and, for each, where it next begins (-1: not searched yet; the buffer's
 * size: nowhere after). Like markers.Markers.finder: the first word from an offset on. */
#define MAX_MARKERS 64
typedef struct {
    const unsigned char *word[MAX_MARKERS];
    Py_ssize_t size[MAX_MARKERS], next[MAX_MARKERS];
    int count;
} Markers;

static const unsigned char *find_word(const unsigned char *hay, Py_ssize_t n,
                                      const unsigned char *word, Py_ssize_t size) {
#if defined(_WIN32)
    const unsigned char *end = hay + n - size + 1;
    while (hay < end && (hay = memchr(hay, word[0], end - hay)) != NULL) {
        if (memcmp(hay, word, size) == 0) return hay;
        hay++;
    }
    return NULL;
#else
    return memmem(hay, n, word, size);
#endif
}

static int markers_from(Markers *m, PyObject *words) {
    if (!PyTuple_Check(words) || PyTuple_GET_SIZE(words) < 1 ||
        PyTuple_GET_SIZE(words) > MAX_MARKERS) {
        PyErr_SetString(PyExc_TypeError, "markers: a tuple of 1 to 64 non-empty bytes");
        return 0;
    }
    m->count = (int)PyTuple_GET_SIZE(words);
    for (int i = 0; i < m->count; i++) {
        PyObject *word = PyTuple_GET_ITEM(words, i);
        if (!PyBytes_Check(word) || PyBytes_GET_SIZE(word) < 1) {
            PyErr_SetString(PyExc_TypeError, "markers: a tuple of 1 to 64 non-empty bytes");
            return 0;
        }
        m->word[i] = (const unsigned char *)PyBytes_AS_STRING(word);
        m->size[i] = PyBytes_GET_SIZE(word);
        m->next[i] = -1;
    }
    return 1;
}

/* Where the first word in b[start:n] begins, or -1. */
static Py_ssize_t first_hit(Markers *m, const unsigned char *b, Py_ssize_t n,
                            Py_ssize_t start) {
    Py_ssize_t first = n;
    for (int i = 0; i < m->count; i++) {
        if (m->next[i] < start) {
            const unsigned char *at = find_word(b + start, n - start, m->word[i], m->size[i]);
            m->next[i] = at ? at - b : n;
        }
        if (m->next[i] < first) first = m->next[i];
    }
    return first < n ? first : -1;
}

static PyObject *sse_encode(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    Encoder e;
    Markers markers;
    Py_buffer view;
    if (nargs != 10 || !PyList_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError,
                        "sse_encode(buffer, markers, changes, fallback, *encoder)");
        return NULL;
    }
    if (!markers_from(&markers, args[1]) || !encoder_from(&e, args + 4)) return NULL;
    /* The view keeps the buffer (a bytearray, say) alive and unresized while the fallback
     * runs Python code. */
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *changes = args[2], *fallback = args[3], *result = NULL;
    const unsigned char *b = view.buf;
    Py_ssize_t n = view.len, start = 0;
    Out out = {PyBytes_FromStringAndSize(NULL, n + 64), 0};
    if (out.bytes == NULL) goto done;
    Py_INCREF(args[1]);
    /* stream._runs for LF line endings: whole events without a marker go out as they are,
     * each event with one is encoded; an incomplete event is left (from start on). */
    for (;;) {
        Py_ssize_t hit = first_hit(&markers, b, n, start);
        Py_ssize_t blank = rfind_blank(b, start, hit < 0 ? n : hit);
        if (blank >= 0) {
            Py_ssize_t first = blank; /* the first LF of the run that ends with this blank */
            while (first - 1 >= start && b[first - 1] == '\n') first--;
            Py_ssize_t end = first + (blank + 2 - first) / 2 * 2;
            if (out_add(&out, b + start, end - start) < 0) goto failed;
            start = end;
        }
        if (hit < 0) break;
        blank = find_blank(b, start, n);
        if (blank < 0) break; /* the event with the marker is incomplete */
        if (sse_event(&e, b, start, blank + 2, changes, fallback, &out) < 0) goto failed;
        start = blank + 2;
    }
    if (_PyBytes_Resize(&out.bytes, out.size) == 0) result = Py_BuildValue("(Nn)", out.bytes, start);
    out.bytes = NULL; /* stolen, or freed by the failed resize */
failed:
    Py_XDECREF(out.bytes);
    Py_DECREF(args[1]);
done:
    PyBuffer_Release(&view);
    return result;
}

/* --- splice: edits into a document ----------------------------------------------------- */

static PyObject *splice(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyBytes_Check(args[0]) || !PySequence_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "splice(document: bytes, edits)");
        return NULL;
    }
    PyObject *edits = PySequence_Fast(args[1], "edits must be a sequence");
    if (edits == NULL) return NULL;
    const char *document = PyBytes_AS_STRING(args[0]);
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]), count = PySequence_Fast_GET_SIZE(edits);
    Py_ssize_t total = size, at = 0;
    PyObject *result = NULL;
    for (Py_ssize_t i = 0; i < count; i++) { /* check everything before writing anything */
        PyObject *edit = PySequence_Fast_GET_ITEM(edits, i);
        if (!PyTuple_Check(edit) || PyTuple_GET_SIZE(edit) != 3 ||
            !PyBytes_Check(PyTuple_GET_ITEM(edit, 2))) {
            PyErr_SetString(PyExc_TypeError, "an edit is (start, end, text: bytes)");
            goto done;
        }
        Py_ssize_t start = PyLong_AsSsize_t(PyTuple_GET_ITEM(edit, 0));
        Py_ssize_t end = PyLong_AsSsize_t(PyTuple_GET_ITEM(edit, 1));
        if (PyErr_Occurred()) goto done;
        if (start < at || end < start || end > size) {
            PyErr_SetString(PyExc_ValueError, "edits must be sorted, apart and inside");
            goto done;
        }
        total += PyBytes_GET_SIZE(PyTuple_GET_ITEM(edit, 2)) - (end - start);
        at = end;
    }
    result = PyBytes_FromStringAndSize(NULL, total);
    if (result == NULL) goto done;
    char *out = PyBytes_AS_STRING(result);
    at = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *edit = PySequence_Fast_GET_ITEM(edits, i), *text = PyTuple_GET_ITEM(edit, 2);
        Py_ssize_t start = PyLong_AsSsize_t(PyTuple_GET_ITEM(edit, 0));
        memcpy(out, document + at, start - at);
        out += start - at;
        memcpy(out, PyBytes_AS_STRING(text), PyBytes_GET_SIZE(text));
        out += PyBytes_GET_SIZE(text);
        at = PyLong_AsSsize_t(PyTuple_GET_ITEM(edit, 1));
    }
    memcpy(out, document + at, size - at);
done:
    Py_DECREF(edits);
    return result;
}

static PyMethodDef methods[] = {
    {"parse", (PyCFunction)(void (*)(void))parse, METH_FASTCALL,
     "parse(document, schema) -> (pruned, spans) | None: see toolid/prune.py."},
    {"walk", (PyCFunction)(void (*)(void))walk, METH_FASTCALL,
     "walk(document, tree, numbered, call, slots, found_type) -> list | None: "
     "see toolid/positions.py."},
    {"restore", (PyCFunction)(void (*)(void))restore, METH_FASTCALL,
     "restore(document, tree, spans, decode, roles, types, slots) -> "
     "(edits, changes, defined) | None: see toolid/body.py."},
    {"encode", (PyCFunction)(void (*)(void))encode, METH_FASTCALL,
     "encode(buffer, start, end, table, client_id, literal, REFERS, types, words) -> "
     "(edits, changes) | None: see toolid/body.py."},
    {"sse_encode", (PyCFunction)(void (*)(void))sse_encode, METH_FASTCALL,
     "sse_encode(buffer, markers, changes, fallback, *encoder) -> (out, rest): see "
     "toolid/stream.py."},
    {"splice", (PyCFunction)(void (*)(void))splice, METH_FASTCALL,
     "splice(document, edits) -> bytes: see toolid/body.py (apply)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "toolid._native", .m_size = 0, .m_methods = methods};

PyMODINIT_FUNC PyInit__native(void) {
    for (int c = 0x20; c < 0x80; c++) plain[c] = c != '"' && c != '\\';
    _type_key = PyUnicode_InternFromString("type");
    _index_key = PyUnicode_InternFromString("index");
    _empty = PyUnicode_InternFromString("");
    if (_type_key == NULL || _index_key == NULL || _empty == NULL) return NULL;
    return PyModule_Create(&module);
}
