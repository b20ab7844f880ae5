/* toolid._native: the optional native accelerator (toolid/native.py).
 *
 * parse(document: bytes, schema) -> (pruned, spans) | None
 *   Parse a JSON document keeping only the members a schema names, and record where each id
 *   literal is (toolid/prune.py builds the schema from the table). The parse keeps them as C
 *   nodes (an arena), which the fused functions below walk without making Python objects;
 *   parse() turns them into the pruned document.
 *
 * walk(document, tree, numbered, call, slots, found_type) -> list | None
 *   What positions.find_ids finds in a parsed document (toolid/positions.py: Tree), exactly
 *   as its generated Python walker does (None: a path too long or too deep).
 *
 * restore(document, table, decode, roles, types) -> (edits, changes, defined) | None
 *   body's restore of every client id in a request (no destination rules), fused with the
 *   parse and the walk: decode(value) gives None or (raw id, its literal); defined holds the
 *   values at definition positions.
 *
 * encode(buffer, start, end, table, calls, literal, roles, types) -> (edits, changes) | None
 *   body's encode of the ids of the document buffer[start:end], fused likewise: each find's
 *   client id is what CallIds.define(call, key, value) or, for what refers to a call,
 *   CallIds.refer(call, value) gives, answered here on the state calls =
 *   CallIds.native_state() (CallIds.define itself when an occurrence tag is needed); its
 *   literal is literal(client id) (spelled here when nothing in it needs escaping).
 *
 *   Both: table = (schema, tree, roots, numbered) (body._native_table; the root call is the
 *   first int member named in roots), roles = (DEFINES, REFERS), types = (Change, Edit).
 *   The changes come in the order body's Python path makes them (the walk's; encoding, calls
 *   first, by number, then what refers to them); the edits count from the buffer's start,
 *   are sorted and change each member once. None: the parse does not vouch for the document,
 *   or a path is too long or too deep (the Python path decides).
 *
 * sse_feed(data, held, limit, markers, changes, table, calls, literal, roles, types, fallback)
 *        -> bytes | None
 *   stream.StreamRewriter's framing and encoding of the next piece of an SSE stream whose
 *   line endings are all LF: data is the piece, held (a bytearray) the incomplete event
 *   held so far. The events between hits of the markers (a tuple of words, found as
 *   markers.Markers finds them) go out as they are; each event with a hit is encoded: one
 *   "data: " line here, its changes appended to changes; any other by fallback(event) ->
 *   bytes. Returns what goes out (data itself when all of it goes out as it came), and
 *   leaves the new incomplete event in held. None, touching nothing: data holds a CR, held
 *   and data together exceed limit, or more is held than data brings and RESEARCHED (the
 *   Python framing's). On an error, held has the held bytes and data, and changes is as it
 *   was.
 *
 * Feeder(function, rewriter, report, on_error, drain_every, forward_input)
 *   stream.stream_function's function of a stream's pieces: a piece on the rewriter's lane
 *   (StreamRewriter.lane) goes to sse_feed here, everything else to the Python function.
 *
 * encode_id(raw: str, profile: str) -> str
 *   codec.encode(raw, profile) (no occurrence tag): what define and refer give a call whose
 *   plain client id is free.
 *
 * first_marker(data, words) -> int
 *   Where the first of the words (a tuple of 1 to 64 non-empty bytes) starts in data, or -1
 *   (markers.Markers.in_).
 *
 * records(changes, as_record) -> list
 *   report.as_records: each change as its record, built here when it is a plain restore or
 *   encode (no rule set, no occurrence tag, not mapped), else by as_record(change).
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
#include <stddef.h>
#include <string.h>

#define LEAF 0
#define KEEP 1
#define MAX_DEPTH 200
#define MAX_KEYS 64 /* members of one object told apart without a hash */

static PyObject *_type_key, *_index_key, *_empty, *_encoded, *_restored, *_known_name;

typedef struct {
    const unsigned char *start, *p, *end;
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

/* --- parse: what the schema keeps, as an arena of C nodes ----------------------------------- */

/* What a parse keeps of a value. A_NONE: a member the schema names (or an array's element)
 * whose value is of no use: None in the pruned document. */
enum { A_NONE, A_TRUE, A_FALSE, A_INT, A_STR, A_OBJ, A_ARR };

typedef struct {
    unsigned char kind;
    unsigned char leaf;    /* an A_STR kept as an id (LEAF): its span is recorded */
    int first, last, next; /* A_OBJ members, A_ARR elements, in order; -1: none */
    PyObject *name;        /* a member's key (the schema's str, borrowed); NULL in arrays */
    Py_ssize_t start, end; /* A_STR: the literal, quotes included, from the buffer's start */
    long long integer;     /* A_INT */
} Node;

typedef struct {
    Node *nodes;
    int count, capacity;
} Arena;

#define NOTHING_KEPT (-2) /* a value validated and dropped (-1: not ours, or an error) */

static int new_node(Arena *a, unsigned char kind) {
    if (a->count == a->capacity) {
        int capacity = a->capacity ? a->capacity * 2 : 32;
        Node *grown = PyMem_Realloc(a->nodes, capacity * sizeof(Node));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        a->nodes = grown;
        a->capacity = capacity;
    }
    Node *node = &a->nodes[a->count];
    node->kind = kind;
    node->leaf = 0;
    node->first = node->last = node->next = -1;
    node->name = NULL;
    return a->count++;
}

static void add_child(Arena *a, int parent, int child) {
    if (a->nodes[parent].last < 0) a->nodes[parent].first = child;
    else a->nodes[a->nodes[parent].last].next = child;
    a->nodes[parent].last = child;
}

/* The child of an object named key, or -1. */
static int member(const Arena *a, int object, PyObject *key) {
    for (int child = a->nodes[object].first; child >= 0; child = a->nodes[child].next) {
        PyObject *name = a->nodes[child].name;
        if (name == key || PyUnicode_Compare(name, key) == 0) return child;
    }
    return -1;
}

static int value(Scan *s, PyObject *spec, Arena *a);

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

/* Whether the key key[:size] is among the first count keys. */
static int repeated(const unsigned char **keys, const Py_ssize_t *sizes, int count,
                    const unsigned char *key, Py_ssize_t size) {
    for (int i = 0; i < count; i++)
        if (sizes[i] == size && memcmp(keys[i], key, size) == 0) return 1;
    return 0;
}

/* An object (s->p after its '{'); node: a schema node, or NULL to validate only. */
static int object(Scan *s, PyObject *node, Arena *a) {
    PyObject *members = node ? PyTuple_GET_ITEM(node, 0) : NULL;
    int self = node ? new_node(a, A_OBJ) : NOTHING_KEPT;
    if (self == -1) return -1;
    skip_ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return self;
    }
    const unsigned char *keys[MAX_KEYS];
    Py_ssize_t sizes[MAX_KEYS];
    int count = 0;
    for (;;) {
        int escaped;
        skip_ws(s);
        if (s->p >= s->end || *s->p != '"' || !string(s, &escaped)) return -1;
        const unsigned char *key = s->start + s->literal_start + 1;
        Py_ssize_t size = s->literal_end - s->literal_start - 2;
        /* A key spelled with escapes, or given twice, in any object: which member a parser
         * sees is the full parse's to say (and what toolid does then, its rewriter's). */
        if (escaped || count == MAX_KEYS || repeated(keys, sizes, count, key, size)) return -1;
        keys[count] = key;
        sizes[count++] = size;
        PyObject *spec = NULL, *name = NULL;
        if (members) spec = spec_of(members, key, size, &name);
        if (!expect(s, ':')) return -1;
        skip_ws(s);
        int item = value(s, spec, a);
        if (item == -1) return -1;
        if (spec) {
            a->nodes[item].name = name;
            a->nodes[item].leaf = PyLong_Check(spec) && PyLong_AsLong(spec) == LEAF &&
                                  a->nodes[item].kind == A_STR;
            add_child(a, self, item);
        }
        int more = next_or_close(s, '}');
        if (more == 0) return self;
        if (more < 0) return -1;
    }
}

/* An array (s->p after its '['); node: its objects are kept as the node's elements say, and
 * every element is kept (anything but such an object as A_NONE). */
static int array(Scan *s, PyObject *node, Arena *a) {
    PyObject *elements = node ? PyTuple_GET_ITEM(node, 1) : NULL;
    if (elements == Py_None) elements = NULL;
    int self = node ? new_node(a, A_ARR) : NOTHING_KEPT;
    if (self == -1) return -1;
    skip_ws(s);
    if (s->p < s->end && *s->p == ']') {
        s->p++;
        return self;
    }
    for (;;) {
        skip_ws(s);
        int is_object = s->p < s->end && *s->p == '{';
        int item = value(s, is_object && elements ? elements : NULL, a);
        if (item == -1) return -1;
        if (node) {
            if (item == NOTHING_KEPT && (item = new_node(a, A_NONE)) == -1) return -1;
            add_child(a, self, item);
        }
        int more = next_or_close(s, ']');
        if (more == 0) return self;
        if (more < 0) return -1;
    }
}

/* What is kept of a scalar read with spec (LEAF, KEEP or a node: only A_NONE then). */
static int scalar(Arena *a, PyObject *spec, int kind) {
    return spec ? new_node(a, kind) : NOTHING_KEPT;
}

/* Any value (s->p at its first byte); spec: NULL (validate only), LEAF, KEEP or a node.
 * Returns its node (with a spec: always one, A_NONE when nothing is of use), NOTHING_KEPT
 * (no spec), or -1 (not ours, or an error: then an exception is set). */
static int value(Scan *s, PyObject *spec, Arena *a) {
    if (s->p >= s->end) return -1;
    int kind = -1; /* -1: a node or nothing */
    if (spec && PyLong_Check(spec)) kind = (int)PyLong_AsLong(spec);
    PyObject *node = spec && PyTuple_Check(spec) ? spec : NULL;
    unsigned char c = *s->p;
    if (c == '{' || c == '[') {
        if (++s->depth > MAX_DEPTH) return -1;
        s->p++;
        int read = c == '{' ? object(s, node, a) : array(s, node, a);
        s->depth--;
        if (read == NOTHING_KEPT && spec) return new_node(a, A_NONE);
        return read;
    }
    if (c == '"') {
        int escaped;
        if (!string(s, &escaped)) return -1;
        if (kind != LEAF && kind != KEEP) return scalar(a, spec, A_NONE);
        if (escaped) return -1; /* the full parse reads escapes */
        int self = new_node(a, A_STR);
        if (self >= 0) {
            a->nodes[self].start = s->literal_start;
            a->nodes[self].end = s->literal_end;
        }
        return self;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        int integer;
        const unsigned char *at = s->p;
        if (!number(s, &integer)) return -1;
        if (kind != KEEP || !integer) return scalar(a, spec, A_NONE);
        Py_ssize_t digits = s->p - at - (*at == '-');
        if (digits > 18) return -1; /* parsers differ beyond 64 bits: the full parse */
        long long number = 0;      /* at most 18 digits: no overflow */
        for (const unsigned char *d = at + (*at == '-'); d < s->p; d++)
            number = number * 10 + (*d - '0');
        int self = new_node(a, A_INT);
        if (self >= 0) a->nodes[self].integer = *at == '-' ? -number : number;
        return self;
    }
    if (word(s, "true", 4)) return scalar(a, spec, kind == KEEP ? A_TRUE : A_NONE);
    if (word(s, "false", 5)) return scalar(a, spec, kind == KEEP ? A_FALSE : A_NONE);
    if (word(s, "null", 4)) return scalar(a, spec, A_NONE);
    return -1;
}

/* Parse buffer[start:end] into a (its root, an object, is node 0; a's nodes are reused, and
 * freed by the caller): 1, 0 (not ours) or -1 (an error). Spans count from the buffer's
 * start. */
static int parse_range(const unsigned char *buffer, Py_ssize_t start, Py_ssize_t end,
                       PyObject *schema, Arena *a) {
    Scan s = {buffer, buffer + start, buffer + end, 0, 0, 0};
    a->count = 0;
    if (expect(&s, '{')) {
        s.depth = 1;
        if (object(&s, schema, a) == 0) {
            skip_ws(&s);
            if (s.p == s.end) return 1;
        }
    }
    return PyErr_Occurred() ? -1 : 0;
}

/* The pruned document of node i as Python objects, with the spans of its LEAF strings. */
static PyObject *materialize(const Arena *a, int i, const unsigned char *buffer,
                             PyObject *spans) {
    const Node *node = &a->nodes[i];
    switch (node->kind) {
    case A_TRUE:
        return Py_NewRef(Py_True);
    case A_FALSE:
        return Py_NewRef(Py_False);
    case A_INT:
        return PyLong_FromLongLong(node->integer);
    case A_STR:
        return PyUnicode_DecodeUTF8((const char *)buffer + node->start + 1,
                                    node->end - node->start - 2, "strict");
    case A_OBJ:
    case A_ARR:
        break;
    default:
        return Py_NewRef(Py_None);
    }
    PyObject *container = node->kind == A_OBJ ? PyDict_New() : PyList_New(0);
    for (int child = node->first; container && child >= 0; child = a->nodes[child].next) {
        PyObject *item = materialize(a, child, buffer, spans);
        int done = -1;
        if (item && node->kind == A_ARR) done = PyList_Append(container, item);
        else if (item) done = PyDict_SetItem(container, a->nodes[child].name, item);
        if (done == 0 && a->nodes[child].leaf) {
            PyObject *span = Py_BuildValue("(nn)", a->nodes[child].start, a->nodes[child].end);
            PyObject *address = PyLong_FromVoidPtr(container);
            PyObject *key = address ? PyTuple_Pack(2, address, a->nodes[child].name) : NULL;
            done = span && key ? PyDict_SetItem(spans, key, span) : -1;
            Py_XDECREF(span);
            Py_XDECREF(address);
            Py_XDECREF(key);
        }
        Py_XDECREF(item);
        if (done < 0) Py_CLEAR(container);
    }
    return container;
}

static PyObject *parse(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer document;
    Arena a = {NULL, 0, 0};
    if (nargs != 2 || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "parse(document: bytes, schema: tuple)");
        return NULL;
    }
    if (PyObject_GetBuffer(args[0], &document, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *result = NULL;
    int done = parse_range(document.buf, 0, document.len, args[1], &a);
    if (done > 0) {
        PyObject *spans = PyDict_New();
        PyObject *pruned = spans ? materialize(&a, 0, document.buf, spans) : NULL;
        if (pruned) result = Py_BuildValue("(NN)", pruned, spans);
        else Py_XDECREF(spans);
    } else if (done == 0) {
        result = Py_NewRef(Py_None);
    }
    PyMem_Free(a.nodes);
    PyBuffer_Release(&document);
    return result;
}

/* --- walk: the table's tree over a document ----------------------------------------------- */

/* Both walkers follow positions.Tree: (leaves, members, elements), as its generated Python
 * walker does; walk() over Python objects (any parsed document), find() over an arena. */

#define PATH_SIZE 4096
#define MAX_NUMBERS 64

/* Where a walk is: the concrete path so far, and the numbers of the calls it is inside. */
typedef struct {
    PyObject *root; /* the root call (a tuple) */
    int numbered;
    char text[PATH_SIZE];
    Py_ssize_t size;
    PyObject *numbers[MAX_NUMBERS]; /* owned */
    int count;
} Path;

static void path_start(Path *p, PyObject *root, int numbered) {
    p->root = root;
    p->numbered = numbered;
    p->size = 0;
    p->count = 0;
}

static void path_end(Path *p) {
    while (p->count > 0) Py_CLEAR(p->numbers[--p->count]);
}

/* Add ".key" (or "key" first) to the path: 1, 0 (too long: not ours) or -1 (an error). */
static int push_key(Path *p, PyObject *key) {
    Py_ssize_t size;
    const char *text = PyUnicode_AsUTF8AndSize(key, &size);
    if (text == NULL) return -1;
    Py_ssize_t dot = p->size > 0;
    if (p->size + dot + size >= PATH_SIZE) return 0;
    if (dot) p->text[p->size++] = '.';
    memcpy(p->text + p->size, text, size);
    p->size += size;
    return 1;
}

/* Add "[index]", and (numbered) the element's number: its own "index" member if that is an
 * int (number, or NULL), else its position. 1, 0 (too deep: not ours) or -1 (an error). */
static int push_index(Path *p, Py_ssize_t index, PyObject *number) {
    char digits[24], reversed[20];
    int count = 0, size = 0;
    Py_ssize_t rest = index;
    do reversed[count++] = (char)('0' + rest % 10);
    while ((rest /= 10) > 0);
    digits[size++] = '[';
    while (count > 0) digits[size++] = reversed[--count];
    digits[size++] = ']';
    if (p->size + size >= PATH_SIZE) return 0;
    if (p->numbered) {
        if (p->count >= MAX_NUMBERS) return 0;
        number = number ? Py_NewRef(number) : PyLong_FromSsize_t(index);
        if (number == NULL) return -1;
        p->numbers[p->count++] = number;
    }
    memcpy(p->text + p->size, digits, size);
    p->size += size;
    return 1;
}

/* Back to where a push started (size: the path's size before it). */
static void pop(Path *p, Py_ssize_t size, int numbered) {
    p->size = size;
    if (numbered && p->numbered) Py_CLEAR(p->numbers[--p->count]);
}

/* A new tuple of atomic objects (ints, strs, bytes, and such tuples), which can never be
 * part of a reference cycle: out of the garbage collector's sight, as the collector itself
 * leaves such tuples once it meets them (the keys CallIds keeps, the changes). */
static PyObject *untracked(PyObject *tuple) {
    if (tuple && PyObject_GC_IsTracked(tuple)) PyObject_GC_UnTrack(tuple);
    return tuple;
}

/* The call an id here belongs to: the root call and the numbers so far. */
static PyObject *call_here(Path *p) {
    if (p->count == 0) return Py_NewRef(p->root);
    Py_ssize_t root = PyTuple_GET_SIZE(p->root);
    PyObject *call = PyTuple_New(root + p->count);
    if (call == NULL) return NULL;
    for (Py_ssize_t i = 0; i < root; i++)
        PyTuple_SET_ITEM(call, i, Py_NewRef(PyTuple_GET_ITEM(p->root, i)));
    for (int i = 0; i < p->count; i++) PyTuple_SET_ITEM(call, root + i, Py_NewRef(p->numbers[i]));
    return untracked(call);
}

/* A step of the tree's elements: (types, needs, bare, inside). */
typedef struct {
    PyObject *types, *needs, *inside;
    int bare;
} Step;

static Step step_at(PyObject *elements, Py_ssize_t i) {
    PyObject *step = PyTuple_GET_ITEM(elements, i);
    Step s = {PyTuple_GET_ITEM(step, 0), PyTuple_GET_ITEM(step, 1), PyTuple_GET_ITEM(step, 3),
              PyObject_IsTrue(PyTuple_GET_ITEM(step, 2))};
    return s;
}

/* --- over Python objects ---- */

typedef struct {
    Path path;
    PyTypeObject *found_type;
    PyObject *slots; /* a list of lists, one per position */
} Walk;

static int emit(Walk *w, PyObject *node, PyObject *key, PyObject *value, PyObject *role,
                Py_ssize_t slot) {
    Py_ssize_t saved = w->path.size;
    int pushed = push_key(&w->path, key);
    if (pushed <= 0) return pushed;
    PyObject *path = PyUnicode_DecodeUTF8(w->path.text, w->path.size, "strict");
    w->path.size = saved;
    PyObject *call = path ? call_here(&w->path) : NULL;
    PyObject *found = call ? w->found_type->tp_alloc(w->found_type, 6) : NULL;
    if (found == NULL) {
        Py_XDECREF(path);
        Py_XDECREF(call);
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
static int admits(PyObject *element, Step *step) {
    if (step->bare) return 1;
    if (!PyDict_Check(element)) return 0;
    if (step->needs != Py_None) {
        PyObject *iterator = PyObject_GetIter(step->needs), *name;
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
    if (step->types != Py_None) {
        PyObject *kind = PyDict_GetItemWithError(element, _type_key);
        if (kind == NULL) return PyErr_Occurred() ? -1 : 0;
        if (!PyUnicode_Check(kind)) return 0;
        return PySet_Contains(step->types, kind);
    }
    return 1;
}

/* 1: done, 0: not ours (the Python walker decides), -1: an error. */
static int visit(Walk *w, PyObject *node, PyObject *tree) {
    PyObject *leaves = PyTuple_GET_ITEM(tree, 0), *members = PyTuple_GET_ITEM(tree, 1);
    PyObject *elements = PyTuple_GET_ITEM(tree, 2);
    int done = 1;
    if (PyDict_Check(node)) {
        for (Py_ssize_t i = 0; done > 0 && i < PyTuple_GET_SIZE(leaves); i++) {
            PyObject *leaf = PyTuple_GET_ITEM(leaves, i), *key = PyTuple_GET_ITEM(leaf, 0);
            PyObject *value = PyDict_GetItemWithError(node, key);
            if (value == NULL && PyErr_Occurred()) return -1;
            if (value == NULL || !PyUnicode_CheckExact(value)) continue;
            Py_ssize_t slot = PyLong_AsSsize_t(PyTuple_GET_ITEM(leaf, 1));
            done = emit(w, node, key, value, PyTuple_GET_ITEM(leaf, 2), slot);
        }
        for (Py_ssize_t i = 0; done > 0 && i < PyTuple_GET_SIZE(members); i++) {
            PyObject *entry = PyTuple_GET_ITEM(members, i), *key = PyTuple_GET_ITEM(entry, 0);
            PyObject *child = PyDict_GetItemWithError(node, key);
            if (child == NULL && PyErr_Occurred()) return -1;
            if (child == NULL || child == Py_None) continue;
            Py_ssize_t saved = w->path.size;
            done = push_key(&w->path, key);
            Py_INCREF(child); /* the walk must not outlive it (nothing mutates it; cheap) */
            if (done > 0) done = visit(w, child, PyTuple_GET_ITEM(entry, 1));
            Py_DECREF(child);
            w->path.size = saved;
        }
    }
    for (Py_ssize_t i = 0; done > 0 && i < PyTuple_GET_SIZE(elements); i++) {
        Step step = step_at(elements, i);
        if (!PyList_Check(node)) {
            done = admits(node, &step);
            if (done > 0) done = visit(w, node, step.inside);
            else if (done == 0) done = 1;
            continue;
        }
        for (Py_ssize_t index = 0; done > 0 && index < PyList_GET_SIZE(node); index++) {
            PyObject *element = Py_NewRef(PyList_GET_ITEM(node, index));
            int admitted = admits(element, &step);
            PyObject *number = NULL;
            if (admitted > 0 && w->path.numbered && PyDict_Check(element)) {
                number = PyDict_GetItemWithError(element, _index_key);
                if (number == NULL && PyErr_Occurred()) admitted = -1;
                if (number && !PyLong_CheckExact(number)) number = NULL;
            }
            Py_ssize_t saved = w->path.size;
            if (admitted > 0) {
                done = push_index(&w->path, index, number);
                if (done > 0) {
                    done = visit(w, element, step.inside);
                    pop(&w->path, saved, 1);
                }
            } else if (admitted < 0) {
                done = -1;
            }
            Py_DECREF(element);
        }
    }
    return done;
}

static PyObject *walk(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6 || !PyTuple_Check(args[1]) || !PyTuple_Check(args[3]) ||
        !PyLong_Check(args[4]) || !PyType_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError,
                        "walk(document, tree, numbered, call, slots, found_type)");
        return NULL;
    }
    Py_ssize_t slots = PyLong_AsSsize_t(args[4]);
    Walk *w = PyMem_Malloc(sizeof(Walk)); /* the path is filled as it goes: not cleared */
    if (w == NULL) return PyErr_NoMemory();
    path_start(&w->path, args[3], PyObject_IsTrue(args[2]));
    w->found_type = (PyTypeObject *)args[5];
    w->slots = PyList_New(slots);
    PyObject *result = NULL;
    for (Py_ssize_t i = 0; w->slots && i < slots; i++) {
        PyObject *list = PyList_New(0);
        if (list == NULL) Py_CLEAR(w->slots);
        else PyList_SET_ITEM(w->slots, i, list);
    }
    int walked = w->slots ? visit(w, args[0], args[1]) : -1;
    path_end(&w->path);
    if (walked == 0) result = Py_NewRef(Py_None);
    else if (walked > 0) result = PyList_New(0);
    for (Py_ssize_t i = 0; walked > 0 && result && i < slots; i++) {
        PyObject *list = PyList_GET_ITEM(w->slots, i);
        if (PyList_SetSlice(result, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, list) < 0) Py_CLEAR(result);
    }
    Py_XDECREF(w->slots);
    PyMem_Free(w);
    return result;
}

/* --- over an arena ---- */

/* One id found: its string node, where, and its call. */
typedef struct {
    int node;
    PyObject *key, *role; /* borrowed from the tree */
    PyObject *call;       /* owned */
    int refers;           /* set before sorting: its role is REFERS */
    Py_ssize_t slot, order;
    Py_ssize_t path_at, path_size; /* its path, in Finder.paths */
} Find;

typedef struct {
    Path path;
    const Arena *arena;
    const unsigned char *buffer;
    Find *finds;
    Py_ssize_t count, capacity;
    char *paths;
    Py_ssize_t paths_size, paths_capacity;
} Finder;

/* Forget the finds, keeping the room they took for the next find_all. */
static void finder_clear(Finder *f) {
    for (Py_ssize_t i = 0; i < f->count; i++) Py_CLEAR(f->finds[i].call);
    f->count = 0;
}

static void finder_end(Finder *f) {
    finder_clear(f);
    PyMem_Free(f->finds);
    PyMem_Free(f->paths);
}

/* A node's string, as the pruned document holds it (the literal has no escapes). */
static PyObject *text_of(const Finder *f, int node) {
    const Node *n = &f->arena->nodes[node];
    return PyUnicode_DecodeUTF8((const char *)f->buffer + n->start + 1, n->end - n->start - 2,
                                "strict");
}

static int found(Finder *f, int node, PyObject *key, PyObject *role, Py_ssize_t slot) {
    Py_ssize_t saved = f->path.size;
    int pushed = push_key(&f->path, key);
    if (pushed <= 0) return pushed;
    if (f->count == f->capacity) {
        Py_ssize_t capacity = f->capacity * 2 + 8;
        Find *finds = PyMem_Realloc(f->finds, capacity * sizeof(Find));
        if (finds == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        f->finds = finds;
        f->capacity = capacity;
    }
    if (f->paths_size + f->path.size > f->paths_capacity) {
        Py_ssize_t room = f->paths_capacity * 2 + 512 + f->path.size;
        char *paths = PyMem_Realloc(f->paths, room);
        if (paths == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        f->paths = paths;
        f->paths_capacity = room;
    }
    PyObject *call = call_here(&f->path);
    if (call == NULL) return -1;
    Find *find = &f->finds[f->count];
    find->node = node;
    find->key = key;
    find->role = role;
    find->call = call;
    find->slot = slot;
    find->order = f->count++;
    find->path_at = f->paths_size;
    find->path_size = f->path.size;
    memcpy(f->paths + f->paths_size, f->path.text, f->path.size);
    f->paths_size += f->path.size;
    f->path.size = saved;
    return 1;
}

/* Whether an element goes on, as admits() says for its pruned form. */
static int admits_node(const Finder *f, int element, Step *step) {
    if (step->bare) return 1;
    const Arena *a = f->arena;
    if (a->nodes[element].kind != A_OBJ) return 0;
    if (step->needs != Py_None) { /* any of the element's members among the needed names */
        int any = 0;
        for (int child = a->nodes[element].first; !any && child >= 0; child = a->nodes[child].next)
            any = PySet_Contains(step->needs, a->nodes[child].name);
        if (any <= 0) return any;
    }
    if (step->types != Py_None) {
        int kind = member(f->arena, element, _type_key);
        if (kind < 0 || f->arena->nodes[kind].kind != A_STR) return 0;
        PyObject *text = text_of(f, kind);
        int admitted = text ? PySet_Contains(step->types, text) : -1;
        Py_XDECREF(text);
        return admitted;
    }
    return 1;
}

/* visit() over an arena: 1, 0 (not ours) or -1 (an error). */
static int find(Finder *f, int node, PyObject *tree) {
    const Arena *a = f->arena;
    PyObject *leaves = PyTuple_GET_ITEM(tree, 0), *members = PyTuple_GET_ITEM(tree, 1);
    PyObject *elements = PyTuple_GET_ITEM(tree, 2);
    int done = 1;
    if (a->nodes[node].kind == A_OBJ) {
        for (Py_ssize_t i = 0; done > 0 && i < PyTuple_GET_SIZE(leaves); i++) {
            PyObject *leaf = PyTuple_GET_ITEM(leaves, i), *key = PyTuple_GET_ITEM(leaf, 0);
            int value = member(a, node, key);
            if (value < 0 || a->nodes[value].kind != A_STR) continue;
            Py_ssize_t slot = PyLong_AsSsize_t(PyTuple_GET_ITEM(leaf, 1));
            done = found(f, value, key, PyTuple_GET_ITEM(leaf, 2), slot);
        }
        for (Py_ssize_t i = 0; done > 0 && i < PyTuple_GET_SIZE(members); i++) {
            PyObject *entry = PyTuple_GET_ITEM(members, i), *key = PyTuple_GET_ITEM(entry, 0);
            int child = member(a, node, key);
            if (child < 0 || a->nodes[child].kind == A_NONE) continue;
            Py_ssize_t saved = f->path.size;
            done = push_key(&f->path, key);
            if (done > 0) done = find(f, child, PyTuple_GET_ITEM(entry, 1));
            f->path.size = saved;
        }
    }
    for (Py_ssize_t i = 0; done > 0 && i < PyTuple_GET_SIZE(elements); i++) {
        Step step = step_at(elements, i);
        if (a->nodes[node].kind != A_ARR) {
            done = admits_node(f, node, &step);
            if (done > 0) done = find(f, node, step.inside);
            else if (done == 0) done = 1;
            continue;
        }
        Py_ssize_t index = 0;
        for (int element = a->nodes[node].first; done > 0 && element >= 0;
             element = a->nodes[element].next, index++) {
            int admitted = admits_node(f, element, &step);
            if (admitted <= 0) {
                done = admitted < 0 ? -1 : 1;
                continue;
            }
            PyObject *number = NULL;
            int own = f->path.numbered && a->nodes[element].kind == A_OBJ
                          ? member(a, element, _index_key)
                          : -1;
            if (own >= 0 && a->nodes[own].kind == A_INT &&
                (number = PyLong_FromLongLong(a->nodes[own].integer)) == NULL)
                return -1;
            Py_ssize_t saved = f->path.size;
            done = push_index(&f->path, index, number);
            Py_XDECREF(number);
            if (done > 0) {
                done = find(f, element, step.inside);
                pop(&f->path, saved, 1);
            }
        }
    }
    return done;
}

/* Find the ids in an arena (its root: node 0): 1, 0 (not ours) or -1 (an error). f is zeroed
 * or was used before: its earlier finds are forgotten, their room reused. */
static int find_all(Finder *f, const Arena *a, const unsigned char *buffer, PyObject *tree,
                    PyObject *root, int numbered) {
    finder_clear(f);
    path_start(&f->path, root, numbered);
    f->arena = a;
    f->buffer = buffer;
    f->paths_size = 0;
    int done = find(f, 0, tree);
    path_end(&f->path);
    return done;
}

static PyObject *path_of(const Finder *f, const Find *find) {
    return PyUnicode_DecodeUTF8(f->paths + find->path_at, find->path_size, "strict");
}

/* --- restore and encode: a document's ids rewritten, fused with the parse and the walk ------ */

/* occurrence.CallIds' state (CallIds.native_state): define and refer are answered here as
 * CallIds answers them, on the same dicts and set, while no occurrence tag is needed; a call
 * that needs one goes to CallIds.define itself. */
typedef struct {
    PyObject *calls, *by_call, *latest; /* dicts: (call, key, raw), (call, raw), raw -> client
                                         * (refer's two: None when not kept) */
    PyObject *given;                     /* a set: the client ids given */
    PyObject *taken;                     /* [the Taken, or its known() ids once they are known] */
    PyObject *known;                     /* taken.known(), once asked (None: ask taken) */
    int call_profile;                    /* the profile: "call" (1) or "safe" (0) */
    PyObject *define, *refer;            /* CallIds.define and CallIds.refer */
} Calls;

/* What a rewrite reads: the table, body's callbacks and the names it uses. */
typedef struct {
    PyObject *schema, *tree, *roots; /* the table: (schema, tree, roots, numbered) */
    int numbered;
    Calls calls;                       /* encode */
    PyObject *literal;                 /* encode: the literal of a client id (body._literal) */
    PyObject *decode;                  /* restore (NULL when encoding) */
    PyObject *defines, *refers, *word; /* the roles; "encoded" or "restored" */
    PyTypeObject *change_type, *edit_type;
} Rewrite;

static int table_from(Rewrite *r, PyObject *table) {
    if (!PyTuple_Check(table) || PyTuple_GET_SIZE(table) != 4 ||
        !PyTuple_Check(PyTuple_GET_ITEM(table, 0)) || !PyTuple_Check(PyTuple_GET_ITEM(table, 1)) ||
        !PyTuple_Check(PyTuple_GET_ITEM(table, 2))) {
        PyErr_SetString(PyExc_TypeError, "a table is (schema, tree, roots, numbered)");
        return 0;
    }
    r->schema = PyTuple_GET_ITEM(table, 0);
    r->tree = PyTuple_GET_ITEM(table, 1);
    r->roots = PyTuple_GET_ITEM(table, 2);
    r->numbered = PyObject_IsTrue(PyTuple_GET_ITEM(table, 3));
    return r->numbered >= 0;
}

/* roles = (DEFINES, REFERS), types = (Change, Edit), word: the action of the changes. */
static int names_from(Rewrite *r, PyObject *roles, PyObject *types, PyObject *word) {
    if (!PyTuple_Check(roles) || PyTuple_GET_SIZE(roles) != 2 || !PyTuple_Check(types) ||
        PyTuple_GET_SIZE(types) != 2 || !PyType_Check(PyTuple_GET_ITEM(types, 0)) ||
        !PyType_Check(PyTuple_GET_ITEM(types, 1)) || !PyUnicode_Check(word)) {
        PyErr_SetString(PyExc_TypeError, "roles: (DEFINES, REFERS), types: (Change, Edit)");
        return 0;
    }
    r->defines = PyTuple_GET_ITEM(roles, 0);
    r->refers = PyTuple_GET_ITEM(roles, 1);
    r->change_type = (PyTypeObject *)PyTuple_GET_ITEM(types, 0);
    r->edit_type = (PyTypeObject *)PyTuple_GET_ITEM(types, 1);
    r->word = word;
    return 1;
}

/* state = (calls, by_call, latest, given, taken, profile, define, refer). */
static int calls_from(Calls *c, PyObject *state) {
    int kept = PyTuple_Check(state) && PyTuple_GET_SIZE(state) == 8 &&
               PyDict_CheckExact(PyTuple_GET_ITEM(state, 1));
    if (!PyTuple_Check(state) || PyTuple_GET_SIZE(state) != 8 ||
        !PyDict_CheckExact(PyTuple_GET_ITEM(state, 0)) ||
        !(kept ? PyDict_CheckExact(PyTuple_GET_ITEM(state, 2))
               : PyTuple_GET_ITEM(state, 1) == Py_None && PyTuple_GET_ITEM(state, 2) == Py_None) ||
        !PySet_CheckExact(PyTuple_GET_ITEM(state, 3)) ||
        !PyList_CheckExact(PyTuple_GET_ITEM(state, 4)) ||
        PyList_GET_SIZE(PyTuple_GET_ITEM(state, 4)) != 1 ||
        !PyUnicode_Check(PyTuple_GET_ITEM(state, 5))) {
        PyErr_SetString(PyExc_TypeError, "calls: CallIds.native_state()");
        return 0;
    }
    c->calls = PyTuple_GET_ITEM(state, 0);
    c->by_call = PyTuple_GET_ITEM(state, 1);
    c->latest = PyTuple_GET_ITEM(state, 2);
    c->given = PyTuple_GET_ITEM(state, 3);
    c->taken = PyTuple_GET_ITEM(state, 4);
    c->call_profile = PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(state, 5), "call") == 0;
    c->define = PyTuple_GET_ITEM(state, 6);
    c->refer = PyTuple_GET_ITEM(state, 7);
    c->known = NULL;
    return 1;
}

/* encoder = (table, calls, literal, roles, types) (body.native_encoder). */
static int encoder_from(Rewrite *r, PyObject *const *kit) {
    r->literal = kit[2];
    r->decode = NULL;
    return table_from(r, kit[0]) && calls_from(&r->calls, kit[1]) &&
           names_from(r, kit[3], kit[4], _encoded);
}

/* What an encoder holds after its call. */
static void encoder_end(Rewrite *r) { Py_CLEAR(r->calls.known); }

/* Whether b[:n] starts with tid<digits>_ (codec._RESERVED without its "call_"). */
static int reserved_at(const unsigned char *b, Py_ssize_t n) {
    if (n < 5 || memcmp(b, "tid", 3) != 0 || !(b[3] >= '0' && b[3] <= '9')) return 0;
    Py_ssize_t i = 4;
    while (i < n && b[i] >= '0' && b[i] <= '9') i++;
    return i < n && b[i] == '_';
}

static int payload_byte(unsigned char c) { /* spelled as itself in a payload: [A-Za-z0-9_] */
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* codec.encode(raw, profile): raw itself when a client of the profile accepts it and it is not
 * spelled like an encoded id, else the profile's prefix and raw's UTF-8 bytes (surrogatepass)
 * with every byte but [A-Za-z0-9_] as -XX. */
static PyObject *plain_encode(PyObject *raw, int call_profile) {
    PyObject *encoded = NULL;
    const unsigned char *b;
    Py_ssize_t n;
    if (PyUnicode_IS_ASCII(raw)) {
        b = PyUnicode_DATA(raw);
        n = PyUnicode_GET_LENGTH(raw);
    } else {
        encoded = PyUnicode_AsEncodedString(raw, "utf-8", "surrogatepass");
        if (encoded == NULL) return NULL;
        b = (const unsigned char *)PyBytes_AS_STRING(encoded);
        n = PyBytes_GET_SIZE(encoded);
    }
    const char *prefix = call_profile ? "call_tid1_" : "tid1_";
    Py_ssize_t head = call_profile ? 5 : 0; /* "call_", which the call profile's shape needs */
    int passes = n > head && (!call_profile || memcmp(b, "call_", 5) == 0);
    for (Py_ssize_t i = head; passes && i < n; i++) passes = payload_byte(b[i]) || b[i] == '-';
    if (passes && !reserved_at(b, n) && !(n >= 5 && memcmp(b, "call_", 5) == 0 &&
                                          reserved_at(b + 5, n - 5))) {
        Py_XDECREF(encoded);
        return Py_NewRef(raw);
    }
    Py_ssize_t size = (Py_ssize_t)strlen(prefix);
    for (Py_ssize_t i = 0; i < n; i++) size += payload_byte(b[i]) ? 1 : 3;
    PyObject *client = PyUnicode_New(size, 127);
    if (client != NULL) {
        static const char hex[] = "0123456789ABCDEF";
        unsigned char *out = PyUnicode_DATA(client);
        size_t at = strlen(prefix);
        memcpy(out, prefix, at);
        for (Py_ssize_t i = 0; i < n; i++) {
            if (payload_byte(b[i])) {
                out[at++] = b[i];
            } else {
                out[at++] = '-';
                out[at++] = hex[b[i] >> 4];
                out[at++] = hex[b[i] & 15];
            }
        }
    }
    Py_XDECREF(encoded);
    return client;
}


/* CallIds.define(call, key, raw). */
static PyObject *define_call(Calls *c, PyObject *call, PyObject *key, PyObject *raw) {
    PyObject *triple = untracked(PyTuple_Pack(3, call, key, raw));
    if (triple == NULL) return NULL;
    PyObject *known = PyDict_GetItemWithError(c->calls, triple); /* borrowed */
    if (known != NULL || PyErr_Occurred()) {
        Py_DECREF(triple);
        return Py_XNewRef(known);
    }
    PyObject *client = plain_encode(raw, c->call_profile), *pair = NULL;
    int clash = client ? PySet_Contains(c->given, client) : -1;
    PyObject *taken = PyList_GET_ITEM(c->taken, 0);
    if (clash == 0 && c->known == NULL) { /* once per call, until they are known for good */
        c->known = PyFrozenSet_CheckExact(taken) ? Py_NewRef(taken)
                                                 : PyObject_CallMethodNoArgs(taken, _known_name);
        if (c->known == NULL) clash = -1;
        else if (PyFrozenSet_CheckExact(c->known)) { /* known from now on: no more asking */
            PyList_SET_ITEM(c->taken, 0, Py_NewRef(c->known));
            Py_DECREF(taken);
        }
        taken = PyList_GET_ITEM(c->taken, 0);
    }
    if (clash == 0) clash = PySequence_Contains(c->known != Py_None ? c->known : taken, client);
    if (clash == 0) {
        int kept = c->by_call != Py_None; /* refer's maps */
        pair = kept ? untracked(PyTuple_Pack(2, call, raw)) : NULL;
        if ((kept && pair == NULL) || PyDict_SetItem(c->calls, triple, client) < 0 ||
            (kept && (PyDict_SetItem(c->by_call, pair, client) < 0 ||
                      PyDict_SetItem(c->latest, raw, client) < 0)) ||
            PySet_Add(c->given, client) < 0)
            Py_CLEAR(client);
    } else { /* an occurrence tag (or an error): CallIds.define decides */
        Py_CLEAR(client);
        if (clash > 0) {
            PyObject *args[] = {call, key, raw};
            client = PyObject_Vectorcall(c->define, args, 3, NULL);
        }
    }
    Py_XDECREF(pair);
    Py_DECREF(triple);
    return client;
}

/* CallIds.refer(call, raw). */
static PyObject *refer_call(const Calls *c, PyObject *call, PyObject *raw) {
    if (c->by_call == Py_None) { /* its maps are not kept: CallIds.refer works it out */
        PyObject *args[] = {call, raw};
        return PyObject_Vectorcall(c->refer, args, 2, NULL);
    }
    PyObject *pair = PyTuple_Pack(2, call, raw);
    if (pair == NULL) return NULL;
    PyObject *known = PyDict_GetItemWithError(c->by_call, pair); /* borrowed */
    Py_DECREF(pair);
    if (known == NULL && PyErr_Occurred()) return NULL;
    int truthy = known ? PyObject_IsTrue(known) : 0; /* by_call's value "or" latest's */
    if (truthy < 0) return NULL;
    if (!truthy) {
        known = PyDict_GetItemWithError(c->latest, raw);
        if (known == NULL && PyErr_Occurred()) return NULL;
    }
    return known ? Py_NewRef(known) : plain_encode(raw, c->call_profile);
}

/* body._literal(client id): the client id itself (a str) when it has nothing to escape
 * (printable ASCII but '"' and '\\', as every encoded id is): its literal is the id between
 * quotes (splice_bytes makes it, out_quoted writes it); else the literal (bytes) from body._literal. */
static PyObject *literal_of(const Rewrite *r, PyObject *client) {
    if (PyUnicode_IS_ASCII(client)) {
        const unsigned char *text = PyUnicode_DATA(client);
        Py_ssize_t size = PyUnicode_GET_LENGTH(client), i = 0;
        while (i < size && text[i] >= 0x20 && text[i] != '"' && text[i] != '\\') i++;
        if (i == size) return Py_NewRef(client);
    }
    return PyObject_CallOneArg(r->literal, client); /* may raise body.RewriteError */
}

/* The bytes a splice's text stands for: a literal as it is, a plain client id between quotes
 * (literal_of). */
static PyObject *splice_bytes(PyObject *text) {
    if (PyBytes_Check(text)) return Py_NewRef(text);
    Py_ssize_t size = PyUnicode_GET_LENGTH(text);
    PyObject *literal = PyBytes_FromStringAndSize(NULL, size + 2);
    if (literal == NULL) return NULL;
    char *out = PyBytes_AS_STRING(literal);
    out[0] = out[size + 1] = '"';
    memcpy(out + 1, PyUnicode_DATA(text), size);
    return literal;
}

/* The root call of an event: its first int member among the roots (positions.find_ids). */
static PyObject *root_call(const Arena *a, PyObject *roots) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(roots); i++) {
        int number = member(a, 0, PyTuple_GET_ITEM(roots, i));
        if (number >= 0 && a->nodes[number].kind == A_INT) {
            PyObject *value = PyLong_FromLongLong(a->nodes[number].integer);
            PyObject *call = value ? PyTuple_Pack(1, value) : NULL;
            Py_XDECREF(value);
            return untracked(call);
        }
    }
    return PyTuple_New(0);
}

/* The order body._changes takes the finds in: the walk's (each position in table order, its
 * finds in document order); encoding, stably sorted by body._calls_first (calls in order, by
 * number, then what refers to them). */
static int walk_order(const void *x, const void *y) {
    const Find *a = x, *b = y;
    if (a->slot != b->slot) return a->slot < b->slot ? -1 : 1;
    return a->order < b->order ? -1 : a->order > b->order;
}

static int calls_first(const void *x, const void *y) {
    const Find *a = x, *b = y;
    if (a->refers != b->refers) return a->refers - b->refers;
    if (PyObject_RichCompareBool(a->call, b->call, Py_LT) == 1) return -1; /* ints: no error */
    if (PyObject_RichCompareBool(b->call, a->call, Py_LT) == 1) return 1;
    return walk_order(x, y);
}

typedef struct {
    Py_ssize_t start, end;
    PyObject *text; /* owned: a literal (bytes), or a plain client id (str, see literal_of) */
} Splice;

static int by_start(const void *x, const void *y) {
    const Splice *a = x, *b = y;
    return a->start < b->start ? -1 : a->start > b->start;
}

/* What the rewrites of one call share, kept for the next range (sse_feed rewrites one per
 * event): the nodes, the finds, and the splices of the last range rewritten. */
typedef struct {
    Arena arena;
    Finder finder;
    Splice *splices;
    Py_ssize_t count, capacity; /* splices */
    unsigned char *edited;      /* one flag per node */
    int edited_capacity;
    PyObject *path; /* the last path made (events repeat theirs): given again when it is */
} Scratch;

static void scratch_clear(Scratch *s) {
    for (Py_ssize_t i = 0; i < s->count; i++) Py_DECREF(s->splices[i].text);
    s->count = 0;
    finder_clear(&s->finder);
}

static void scratch_end(Scratch *s) {
    scratch_clear(s);
    PyMem_Free(s->arena.nodes);
    finder_end(&s->finder);
    PyMem_Free(s->splices);
    PyMem_Free(s->edited);
    Py_CLEAR(s->path);
}

/* path_of(find), or the last path made when it is the same. */
static PyObject *path_made(Scratch *s, const Find *find) {
    const char *text = s->finder.paths + find->path_at;
    PyObject *last = s->path;
    if (last != NULL && PyUnicode_IS_ASCII(last) && PyUnicode_GET_LENGTH(last) == find->path_size &&
        memcmp(PyUnicode_DATA(last), text, find->path_size) == 0)
        return Py_NewRef(last);
    PyObject *path = path_of(&s->finder, find);
    if (path != NULL) Py_XSETREF(s->path, Py_NewRef(path));
    return path;
}

/* Room for count splices and a flag per node of the arena: 1, or -1 (no memory). */
static int scratch_room(Scratch *s, Py_ssize_t count) {
    if (count > s->capacity) {
        Splice *grown = PyMem_Realloc(s->splices, count * sizeof(Splice));
        if (grown == NULL) return PyErr_NoMemory(), -1;
        s->splices = grown;
        s->capacity = count;
    }
    if (s->arena.count > s->edited_capacity) {
        PyMem_Free(s->edited);
        s->edited = PyMem_Malloc(s->arena.count);
        s->edited_capacity = s->edited ? s->arena.count : 0;
        if (s->edited == NULL) return PyErr_NoMemory(), -1;
    }
    memset(s->edited, 0, s->arena.count);
    return 1;
}

/* The new value of one find: (old, new, its literal), or 0 when it stays; -1: an error. */
static int new_value(Rewrite *r, const Find *find, PyObject *value, PyObject *defined,
                     PyObject **raw, PyObject **client, PyObject **text) {
    if (r->decode) { /* restore: decode gives None or (raw id, its literal) */
        if (find->role == r->defines && PyList_Append(defined, value) < 0) return -1;
        PyObject *decoded = PyObject_CallOneArg(r->decode, value);
        if (decoded == NULL || decoded == Py_None) {
            Py_XDECREF(decoded);
            return decoded ? 0 : -1;
        }
        if (!PyTuple_Check(decoded) || PyTuple_GET_SIZE(decoded) != 2) {
            Py_DECREF(decoded);
            PyErr_SetString(PyExc_TypeError, "decode gives None or (raw, literal)");
            return -1;
        }
        *raw = Py_NewRef(PyTuple_GET_ITEM(decoded, 0));
        *client = Py_NewRef(value);
        *text = Py_NewRef(PyTuple_GET_ITEM(decoded, 1));
        Py_DECREF(decoded);
        return 1;
    }
    PyObject *made = find->refers ? refer_call(&r->calls, find->call, value)
                                  : define_call(&r->calls, find->call, find->key, value);
    if (made == NULL) return -1;
    if (!PyUnicode_Check(made) || PyUnicode_Compare(made, value) == 0) {
        int same = PyUnicode_Check(made);
        Py_DECREF(made);
        if (!same) PyErr_SetString(PyExc_TypeError, "client ids are str");
        return same ? 0 : -1;
    }
    *raw = Py_NewRef(value);
    *client = made;
    *text = literal_of(r, made);
    return *text ? 1 : -1;
}

/* Rewrite buffer[start:end]: 1, with its changes appended to changes (restore: the values at
 * definition positions to defined) and s->splices[:s->count] the edits, sorted, counting from
 * the buffer's start; 0 (not ours) or -1 (an error): then changes is as it was. */
static int rewrite_into(Rewrite *r, Scratch *s, const unsigned char *buffer, Py_ssize_t start,
                        Py_ssize_t end, PyObject *changes, PyObject *defined) {
    Finder *f = &s->finder;
    Py_ssize_t recorded = PyList_GET_SIZE(changes);
    scratch_clear(s);
    int done = parse_range(buffer, start, end, r->schema, &s->arena);
    if (done <= 0) return done;
    PyObject *root = root_call(&s->arena, r->roots);
    if (root == NULL) return -1;
    done = find_all(f, &s->arena, buffer, r->tree, root, r->numbered);
    Py_DECREF(root);
    if (done <= 0) return done;
    for (Py_ssize_t i = 0; i < f->count; i++) f->finds[i].refers = f->finds[i].role == r->refers;
    if (f->count > 1) qsort(f->finds, f->count, sizeof(Find), r->decode ? walk_order : calls_first);
    if (scratch_room(s, f->count) < 0) return -1;
    for (Py_ssize_t i = 0; done > 0 && i < f->count; i++) {
        const Find *find = &f->finds[i];
        PyObject *value = text_of(f, find->node), *raw = NULL, *client = NULL, *text = NULL;
        int changed = value ? new_value(r, find, value, defined, &raw, &client, &text) : -1;
        PyObject *path = changed > 0 ? path_made(s, find) : NULL;
        PyObject *change = path ? r->change_type->tp_alloc(r->change_type, 6) : NULL;
        if (change) {
            PyTuple_SET_ITEM(change, 0, path);
            PyTuple_SET_ITEM(change, 1, Py_NewRef(raw));
            PyTuple_SET_ITEM(change, 2, Py_NewRef(client));
            PyTuple_SET_ITEM(change, 3, Py_NewRef(r->word));
            PyTuple_SET_ITEM(change, 4, Py_NewRef(_empty));
            PyTuple_SET_ITEM(change, 5, Py_NewRef(_empty));
            untracked(change);
            path = NULL;
            if (PyList_Append(changes, change) < 0) changed = -1;
            Py_DECREF(change);
        } else if (changed > 0) {
            changed = -1;
        }
        if (changed > 0 && !s->edited[find->node]) { /* each member once: body._Targets */
            s->edited[find->node] = 1;
            const Node *node = &s->arena.nodes[find->node];
            Splice splice = {node->start, node->end, Py_NewRef(text)};
            s->splices[s->count++] = splice;
        }
        Py_XDECREF(path);
        Py_XDECREF(value);
        Py_XDECREF(raw);
        Py_XDECREF(client);
        Py_XDECREF(text);
        if (changed < 0) done = -1;
    }
    finder_clear(f);
    if (done < 0) {
        scratch_clear(s);
        PyObject *error = PyErr_GetRaisedException();
        PyList_SetSlice(changes, recorded, PY_SSIZE_T_MAX, NULL); /* no error: a shorter list */
        PyErr_SetRaisedException(error);
        return -1;
    }
    if (s->count > 1) qsort(s->splices, s->count, sizeof(Splice), by_start);
    return 1;
}

/* buffer[start:end] rewritten: (edits, changes) as lists (see rewrite_into), None (not ours)
 * or NULL (an error). */
static PyObject *rewrite_range(Rewrite *r, const unsigned char *buffer, Py_ssize_t start,
                               Py_ssize_t end, PyObject *defined) {
    Scratch s;
    memset(&s, 0, sizeof s);
    PyObject *changes = PyList_New(0), *edits = NULL, *result = NULL;
    int done = changes ? rewrite_into(r, &s, buffer, start, end, changes, defined) : -1;
    if (done == 0) result = Py_NewRef(Py_None);
    if (done > 0) edits = PyList_New(s.count);
    for (Py_ssize_t i = 0; edits && i < s.count; i++) {
        PyObject *edit = r->edit_type->tp_alloc(r->edit_type, 3);
        PyObject *from = PyLong_FromSsize_t(s.splices[i].start);
        PyObject *to = PyLong_FromSsize_t(s.splices[i].end);
        if (edit == NULL || from == NULL || to == NULL) {
            Py_XDECREF(edit);
            Py_XDECREF(from);
            Py_XDECREF(to);
            Py_CLEAR(edits);
            break;
        }
        PyTuple_SET_ITEM(edit, 0, from);
        PyTuple_SET_ITEM(edit, 1, to);
        PyObject *text = splice_bytes(s.splices[i].text);
        if (text == NULL) {
            Py_DECREF(edit);
            Py_CLEAR(edits);
            break;
        }
        PyTuple_SET_ITEM(edit, 2, text);
        PyList_SET_ITEM(edits, i, edit);
    }
    if (edits) result = PyTuple_Pack(2, edits, changes);
    Py_XDECREF(edits);
    Py_XDECREF(changes);
    scratch_end(&s);
    return result;
}

static PyObject *restore(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    Rewrite r;
    Py_buffer document;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "restore(document, table, decode, roles, types)");
        return NULL;
    }
    r.literal = NULL;
    r.decode = args[2];
    if (!table_from(&r, args[1]) || !names_from(&r, args[3], args[4], _restored)) return NULL;
    if (PyObject_GetBuffer(args[0], &document, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *defined = PyList_New(0), *result = NULL;
    PyObject *rewritten = defined ? rewrite_range(&r, document.buf, 0, document.len, defined)
                                  : NULL;
    if (rewritten && rewritten != Py_None) {
        result = Py_BuildValue("(OOO)", PyTuple_GET_ITEM(rewritten, 0),
                               PyTuple_GET_ITEM(rewritten, 1), defined);
        Py_DECREF(rewritten);
    } else {
        result = rewritten;
    }
    Py_XDECREF(defined);
    PyBuffer_Release(&document);
    return result;
}

static PyObject *encode(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    Rewrite r;
    if (nargs != 8 || !PyBytes_Check(args[0]) || !PyLong_Check(args[1]) ||
        !PyLong_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "encode(buffer, start, end, *encoder)");
        return NULL;
    }
    if (!encoder_from(&r, args + 3)) return NULL;
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    Py_ssize_t start = PyLong_AsSsize_t(args[1]), end = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred()) return NULL;
    if (start < 0 || end < start || end > size) {
        PyErr_SetString(PyExc_ValueError, "start and end must be inside the buffer");
        return NULL;
    }
    PyObject *result = rewrite_range(&r, (const unsigned char *)PyBytes_AS_STRING(args[0]),
                                     start, end, NULL);
    encoder_end(&r);
    return result;
}

/* --- sse_feed: the events of a piece of an SSE stream (LF line endings) ----------------- */

/* The bytes going out, written straight into a bytes object (grown as needed); altered:
 * whether they differ from the bytes that came in. */
typedef struct {
    PyObject *bytes;
    Py_ssize_t size;
    int altered;
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

/* "text" (ASCII, nothing to escape) added as a JSON string literal. */
static int out_quoted(Out *o, const void *text, Py_ssize_t n) {
    if (out_add(o, "\"", 1) < 0 || out_add(o, text, n) < 0) return -1;
    return out_add(o, "\"", 1);
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
static int sse_event(Rewrite *r, Scratch *s, const unsigned char *b, Py_ssize_t start,
                     Py_ssize_t end, PyObject *changes, PyObject *fallback, Out *out) {
    const unsigned char *lf = memchr(b + start, '\n', end - start);
    if (end - start >= 8 && memcmp(b + start, "data: ", 6) == 0 && lf == b + end - 2) {
        int encoded = rewrite_into(r, s, b, start + 6, end - 2, changes, NULL);
        if (encoded < 0) PyErr_Clear(); /* the fallback meets it again, and decides */
        if (encoded > 0) {
            int done = 0;
            Py_ssize_t at = start;
            out->altered |= s->count > 0;
            for (Py_ssize_t i = 0; done == 0 && i < s->count; i++) {
                PyObject *text = s->splices[i].text;
                done = out_add(out, b + at, s->splices[i].start - at);
                if (done == 0 && PyBytes_Check(text))
                    done = out_add(out, PyBytes_AS_STRING(text), PyBytes_GET_SIZE(text));
                else if (done == 0) /* a plain client id (literal_of) */
                    done = out_quoted(out, PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text));
                at = s->splices[i].end;
            }
            return done == 0 ? out_add(out, b + at, end - at) : done;
        }
    }
    PyObject *event = PyBytes_FromStringAndSize((const char *)b + start, end - start);
    PyObject *text = event ? PyObject_CallOneArg(fallback, event) : NULL;
    Py_XDECREF(event);
    if (text == NULL) return -1;
    int done = -1;
    if (!PyBytes_Check(text)) PyErr_SetString(PyExc_TypeError, "fallback gives bytes");
    else done = out_add(out, PyBytes_AS_STRING(text), PyBytes_GET_SIZE(text));
    out->altered |= text != event; /* the fallback gives back an event it leaves as it is */
    Py_DECREF(text);
    return done;
}

/* The marker words, grouped by their first bytes (as many as the shortest word has, at most
 * 8); each group's stem (the prefix all its words share) is searched for, and a hit is a word
 * of the group spelled there. Responses events have 26 words, 24 of them "response.<...>":
 * three searches, not 26. For each group, where its next hit is (-1: not searched yet; the
 * buffer's size: none after). Like markers.Markers.finder: the first word from an offset on. */
#define MAX_MARKERS 64
typedef struct {
    const unsigned char *word[MAX_MARKERS];
    Py_ssize_t size[MAX_MARKERS];
    int group_of[MAX_MARKERS];   /* the group of each word */
    int first_word[MAX_MARKERS]; /* each group's first word: its stem's spelling */
    Py_ssize_t stem[MAX_MARKERS], next[MAX_MARKERS];
    int count, groups;
} Markers;

/* Where word[:size] first starts in hay[:n], or NULL (glibc's memmem scans at memory speed). */
static const unsigned char *find_word(const unsigned char *hay, Py_ssize_t n,
                                      const unsigned char *word, Py_ssize_t size) {
    if (n < size) return NULL;
#if defined(_WIN32)
    for (const unsigned char *end = hay + n - size + 1;
         hay < end && (hay = memchr(hay, word[0], end - hay)) != NULL; hay++)
        if (memcmp(hay, word, size) == 0) return hay;
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
    Py_ssize_t shortest = 8;
    for (int i = 0; i < m->count; i++) {
        PyObject *word = PyTuple_GET_ITEM(words, i);
        if (!PyBytes_Check(word) || PyBytes_GET_SIZE(word) < 1) {
            PyErr_SetString(PyExc_TypeError, "markers: a tuple of 1 to 64 non-empty bytes");
            return 0;
        }
        m->word[i] = (const unsigned char *)PyBytes_AS_STRING(word);
        m->size[i] = PyBytes_GET_SIZE(word);
        if (m->size[i] < shortest) shortest = m->size[i];
    }
    m->groups = 0;
    for (int i = 0; i < m->count; i++) {
        int group = 0;
        while (group < m->groups && memcmp(m->word[m->first_word[group]], m->word[i], shortest))
            group++;
        if (group == m->groups) {
            m->first_word[m->groups] = i;
            m->stem[m->groups] = m->size[i];
            m->next[m->groups++] = -1;
        }
        Py_ssize_t common = 0, most = m->stem[group];
        while (common < most && common < m->size[i] &&
               m->word[i][common] == m->word[m->first_word[group]][common])
            common++;
        m->stem[group] = common;
        m->group_of[i] = group;
    }
    return 1;
}

/* Whether a word of the group is spelled at b[at:]. */
static int spelled(const Markers *m, int group, const unsigned char *b, Py_ssize_t n,
                   Py_ssize_t at) {
    for (int i = 0; i < m->count; i++)
        if (m->group_of[i] == group && m->size[i] <= n - at &&
            memcmp(b + at, m->word[i], m->size[i]) == 0)
            return 1;
    return 0;
}

/* Where the first word in b[start:n] begins, or -1. */
static Py_ssize_t first_hit(Markers *m, const unsigned char *b, Py_ssize_t n,
                            Py_ssize_t start) {
    Py_ssize_t first = n;
    for (int group = 0; group < m->groups; group++) {
        Py_ssize_t from = start;
        while (m->next[group] < start) {
            const unsigned char *stem = m->word[m->first_word[group]];
            const unsigned char *at = find_word(b + from, n - from, stem, m->stem[group]);
            if (at == NULL) m->next[group] = n;
            else if (spelled(m, group, b, n, at - b)) m->next[group] = at - b;
            else from = at - b + 1;
        }
        if (m->next[group] < first) first = m->next[group];
    }
    return first < n ? first : -1;
}

/* Forget where the words were found: a search in another buffer follows. */
static void markers_restart(Markers *m) {
    for (int group = 0; group < m->groups; group++) m->next[group] = -1;
}

/* The events of b[:n] (LF line endings), as stream._runs frames them: whole events without
 * a marker go out as they are, each event with one is encoded (sse_event). Returns where the
 * incomplete event left over starts, or -1 (an error). */
static Py_ssize_t frame_events(Rewrite *r, Markers *markers, Scratch *scratch,
                               const unsigned char *b, Py_ssize_t n, PyObject *changes,
                               PyObject *fallback, Out *out) {
    Py_ssize_t start = 0;
    for (;;) {
        Py_ssize_t hit = first_hit(markers, b, n, start);
        Py_ssize_t blank = rfind_blank(b, start, hit < 0 ? n : hit);
        if (blank >= 0) {
            Py_ssize_t first = blank; /* the first LF of the run that ends with this blank */
            while (first - 1 >= start && b[first - 1] == '\n') first--;
            Py_ssize_t end = first + (blank + 2 - first) / 2 * 2;
            if (out_add(out, b + start, end - start) < 0) return -1;
            start = end;
        }
        if (hit < 0) return start;
        blank = find_blank(b, start, n);
        if (blank < 0) return start; /* the event with the marker is incomplete */
        if (sse_event(r, scratch, b, start, blank + 2, changes, fallback, out) < 0) return -1;
        start = blank + 2;
    }
}

/* Append b[:n] to the bytearray held: 0, or -1 (an error). */
static int hold(PyObject *held, const char *b, Py_ssize_t n) {
    Py_ssize_t size = PyByteArray_GET_SIZE(held);
    if (n == 0) return 0;
    if (PyByteArray_Resize(held, size + n) < 0) return -1;
    memcpy(PyByteArray_AS_STRING(held) + size, b, n);
    return 0;
}

/* How many held bytes the framing may search again with a piece, beyond the piece's size (so
 * each byte is searched a bounded number of times). */
#define RESEARCHED (8 * 1024)

/* The scratch of sse_feed, kept from one piece to the next (its memory stays allocated, and
 * warm): a stream's pieces come one at a time; a call made while it is in use (by Python code
 * that the fallback runs) has its own. */
static Scratch kept_scratch;
static int kept_scratch_busy;

/* Where the first event boundary in d[:n] that the framing cannot read otherwise ends: after a
 * blank line of exactly two LFs, between bytes that are no LF; n when there is none. */
static Py_ssize_t clean_boundary(const unsigned char *d, Py_ssize_t n) {
    for (Py_ssize_t at = 1;;) {
        Py_ssize_t blank = find_blank(d, at, n);
        if (blank < 0 || blank + 2 >= n) return n;
        if (d[blank - 1] != '\n' && d[blank + 2] != '\n') return blank + 2;
        at = blank + 1;
    }
}

#define SSE_FEED_USAGE \
    "sse_feed(data: bytes, held: bytearray, limit, markers, changes, *encoder, fallback)"

/* What sse_feed takes after the piece, read (a Feeder reads it once per lane, not per piece):
 * (held, limit, markers, changes, *encoder, fallback); the objects are the caller's. */
typedef struct {
    PyObject *held, *changes, *fallback;
    Py_ssize_t limit;
    Markers markers;
    Rewrite r;
} Lane;

static int lane_from(Lane *l, PyObject *const *args) {
    if (!PyByteArray_CheckExact(args[0]) || !PyLong_Check(args[1]) || !PyList_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, SSE_FEED_USAGE);
        return 0;
    }
    l->held = args[0];
    l->limit = PyLong_AsSsize_t(args[1]);
    l->changes = args[3];
    l->fallback = args[9];
    if (l->limit == -1 && PyErr_Occurred()) return 0;
    return markers_from(&l->markers, args[2]) && encoder_from(&l->r, args + 4);
}

/* sse_feed of data on a lane read. */
static PyObject *feed_piece(Lane *l, PyObject *data) {
    Rewrite *r = &l->r;
    Markers *markers = &l->markers;
    Scratch own, *scratch = &own;
    Py_buffer view;
    PyObject *held = l->held, *changes = l->changes, *fallback = l->fallback;
    Py_ssize_t kept = PyByteArray_GET_SIZE(held), size = PyBytes_GET_SIZE(data);
    const unsigned char *d = (const unsigned char *)PyBytes_AS_STRING(data);
    if (memchr(d, '\r', size) != NULL || kept > (size > RESEARCHED ? size : RESEARCHED) ||
        kept + size > l->limit)
        return Py_NewRef(Py_None); /* the Python framing's */
    /* When bytes are held, the event they begin ends in data: data up to the first boundary
     * after it that reads the same on its own (clean_boundary) joins them in held, and the
     * rest is framed in data itself, with no copy. Held is framed through a view, which keeps
     * it unresized while the fallback runs Python code. */
    Py_ssize_t joined = kept ? clean_boundary(d, size) : 0;
    Py_ssize_t recorded = PyList_GET_SIZE(changes), rest = -1; /* rest: in data */
    PyObject *result = NULL;
    int viewed = 0;
    if (kept_scratch_busy) memset(&own, 0, sizeof own);
    else scratch = &kept_scratch;
    kept_scratch_busy |= scratch == &kept_scratch;
    r->calls.known = NULL;
    markers_restart(markers);
    Out out = {NULL, 0, 0};
    if (!kept && size >= 2 && d[size - 2] == '\n' && d[size - 1] == '\n' &&
        first_hit(markers, d, size, 0) < 0) {
        /* whole events without a marker: as they are, as StreamRewriter._frame passes them
         * (however the LFs at their end pair up) */
        rest = size;
        result = Py_NewRef(data);
        goto done;
    }
    out.bytes = PyBytes_FromStringAndSize(NULL, kept + size + 64);
    if (out.bytes == NULL) goto done;
    Py_ssize_t at = 0; /* where data's own framing starts */
    if (kept) {
        if (hold(held, (const char *)d, joined) < 0 ||
            PyObject_GetBuffer(held, &view, PyBUF_SIMPLE) < 0)
            goto done;
        viewed = 1;
        Py_ssize_t framed = frame_events(r, markers, scratch, view.buf, view.len, changes,
                                         fallback, &out);
        if (framed < 0) goto done;
        PyBuffer_Release(&view);
        viewed = 0;
        if (joined == size) { /* no boundary of its own in data: held frames it all */
            rest = framed - kept;
            goto framed;
        }
        if (framed != kept + joined) { /* held ends at a clean boundary: framed whole */
            PyErr_SetString(PyExc_SystemError, "sse_feed: an event across a clean boundary");
            goto done;
        }
        markers_restart(markers);
        at = joined;
    }
    Py_ssize_t framed = frame_events(r, markers, scratch, d + at, size - at, changes, fallback,
                                     &out);
    if (framed < 0) goto done;
    rest = at + framed;
framed:
    if (!out.altered && !kept && rest == size) {
        result = Py_NewRef(data); /* all of it, as it came: no copy */
    } else if (_PyBytes_Resize(&out.bytes, out.size) == 0) {
        result = Py_NewRef(out.bytes);
    }
done:
    if (scratch == &kept_scratch) {
        scratch_clear(scratch); /* the texts it holds; its room stays */
        kept_scratch_busy = 0;
    } else {
        scratch_end(scratch);
    }
    encoder_end(r);
    Py_XDECREF(out.bytes);
    if (viewed) PyBuffer_Release(&view);
    /* What is left is held: the incomplete event, or after an error all of it (then no change
     * is recorded: it all goes out as it came). */
    int done = 0;
    if (result == NULL) {
        PyObject *error = PyErr_GetRaisedException();
        done = PyList_SetSlice(changes, recorded, PY_SSIZE_T_MAX, NULL);
        if (done == 0) done = PyByteArray_Resize(held, kept);
        if (done == 0) done = hold(held, (const char *)d, size);
        PyErr_SetRaisedException(error); /* the first error is the one to tell */
        return NULL;
    }
    if (rest < 0) { /* still in held: the incomplete event began there */
        done = PySequence_DelSlice(held, 0, kept + rest);
    } else {
        done = PyByteArray_Resize(held, 0);
        if (done == 0) done = hold(held, (const char *)d + rest, size - rest);
    }
    if (done < 0) Py_CLEAR(result);
    return result;
}

static PyObject *sse_feed(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    Lane lane;
    if (nargs != 11 || !PyBytes_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, SSE_FEED_USAGE);
        return NULL;
    }
    if (!lane_from(&lane, args + 1)) return NULL;
    Py_INCREF(args[3]); /* the markers point into these words */
    PyObject *result = feed_piece(&lane, args[0]);
    Py_DECREF(args[3]);
    return result;
}

/* --- first_marker: where a word of the markers first starts -------------------------------- */

static PyObject *first_marker(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    Markers markers;
    Py_buffer view;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "first_marker(data, words)");
        return NULL;
    }
    if (!markers_from(&markers, args[1]) || PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    Py_ssize_t hit = first_hit(&markers, view.buf, view.len, 0);
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(hit);
}

/* --- Feeder: a stream's function of its pieces ------------------------------------------------ */

/* stream.stream_function's function, with the common piece handled here: while the rewriter's
 * lane is open (StreamRewriter.lane), a piece goes straight to sse_feed, with no Python frame;
 * everything else (the lane closed, the end, a piece sse_feed leaves to Python) is the Python
 * function's. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *function;          /* the Python function of a piece */
    PyObject *rewriter;          /* the StreamRewriter */
    PyObject *report, *on_error; /* stream_function's callbacks */
    PyObject *lane;              /* sse_feed's arguments after the piece, or NULL: not open */
    Lane parsed;                 /* the lane, read */
    PyObject *changes, *problems;
    Py_ssize_t drain;
    int forward, ended;
} Feeder;

static PyObject *_lane_name, *_lane_failed_name, *_changes_name, *_problems_name;

static int feeder_traverse(Feeder *f, visitproc visit, void *arg) {
    Py_VISIT(f->function);
    Py_VISIT(f->rewriter);
    Py_VISIT(f->report);
    Py_VISIT(f->on_error);
    Py_VISIT(f->lane);
    Py_VISIT(f->changes);
    Py_VISIT(f->problems);
    return 0;
}

static int feeder_clear(Feeder *f) {
    Py_CLEAR(f->function);
    Py_CLEAR(f->rewriter);
    Py_CLEAR(f->report);
    Py_CLEAR(f->on_error);
    Py_CLEAR(f->lane);
    Py_CLEAR(f->changes);
    Py_CLEAR(f->problems);
    return 0;
}

static void feeder_dealloc(Feeder *f) {
    PyObject_GC_UnTrack(f);
    feeder_clear(f);
    Py_TYPE(f)->tp_free((PyObject *)f);
}

/* The rewriter's lane now: 0, or -1 (an error). */
static int feeder_lane(Feeder *f) {
    PyObject *lane = PyObject_CallMethodNoArgs(f->rewriter, _lane_name);
    if (lane == NULL) return -1;
    if (lane != Py_None && (!PyTuple_Check(lane) || PyTuple_GET_SIZE(lane) != 10)) {
        Py_DECREF(lane);
        PyErr_SetString(PyExc_TypeError, "StreamRewriter.lane gives sse_feed's 10 arguments");
        return -1;
    }
    if (lane != Py_None && !lane_from(&f->parsed, PySequence_Fast_ITEMS(lane))) {
        Py_DECREF(lane);
        Py_CLEAR(f->lane); /* what was read of it is no more */
        return -1;
    }
    Py_XSETREF(f->lane, lane == Py_None ? NULL : lane);
    if (lane == Py_None) Py_DECREF(lane);
    return 0;
}

/* The Python function's answer for data, and what follows from it (the end, the lane). */
static PyObject *feeder_python(Feeder *f, PyObject *data) {
    PyObject *out = PyObject_CallOneArg(f->function, data);
    if (PyBytes_GET_SIZE(data) == 0) { /* the end: the function lets go of the rewriter, so here */
        f->ended = 1;
        feeder_clear(f);
    } else if (out != NULL && feeder_lane(f) < 0) { /* cannot be: then the function does all */
        PyErr_Clear();
        Py_CLEAR(f->lane);
    }
    return out;
}

/* The error raised, told to on_error: 0, or -1 (on_error raised). */
static int feeder_told(Feeder *f) {
    PyObject *error = PyErr_GetRaisedException();
    PyObject *told = PyObject_CallOneArg(f->on_error, error);
    Py_DECREF(error);
    Py_XDECREF(told);
    return told == NULL ? -1 : 0;
}

static PyObject *feeder_call(Feeder *f, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 1 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "a stream function takes one piece");
        return NULL;
    }
    PyObject *data = args[0];
    if (f->ended) return Py_NewRef(data);
    if (f->lane == NULL || !PyBytes_CheckExact(data) || PyBytes_GET_SIZE(data) == 0)
        return feeder_python(f, data);
    Py_INCREF(f->lane); /* what the lane read points into, while Python code (its fallback) runs */
    PyObject *lane = f->lane, *out = feed_piece(&f->parsed, data);
    Py_DECREF(lane);
    if (out == Py_None) {
        Py_DECREF(out);
        return feeder_python(f, data);
    }
    if (out == NULL) { /* as StreamRewriter.feed: the rewriter gives up, and gives all it holds */
        PyObject *error = PyErr_GetRaisedException();
        out = PyObject_CallMethodOneArg(f->rewriter, _lane_failed_name, error);
        Py_DECREF(error);
        Py_CLEAR(f->lane);
    }
    if (out == NULL) /* as the Python function: the error is told, the piece goes as it came */
        return feeder_told(f) < 0 ? NULL : Py_NewRef(data);
    if (PyList_GET_SIZE(f->problems) > 0 || PyList_GET_SIZE(f->changes) >= f->drain) {
        PyObject *report_args[] = {f->rewriter, Py_False};
        PyObject *reported = PyObject_Vectorcall(f->report, report_args, 2, NULL);
        Py_XDECREF(reported);
        if (reported == NULL && feeder_told(f) < 0) { /* else what the rewriter gave goes */
            Py_DECREF(out);
            return NULL;
        }
    }
    if (f->forward) {
        Py_DECREF(out);
        return Py_NewRef(data);
    }
    if (PyBytes_GET_SIZE(out) == 0) { /* all of it held: an empty piece would end the body */
        Py_DECREF(out);
        return PyTuple_New(0);
    }
    return out;
}

static PyObject *feeder_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *function, *rewriter, *report, *on_error;
    Py_ssize_t drain;
    int forward;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) > 0) {
        PyErr_SetString(PyExc_TypeError, "Feeder takes positional arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OOOOnp", &function, &rewriter, &report, &on_error, &drain,
                          &forward))
        return NULL;
    Feeder *f = (Feeder *)type->tp_alloc(type, 0);
    if (f == NULL) return NULL;
    f->vectorcall = (vectorcallfunc)feeder_call;
    f->function = Py_NewRef(function);
    f->rewriter = Py_NewRef(rewriter);
    f->report = Py_NewRef(report);
    f->on_error = Py_NewRef(on_error);
    f->drain = drain;
    f->forward = forward;
    f->changes = PyObject_GetAttr(rewriter, _changes_name);
    f->problems = f->changes ? PyObject_GetAttr(rewriter, _problems_name) : NULL;
    if (f->problems == NULL || !PyList_CheckExact(f->changes) || !PyList_CheckExact(f->problems)) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "changes and problems are lists");
        Py_DECREF(f);
        return NULL;
    }
    return (PyObject *)f; /* the lane is read after the first piece, which opens it */
}

static PyTypeObject FeederType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "toolid._native.Feeder",
    .tp_basicsize = sizeof(Feeder),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Feeder(function, rewriter, report, on_error, drain_every, forward_input): see "
              "toolid/stream.py (stream_function).",
    .tp_new = feeder_new,
    .tp_dealloc = (destructor)feeder_dealloc,
    .tp_traverse = (traverseproc)feeder_traverse,
    .tp_clear = (inquiry)feeder_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Feeder, vectorcall),
};

/* --- records: changes as the records stored in flows ---------------------------------------- */

static PyObject *_record_keys[4], *_mapped, *_tag; /* interned */

static PyObject *records(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "records(changes, as_record)");
        return NULL;
    }
    PyObject *changes = PySequence_Fast(args[0], "changes must be a sequence");
    if (changes == NULL) return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(changes);
    PyObject *result = PyList_New(count);
    for (Py_ssize_t i = 0; result && i < count; i++) {
        PyObject *change = PySequence_Fast_GET_ITEM(changes, i), *record = NULL;
        int plain = PyTuple_Check(change) && PyTuple_GET_SIZE(change) == 6;
        for (int k = 2; plain && k < 6; k++) plain = PyUnicode_Check(PyTuple_GET_ITEM(change, k));
        if (plain) { /* no rule set, no occurrence tag, not mapped: the four fields */
            PyObject *client = PyTuple_GET_ITEM(change, 2), *action = PyTuple_GET_ITEM(change, 3);
            Py_ssize_t tagged = PyUnicode_Find(client, _tag, 0, PY_SSIZE_T_MAX, 1);
            int mapped = PyUnicode_Compare(action, _mapped) == 0;
            plain = tagged == -1 && !mapped && PyUnicode_GET_LENGTH(PyTuple_GET_ITEM(change, 5)) == 0;
            if (tagged == -2 || PyErr_Occurred()) Py_CLEAR(result);
        }
        if (result && plain && (record = PyDict_New()) != NULL) {
            for (int k = 0; record && k < 4; k++)
                if (PyDict_SetItem(record, _record_keys[k], PyTuple_GET_ITEM(change, k)) < 0)
                    Py_CLEAR(record);
        } else if (result) {
            record = PyObject_CallOneArg(args[1], change);
        }
        if (record == NULL) Py_CLEAR(result);
        else PyList_SET_ITEM(result, i, record);
    }
    Py_DECREF(changes);
    return result;
}

/* --- encode_id: codec.encode of one id ------------------------------------------------------ */

static PyObject *encode_id(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyUnicode_Check(args[0]) || !PyUnicode_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "encode_id(raw: str, profile: str)");
        return NULL;
    }
    return plain_encode(args[0], PyUnicode_CompareWithASCIIString(args[1], "call") == 0);
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
     "restore(document, table, decode, roles, types) -> (edits, changes, defined) | None: "
     "see toolid/body.py."},
    {"encode", (PyCFunction)(void (*)(void))encode, METH_FASTCALL,
     "encode(buffer, start, end, table, calls, literal, roles, types) -> "
     "(edits, changes) | None: see toolid/body.py."},
    {"sse_feed", (PyCFunction)(void (*)(void))sse_feed, METH_FASTCALL,
     "sse_feed(data, held, limit, markers, changes, *encoder, fallback) -> bytes | None: see "
     "toolid/stream.py."},
    {"first_marker", (PyCFunction)(void (*)(void))first_marker, METH_FASTCALL,
     "first_marker(data, words) -> int: see toolid/markers.py."},
    {"records", (PyCFunction)(void (*)(void))records, METH_FASTCALL,
     "records(changes, as_record) -> list: see toolid/report.py (as_records)."},
    {"encode_id", (PyCFunction)(void (*)(void))encode_id, METH_FASTCALL,
     "codec.encode(raw, profile): the plain client id of one raw id."},
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
    _encoded = PyUnicode_InternFromString("encoded");
    _restored = PyUnicode_InternFromString("restored");
    _known_name = PyUnicode_InternFromString("known");
    if (!_type_key || !_index_key || !_empty || !_encoded || !_restored || !_known_name)
        return NULL;
    const char *record_keys[] = {"path", "raw", "client", "action"};
    for (int k = 0; k < 4; k++)
        if ((_record_keys[k] = PyUnicode_InternFromString(record_keys[k])) == NULL) return NULL;
    _mapped = PyUnicode_InternFromString("mapped");
    _tag = PyUnicode_InternFromString("-_"); /* codec.TAG */
    if (!_mapped || !_tag) return NULL;
    _lane_name = PyUnicode_InternFromString("lane");
    _lane_failed_name = PyUnicode_InternFromString("lane_failed");
    _changes_name = PyUnicode_InternFromString("changes");
    _problems_name = PyUnicode_InternFromString("problems");
    if (!_lane_name || !_lane_failed_name || !_changes_name || !_problems_name) return NULL;
    if (PyType_Ready(&FeederType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddObjectRef(m, "Feeder", (PyObject *)&FeederType) < 0) Py_CLEAR(m);
    return m;
}
