/* toolid._native: four pure primitives over bytes (the optional accelerator, toolid/native.py).
 *
 * id_spans(document, table) -> list | None
 *   Every id at the table's positions in a JSON object, as toolid.positions.find_ids finds
 *   them in the parsed document, each as (start, end, slot, call, path, holder type, value):
 *   the span of its string literal (quotes included), the position's slot in the table, the
 *   call it belongs to (a tuple of ints), its concrete path ("choices[0].delta.tool_calls[1].id"),
 *   the "type" string of the object holding it (or None) and the string itself. In walk
 *   order: toolid/locate.py sorts them by slot (find_ids' order).
 *
 *   table is (schema, tree, roots, numbered) (toolid/prune.py: TABLES, and the schema's form):
 *   the parse keeps only the members the schema names (the others validated and dropped),
 *   then walks the tree (positions.Tree) over them; roots name the members of the root whose
 *   first int numbers its call, numbered says whether array elements add their own number
 *   (an "index" member that is an int, else their position).
 *
 *   None: not a document this parser vouches for (invalid JSON or UTF-8, a BOM, not an
 *   object, an escape in a kept string or in any key, a key given twice in one object, an
 *   object of more than MAX_KEYS members, a \u escape of a surrogate, NaN or Infinity, an
 *   integer beyond 18 digits where one is kept, nesting deeper than MAX_DEPTH, a path longer
 *   than PATH_SIZE or inside more than MAX_NUMBERS arrays): the caller parses in full, which
 *   decides. It never guesses.
 *
 * event_ids(data, words, limit: int, table) -> (end, rows, unread, groups) | None
 *   The events of data, a piece of an SSE stream starting at an event's start, as
 *   toolid/sse.py's EventFramer.feed_marked frames them with the marker words (a tuple of 1
 *   to MAX_MARKERS non-empty bytes); whole events without a word are skipped. An event holding
 *   one is read when its data is one line of at most limit bytes (toolid/sse_events.py: data_line)
 *   that id_spans vouches for: its rows (offsets into data) are appended to the list rows, in
 *   event order, and an event of more than one row adds (first, count) to groups, where its
 *   rows are in rows. Any other such event adds (start, end, rows before it) to unread.
 *   end: where the complete events end. None: data holds a CR (line endings may not be LF).
 *
 * first_marker(data, words) -> int: where the first of the words (as event_ids takes them)
 *   starts in data, or -1 (toolid/markers.py).
 *
 * splice(document: bytes, edits) -> bytes: the document with each edit (start, end, text:
 *   bytes) of the list or tuple edits, sorted and apart, replacing document[start:end] by
 *   text (toolid/body.py: apply).
 *
 * document and data are bytes, bytearray or memoryview objects (splice: bytes). The arguments
 * are checked before anything is read (TypeError, ValueError); the functions call no Python
 * code, change no object they did not make and keep no state between calls.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h> /* with <limits.h> and <string.h> (the C API's documented includes) */

#define LEAF 0
#define KEEP 1
#define MAX_DEPTH 200     /* nesting of a document, of a schema and of a tree */
#define MAX_KEYS 64       /* members of one object told apart without a hash */
#define MAX_MARKERS 64    /* marker words */
#define SCHEMA_NODES 4096 /* the most nodes a schema's (and a tree's) check visits */
#define PATH_SIZE 4096    /* the longest path, and its terminating byte */
#define MAX_NUMBERS 64    /* the most numbers of a call */
#define ITEM PyTuple_GET_ITEM
#define LEN PyTuple_GET_SIZE
static int reject(PyObject *type, const char *why) { return PyErr_SetString(type, why), 0; }

/* The buffer of a bytes, bytearray or contiguous memoryview object (their buffers are C's: no
 * Python code runs to get or release them): 0, or -1 with an exception. */
static int get_buffer(PyObject *o, Py_buffer *view, const char *what) {
    if (!PyBytes_CheckExact(o) && !PyByteArray_CheckExact(o) && !PyMemoryView_Check(o))
        return PyErr_Format(PyExc_TypeError, "%s must be bytes, bytearray or memoryview", what), -1;
    if (PyMemoryView_Check(o) && !PyBuffer_IsContiguous(PyMemoryView_GET_BUFFER(o), 'C'))
        return PyErr_Format(PyExc_TypeError, "%s must be contiguous", what), -1;
    return PyObject_GetBuffer(o, view, PyBUF_SIMPLE);
}

/* --- the scanner ---------------------------------------------------------------------------- */
typedef struct {
    const unsigned char *start, *p, *end;
    int depth;
    Py_ssize_t literal_start, literal_end; /* the last string literal read */
} Scan;

/* Bytes a string may hold as they are: printable ASCII but '"' and '\\'. */
static inline int plain(unsigned char c) { return c >= 0x20 && c < 0x80 && c != '"' && c != '\\'; }

/* With SSE2 (gcc, clang), strings (most of a body, full of escapes) 16 bytes at a time. */
#if defined(__SSE2__) && (defined(__GNUC__) || defined(__clang__))
#define SIXTEEN_AT_A_TIME
#include <emmintrin.h>
#define MASK(bytes) ((unsigned)_mm_movemask_epi8(bytes)) /* bit k: byte k */
#define BYTES(x, c) _mm_cmpeq_epi8(x, _mm_set1_epi8(c))
#define BELOW(x, c) _mm_cmplt_epi8(x, _mm_set1_epi8(c)) /* signed: 0x80 and up are below too */
#define lowest_bit(mask) __builtin_ctz(mask)
#endif

static void skip_ws(Scan *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t'))
        s->p++;
}

static int expect(Scan *s, unsigned char c) {
    skip_ws(s);
    return s->p < s->end && *s->p == c ? (s->p++, 1) : 0;
}

static int hex(unsigned char c) { return (c >= '0' && c <= '9') || (unsigned)((c | 32) - 'a') < 6; }

/* One UTF-8 sequence at p (a byte >= 0x80) before end, well formed, no surrogate: its end. */
static const unsigned char *utf8(const unsigned char *p, const unsigned char *end) {
    unsigned char c = p[0], lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
    unsigned char hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF; /* no surrogate, <= U+10FFFF */
    int n = c < 0xC2 ? 0 : c < 0xE0 ? 1 : c < 0xF0 ? 2 : c < 0xF5 ? 3 : 0; /* bytes to follow */
    if (n == 0 || end - p <= n || p[1] < lo || p[1] > hi) return NULL;
    for (int i = 2; i <= n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF) return NULL;
    return p + n + 1;
}

static const unsigned char ESCAPED[256] = {/* what a backslash escapes alone */ ['"'] = 1,
    ['\\'] = 1, ['/'] = 1, ['b'] = 1, ['f'] = 1, ['n'] = 1, ['r'] = 1, ['t'] = 1};

/* The byte at *at, which is not plain, inside a string: 1 (go on, *at moved past it), 2 (the
 * string ended: s->p and s->literal_end set) or 0 (not a string this parser vouches for). */
static inline int special(Scan *s, const unsigned char **at, int *escaped) {
    const unsigned char *p = *at, *end = s->end;
    if (*p == '"') return s->p = p + 1, s->literal_end = s->p - s->start, 2;
    if (*p == '\\') {
        *escaped = 1;
        if (end - p < 2) return 0;
        if (p[1] == 'u') { /* \uD800 to \uDFFF, surrogates: the full parse */
            if (end - p < 6 || !hex(p[2]) || !hex(p[3]) || !hex(p[4]) || !hex(p[5])) return 0;
            return (p[2] | 0x20) == 'd' && p[3] >= '8' ? 0 : (*at = p + 6, 1);
        }
        return ESCAPED[p[1]] ? (*at = p + 2, 1) : 0;
    }
    const unsigned char *next = *p >= 0x20 ? utf8(p, end) : NULL;
    return next ? (*at = next, 1) : 0;
}

/* A string literal (s->p at its opening quote): 1 (and *escaped), or 0. 16 bytes at a time,
 * ASCII first: the bytes each escape names are found from the mask of backslashes (simdjson's
 * find_escaped). From a block with \u, a byte not ASCII or below 0x20, or an escape naming
 * nothing, what is not plain is handled in order from one mask, what an escape covers skipped;
 * the last bytes (and every byte, without SSE2) one by one. */
static int string(Scan *s, int *escaped) {
    const unsigned char *p = s->p + 1, *end = s->end;
    s->literal_start = s->p - s->start;
    *escaped = 0;
#ifdef SIXTEEN_AT_A_TIME
    unsigned carry = 0; /* the block's first byte is named by the backslash before it */
    for (; end - p >= 16; p += 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)p), named = _mm_setzero_si128();
        unsigned bs = MASK(BYTES(x, '\\')) & ~carry, quote = MASK(BYTES(x, '"')), names = carry;
        unsigned odd = MASK(BELOW(x, 0x20));
        if (!(bs | quote | odd | carry)) continue;
        unsigned follows = ((bs << 1) | carry) & 0xFFFFu, sum = (bs & ~0x5555u & ~follows) + bs;
        if (bs | carry) {
            for (int i = 0; i < 8; i++) named = _mm_or_si128(named, BYTES(x, "\"\\/bfnrt"[i]));
            names = (0x5555u ^ (sum << 1)) & follows & 0xFFFFu;
            odd |= names & ~MASK(named), quote &= ~names; /* named: ESCAPED's bytes */
        }
        unsigned before = quote ? (quote & (0u - quote)) - 1 : 0xFFFFu;
        if (odd & before) break;
        *escaped |= ((bs | carry) & before) != 0;
        if (quote) return s->p = p + lowest_bit(quote) + 1, s->literal_end = s->p - s->start, 1;
        carry = (sum >> 16) & 1;
    }
    p -= carry; /* from the backslash that names the block's first byte */
#endif
    for (int done;;) {
#ifdef SIXTEEN_AT_A_TIME
        while (end - p >= 16) {
            const unsigned char *block = p;
            __m128i x = _mm_loadu_si128((const __m128i *)p), low = BELOW(x, 0x20);
            __m128i specials = _mm_or_si128(_mm_or_si128(BYTES(x, '"'), BYTES(x, '\\')), low);
            for (unsigned mask = MASK(specials); mask; mask &= mask - 1) {
                const unsigned char *at = block + lowest_bit(mask);
                if (at < p) continue; /* covered by the escape or character before it */
                p = at;
                if ((done = special(s, &p, escaped)) != 1) return done == 2;
            }
            if (p < block + 16) p = block + 16;
        }
#endif
        while (p < end && plain(*p)) p++;
        if (p >= end || (done = special(s, &p, escaped)) != 1) return p < end && done == 2;
    }
}

/* Past the digits at p (at least one), or NULL. */
static const unsigned char *digits(const unsigned char *p, const unsigned char *end) {
    if (p >= end || *p < '0' || *p > '9') return NULL;
    while (p < end && *p >= '0' && *p <= '9') p++;
    return p;
}

/* A number (s->p at its first byte). *integer: no fraction, no exponent. */
static int number(Scan *s, int *integer) {
    const unsigned char *p = s->p + (*s->p == '-'), *end = s->end;
    if (p < end && *p == '0') p++;
    else if ((p = digits(p, end)) == NULL) return 0;
    *integer = 1;
    if (p < end && *p == '.' && (*integer = 0, p = digits(p + 1, end)) == NULL) return 0;
    if (p < end && (*p == 'e' || *p == 'E')) {
        *integer = 0;
        p += p + 1 < end && (p[1] == '+' || p[1] == '-');
        if ((p = digits(p + 1, end)) == NULL) return 0;
    }
    s->p = p;
    return 1;
}

static int word(Scan *s, const char *w, Py_ssize_t n) {
    return s->end - s->p >= n && memcmp(s->p, w, n) == 0 ? (s->p += n, 1) : 0;
}

/* --- the table's check ---------------------------------------------------------------------- */
/* Whether key (an exact str) is bytes[:size] decoded; -1: an error. */
static int same_key(PyObject *key, const char *bytes, Py_ssize_t size) {
    if (PyUnicode_IS_ASCII(key))
        return PyUnicode_GET_LENGTH(key) == size && memcmp(PyUnicode_DATA(key), bytes, size) == 0;
    PyObject *decoded = PyUnicode_DecodeUTF8(bytes, size, "strict");
    int same = decoded ? PyUnicode_Compare(decoded, key) == 0 : -1;
    Py_XDECREF(decoded);
    return PyErr_Occurred() ? -1 : same;
}

/* Whether node is a well-formed schema node (0, with TypeError or ValueError, if not); exact
 * types only (reading them runs no Python code), *budget bounds the nodes visited (shared). */
static int check_schema(PyObject *node, int depth, Py_ssize_t *budget) {
    if (depth > MAX_DEPTH || --*budget < 0)
        return reject(PyExc_ValueError, "schema: too deep or too large");
    if (!PyTuple_CheckExact(node) || LEN(node) != 2 || !PyTuple_CheckExact(ITEM(node, 0)))
        return reject(PyExc_TypeError, "schema: a node is a tuple (members: tuple, elements)");
    for (Py_ssize_t i = 0; i < LEN(ITEM(node, 0)); i++) {
        PyObject *entry = ITEM(ITEM(node, 0), i), *spec;
        int overflow, same;
        long kind;
        if (!PyTuple_CheckExact(entry) || LEN(entry) != 3 || !PyBytes_CheckExact(ITEM(entry, 0)) ||
            !PyUnicode_CheckExact(ITEM(entry, 1)))
            return reject(PyExc_TypeError, "schema: a member is (key: bytes, key: str, spec)");
        if ((same = same_key(ITEM(entry, 1), PyBytes_AS_STRING(ITEM(entry, 0)),
                             PyBytes_GET_SIZE(ITEM(entry, 0)))) <= 0)
            return same < 0 ? 0 : reject(PyExc_ValueError, "schema: a key's str is not its bytes");
        if (!PyLong_CheckExact(spec = ITEM(entry, 2))) {
            if (!check_schema(spec, depth + 1, budget)) return 0;
        } else if ((kind = PyLong_AsLongAndOverflow(spec, &overflow)) != LEAF && kind != KEEP) {
            return reject(PyExc_ValueError, "schema: a spec is LEAF (0), KEEP (1) or a node");
        }
    }
    return ITEM(node, 1) == Py_None || check_schema(ITEM(node, 1), depth + 1, budget);
}

/* Whether names is None or a frozenset of exact strs (then a lookup runs no Python code). */
static int names_ok(PyObject *names) {
    PyObject *items = PyFrozenSet_CheckExact(names) ? PyObject_GetIter(names) : NULL, *item;
    int ok = names == Py_None || items != NULL;
    for (; items && ok && (item = PyIter_Next(items)) != NULL; Py_DECREF(item))
        ok = PyUnicode_CheckExact(item);
    Py_XDECREF(items);
    return ok && !PyErr_Occurred();
}

/* Whether tree is a well-formed positions.Tree (0, with TypeError, if not): (leaves, members,
 * elements) with leaves (member: str, slot: int, role, kind, the slot of calls lacking an id
 * there or None), members (member: str, tree) and
 * elements (types: frozenset | None, needs: frozenset | None, bare: bool, tree). */
static int check_tree(PyObject *tree, int depth, Py_ssize_t *budget) {
    if (depth > MAX_DEPTH || --*budget < 0 || !PyTuple_Check(tree) || LEN(tree) != 3 ||
        !PyTuple_Check(ITEM(tree, 0)) || !PyTuple_Check(ITEM(tree, 1)) ||
        !PyTuple_Check(ITEM(tree, 2)))
        goto bad;
    for (Py_ssize_t i = 0; i < LEN(ITEM(tree, 0)); i++) {
        PyObject *leaf = ITEM(ITEM(tree, 0), i);
        if (!PyTuple_Check(leaf) || LEN(leaf) < 2 || !PyUnicode_CheckExact(ITEM(leaf, 0)) ||
            !PyLong_CheckExact(ITEM(leaf, 1)) ||
            (LEN(leaf) > 4 && ITEM(leaf, 4) != Py_None && !PyLong_CheckExact(ITEM(leaf, 4))))
            goto bad;
    }
    for (Py_ssize_t i = 0; i < LEN(ITEM(tree, 1)); i++) {
        PyObject *entry = ITEM(ITEM(tree, 1), i);
        if (!PyTuple_Check(entry) || LEN(entry) != 2 || !PyUnicode_CheckExact(ITEM(entry, 0)) ||
            !check_tree(ITEM(entry, 1), depth + 1, budget))
            goto bad;
    }
    for (Py_ssize_t i = 0; i < LEN(ITEM(tree, 2)); i++) {
        PyObject *step = ITEM(ITEM(tree, 2), i);
        if (!PyTuple_Check(step) || LEN(step) != 4 || !names_ok(ITEM(step, 0)) ||
            !names_ok(ITEM(step, 1)) || !PyBool_Check(ITEM(step, 2)) ||
            !check_tree(ITEM(step, 3), depth + 1, budget))
            goto bad;
    }
    return 1;
bad:
    return PyErr_Occurred() ? 0 : reject(PyExc_TypeError, "table: a malformed tree");
}

/* Whether table is (schema, tree, roots: tuple of str, numbered: bool) (0 with an exception). */
static int check_table(PyObject *table) {
    if (!PyTuple_CheckExact(table) || LEN(table) != 4 || !PyTuple_CheckExact(ITEM(table, 2)) ||
        !PyBool_Check(ITEM(table, 3)))
        return reject(PyExc_TypeError, "table: (schema, tree, roots: tuple, numbered: bool)");
    if (LEN(ITEM(table, 2)) > MAX_NUMBERS) return reject(PyExc_ValueError, "table: roots");
    for (Py_ssize_t i = 0; i < LEN(ITEM(table, 2)); i++)
        if (!PyUnicode_CheckExact(ITEM(ITEM(table, 2), i)))
            return reject(PyExc_TypeError, "table: roots are strs");
    Py_ssize_t budget = SCHEMA_NODES, tree_budget = SCHEMA_NODES;
    return check_schema(ITEM(table, 0), 0, &budget) && check_tree(ITEM(table, 1), 0, &tree_budget);
}

/* --- the parse: what the schema keeps, as an arena of C nodes ------------------------------- */
/* What a parse keeps of a value (A_NONE: a member or an element of no use to the walk). */
enum { A_NONE, A_INT, A_STR, A_OBJ, A_ARR, A_RAW }; /* A_RAW: null, a boolean or a number */

typedef struct {
    unsigned char kind;
    int first, last, next; /* A_OBJ members, A_ARR elements, in order; -1: none */
    PyObject *name;        /* a member's key (the schema's str, borrowed); NULL in arrays */
    Py_ssize_t start, end; /* A_STR, A_RAW: the literal (quotes included); A_OBJ: its '{' */
    long long integer;     /* A_INT; A_OBJ, A_ARR: how many members or elements it holds */
} Node;

typedef struct { Node *nodes; int count, capacity; } Arena;
#define NOTHING_KEPT (-2) /* a value validated and dropped (-1: not ours, or an error) */

static int new_node(Arena *a, unsigned char kind) {
    if (a->count == a->capacity) {
        int capacity = a->capacity > INT_MAX / 2 ? 0 : a->capacity ? a->capacity * 2 : 32;
        Node *grown = capacity == 0 || (size_t)capacity > PY_SSIZE_T_MAX / sizeof(Node)
                          ? NULL
                          : PyMem_Realloc(a->nodes, (size_t)capacity * sizeof(Node));
        if (grown == NULL) return PyErr_NoMemory(), -1;
        a->nodes = grown;
        a->capacity = capacity;
    }
    a->nodes[a->count] = (Node){.kind = kind, .first = -1, .last = -1, .next = -1};
    return a->count++;
}

/* What is kept of a value of no use read with spec: nothing, or (with a spec) an A_NONE. */
static int dropped(Arena *a, PyObject *spec) { return spec ? new_node(a, A_NONE) : NOTHING_KEPT; }
static int value(Scan *s, PyObject *spec, Arena *a);

/* An id's member holding null, a boolean or a number (read from at to s->p): an A_RAW. */
static int raw(Scan *s, const unsigned char *at, Arena *a) {
    int self = new_node(a, A_RAW);
    if (self >= 0) a->nodes[self].start = at - s->start, a->nodes[self].end = s->p - s->start;
    return self;
}

/* An object or an array (s->p after its '{' or '['; close: '}' or ']'). node: a schema node,
 * or NULL to validate only. Kept: an object's members the node names, an array's every
 * element (its objects as the node's elements say, anything else as A_NONE). */
static int container(Scan *s, PyObject *node, Arena *a, unsigned char close) {
    PyObject *members = node ? ITEM(node, 0) : NULL;
    PyObject *elements = node && ITEM(node, 1) != Py_None ? ITEM(node, 1) : NULL;
    int self = node ? new_node(a, close == '}' ? A_OBJ : A_ARR) : NOTHING_KEPT;
    const unsigned char *keys[MAX_KEYS];
    Py_ssize_t sizes[MAX_KEYS];
    if (self == -1) return -1;
    if (self >= 0) a->nodes[self].start = s->p - s->start - 1;
    skip_ws(s);
    if (s->p < s->end && *s->p == close) return s->p++, self;
    for (int count = 0;; count++) {
        PyObject *spec = NULL, *name = NULL;
        int escaped;
        skip_ws(s);
        if (close == ']' && s->p < s->end && *s->p == '{') spec = elements;
        if (close == '}') {
            if (s->p >= s->end || *s->p != '"' || !string(s, &escaped)) return -1;
            const unsigned char *key = s->start + s->literal_start + 1;
            Py_ssize_t size = s->literal_end - s->literal_start - 2;
            /* A key spelled with escapes, or given twice, in any object: which member a parser
             * sees is the full parse's to say (and what toolid does then, its rewriter's). */
            if (escaped || count == MAX_KEYS) return -1;
            for (int i = 0; i < count; i++)
                if (sizes[i] == size && memcmp(keys[i], key, size) == 0) return -1;
            keys[count] = key, sizes[count] = size;
            for (Py_ssize_t i = 0; members && !spec && i < LEN(members); i++) {
                PyObject *entry = ITEM(members, i), *raw = ITEM(entry, 0);
                if (PyBytes_GET_SIZE(raw) == size && memcmp(PyBytes_AS_STRING(raw), key, size) == 0)
                    name = ITEM(entry, 1), spec = ITEM(entry, 2);
            }
            if (!expect(s, ':')) return -1;
            skip_ws(s);
        }
        int item = value(s, spec, a);
        if (item == NOTHING_KEPT && close == ']') item = dropped(a, node);
        if (item == -1) return -1;
        if (item >= 0) { /* kept: the node's last child */
            Node *parent = &a->nodes[self];
            a->nodes[item].name = name;
            *(parent->last < 0 ? &parent->first : &a->nodes[parent->last].next) = item;
            parent->last = item;
        }
        skip_ws(s);
        if (s->p >= s->end || (*s->p != ',' && *s->p != close)) return -1;
        if (self >= 0) a->nodes[self].integer = count + 1; /* A_OBJ, A_ARR: how many it holds */
        if (*s->p++ == close) return self;
    }
}

/* Any value (s->p at its first byte), spec NULL (validate only), LEAF, KEEP or a node: its node
 * (always one with a spec), NOTHING_KEPT (no spec) or -1 (not ours, or an error: an exception). */
static int value(Scan *s, PyObject *spec, Arena *a) {
    if (s->p >= s->end) return -1;
    int kind = spec && PyLong_Check(spec) ? (int)PyLong_AsLong(spec) : -1, self, integer, escaped;
    unsigned char c = *s->p;
    if (c == '{' || c == '[') { /* kind < 0: spec is a node, or NULL */
        if (++s->depth > MAX_DEPTH) return -1;
        s->p++;
        int read = container(s, kind < 0 ? spec : NULL, a, c == '{' ? '}' : ']');
        s->depth--;
        return read == NOTHING_KEPT ? dropped(a, spec) : read;
    }
    if (c == '"') {
        if (!string(s, &escaped)) return -1;
        if (kind < 0) return dropped(a, spec);
        if (escaped || (self = new_node(a, A_STR)) < 0) return -1; /* escapes: the full parse */
        a->nodes[self].start = s->literal_start;
        a->nodes[self].end = s->literal_end;
        return self;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        const unsigned char *at = s->p, *d = at + (*at == '-');
        if (!number(s, &integer)) return -1;
        if (kind == LEAF) return raw(s, at, a);
        if (kind != KEEP || !integer) return dropped(a, spec);
        if (s->p - d > 18) return -1; /* parsers differ beyond 64 bits: the full parse */
        long long number = 0;         /* at most 18 digits: no overflow */
        for (; d < s->p; d++) number = number * 10 + (*d - '0');
        if ((self = new_node(a, A_INT)) < 0) return -1;
        a->nodes[self].integer = *at == '-' ? -number : number;
        return self;
    }
    const unsigned char *at = s->p;
    if (word(s, "true", 4) || word(s, "false", 5) || word(s, "null", 4))
        return kind == LEAF ? raw(s, at, a) : dropped(a, spec);
    return -1;
}

/* --- id_spans: the table's tree walked over what the parse kept ----------------------------- */
/* The strings and the call of the rows made so far in one call: a stream names a call's id,
 * path and type in event after event, and a row takes the objects of an equal one before. */
#define MEMO_SIZE 16
typedef struct { PyObject *text[MEMO_SIZE], *call; unsigned next; } Memo; /* text: ASCII strs */

static void memo_clear(Memo *m) {
    for (int i = 0; i < MEMO_SIZE; i++) Py_CLEAR(m->text[i]);
    Py_CLEAR(m->call);
}

/* The str of the UTF-8 text[:size] (a new reference, or NULL): the memo's if it holds one. */
static PyObject *memo_str(Memo *m, const char *text, Py_ssize_t size) {
    for (int i = 0; i < MEMO_SIZE; i++)
        if (m->text[i] && PyUnicode_GET_LENGTH(m->text[i]) == size &&
            memcmp(PyUnicode_DATA(m->text[i]), text, size) == 0)
            return Py_NewRef(m->text[i]);
    PyObject *made = PyUnicode_DecodeUTF8(text, size, NULL);
    if (made && PyUnicode_IS_COMPACT_ASCII(made))
        Py_XSETREF(m->text[m->next++ % MEMO_SIZE], Py_NewRef(made));
    return made;
}

/* Where a walk stands: its path so far (as positions.Found.path spells it) and the numbers of
 * the calls it is inside (positions.Tree: numbered elements add their own). */
typedef struct {
    const Arena *arena;
    const unsigned char *buffer;
    int numbered, count;
    char path[PATH_SIZE];
    Py_ssize_t size;
    long long numbers[MAX_NUMBERS];
    PyObject *found; /* a list of (start, end, slot, call, path, holder type, value) */
    Memo *memo;
} Walk;

/* Add text[:size] to the path: 1, or 0 (too long: not vouched; the caller restores it). */
static int push(Walk *w, const char *text, Py_ssize_t size) {
    if (w->size + size >= PATH_SIZE) return 0;
    memcpy(w->path + w->size, text, size);
    return w->size += size, 1;
}

/* Add ".key" (or "key" first) to the path: 1, 0 (too long) or -1 (an error). */
static int push_key(Walk *w, PyObject *key) {
    Py_ssize_t size;
    const char *text = PyUnicode_AsUTF8AndSize(key, &size);
    return text == NULL ? -1 : (w->size == 0 || push(w, ".", 1)) && push(w, text, size);
}

/* Add "[index]" (index >= 0; no snprintf: it cost a twentieth) and, numbered, the element's
 * number: 1, or 0 (too long, too deep). */
static int push_index(Walk *w, Py_ssize_t index, long long number) {
    char text[24], *at = text + sizeof text;
    *--at = ']';
    do *--at = (char)('0' + index % 10); while ((index /= 10) > 0);
    *--at = '[';
    if (w->numbered && w->count >= MAX_NUMBERS) return 0;
    if (w->numbered) w->numbers[w->count++] = number;
    return push(w, at, text + sizeof text - at);
}

/* The child of an object named key (an exact str), or name (ASCII) when key is NULL; or -1. */
static int member(const Arena *a, int object, PyObject *key, const char *name) {
    for (int child = a->nodes[object].first; child >= 0; child = a->nodes[child].next) {
        PyObject *held = a->nodes[child].name;
        if (key ? held == key || PyUnicode_Compare(held, key) == 0
                : PyUnicode_CompareWithASCIIString(held, name) == 0)
            return child;
    }
    return -1;
}

/* The string of an object's member "type" (a new reference), or NULL (none, or an error). */
static PyObject *type_of(Walk *w, int object) {
    int kind = member(w->arena, object, NULL, "type");
    const Node *n = kind >= 0 ? &w->arena->nodes[kind] : NULL; /* no escapes: the parse vouched */
    if (n == NULL || n->kind != A_STR) return NULL;
    return memo_str(w->memo, (const char *)w->buffer + n->start + 1, n->end - n->start - 2);
}

/* The tuple of the call's numbers (a new reference, or NULL): the memo's if equal. */
static PyObject *call_of(Walk *w) {
    PyObject *call = w->memo->call;
    int same = call != NULL && LEN(call) == w->count;
    for (int i = 0; same && i < w->count; i++)
        same = PyLong_AsLongLong(ITEM(call, i)) == w->numbers[i];
    if (same) return Py_NewRef(call);
    if ((call = PyTuple_New(w->count)) == NULL) return NULL;
    for (int i = 0; i < w->count; i++) {
        PyObject *number = PyLong_FromLongLong(w->numbers[i]);
        if (number == NULL) return Py_DECREF(call), NULL;
        PyTuple_SET_ITEM(call, i, number);
    }
    Py_XSETREF(w->memo->call, Py_NewRef(call));
    return call;
}

/* Record the id in the string node value, member key of object holder, at slot: its row, each
 * item put in as made (item NULL: something failed; the row's dealloc takes what is in it).
 * A call lacking an id: value an A_RAW (its text, its span) or -1 (missing: "", and the empty
 * span right after the holder's '{'). */
#define PUT(t, i, made) do { if (item && (item = (made))) PyTuple_SET_ITEM(t, i, item); } while (0)
static int found(Walk *w, int holder, int value, PyObject *key, PyObject *slot) {
    Py_ssize_t saved = w->size;
    int pushed = push_key(w, key);
    if (pushed <= 0) return pushed;
    const Node *holding = &w->arena->nodes[holder];
    Node missing = {.kind = A_RAW, .start = holding->start + 1, .end = holding->start + 1};
    const Node *n = value >= 0 ? &w->arena->nodes[value] : &missing;
    int quoted = n->kind == A_STR; /* no escapes in a string: the parse vouched */
    const char *text = (const char *)w->buffer + n->start + quoted;
    PyObject *row = PyTuple_New(7), *call = row ? call_of(w) : NULL, *item = call;
    if (call) PyTuple_SET_ITEM(row, 3, call);
    if (item && (item = type_of(w, holder)) == NULL && !PyErr_Occurred()) item = Py_NewRef(Py_None);
    if (item) PyTuple_SET_ITEM(row, 5, item);
    PUT(row, 0, PyLong_FromSsize_t(n->start));
    PUT(row, 1, PyLong_FromSsize_t(n->end));
    PUT(row, 4, memo_str(w->memo, w->path, w->size));
    PUT(row, 6, memo_str(w->memo, text, n->end - n->start - 2 * quoted));
    if (item) PyTuple_SET_ITEM(row, 2, Py_NewRef(slot));
    w->size = saved;
    int appended = item ? PyList_Append(w->found, row) : -1;
    Py_XDECREF(row);
    return appended == 0 ? 1 : -1;
}

/* Whether an element goes on (positions.Tree.elements: types, needs, bare): 1, 0 or -1. */
static int admits(Walk *w, int element, PyObject *step) {
    const Arena *a = w->arena;
    if (ITEM(step, 2) == Py_True) return 1;
    if (a->nodes[element].kind != A_OBJ) return 0;
    if (ITEM(step, 1) != Py_None) { /* one of the element's members among the names it needs */
        int any = 0;
        for (int child = a->nodes[element].first; !any && child >= 0; child = a->nodes[child].next)
            any = PySet_Contains(ITEM(step, 1), a->nodes[child].name);
        if (any <= 0) return any;
    }
    if (ITEM(step, 0) == Py_None) return 1;
    PyObject *text = type_of(w, element);
    int admitted = text ? PySet_Contains(ITEM(step, 0), text) : PyErr_Occurred() ? -1 : 0;
    Py_XDECREF(text);
    return admitted;
}

/* The walk of tree from node, as positions.find_ids's generated walker walks it: 1, 0 (not
 * vouched: a path too long or too deep) or -1 (an error). Finds come out per slot later. */
static int walk(Walk *w, int node, PyObject *tree) {
    const Arena *a = w->arena;
    PyObject *leaves = ITEM(tree, 0), *members = ITEM(tree, 1), *elements = ITEM(tree, 2);
    int done = 1;
    for (Py_ssize_t i = 0; a->nodes[node].kind == A_OBJ && done > 0 && i < LEN(leaves); i++) {
        PyObject *leaf = ITEM(leaves, i), *lacks = LEN(leaf) > 4 ? ITEM(leaf, 4) : Py_None;
        int value = member(a, node, ITEM(leaf, 0), NULL);
        if (value >= 0 && a->nodes[value].kind == A_STR)
            done = found(w, node, value, ITEM(leaf, 0), ITEM(leaf, 1));
        else if (lacks != Py_None && (value >= 0 ? a->nodes[value].kind == A_RAW
                                                  : a->nodes[node].integer > 0)) /* not {} */
            done = found(w, node, value, ITEM(leaf, 0), lacks);
    }
    for (Py_ssize_t i = 0; a->nodes[node].kind == A_OBJ && done > 0 && i < LEN(members); i++) {
        PyObject *key = ITEM(ITEM(members, i), 0);
        int child = member(a, node, key, NULL);
        Py_ssize_t saved = w->size;
        if (child < 0 || a->nodes[child].kind == A_NONE) continue;
        if ((done = push_key(w, key)) > 0) done = walk(w, child, ITEM(ITEM(members, i), 1));
        w->size = saved;
    }
    for (Py_ssize_t i = 0; done > 0 && i < LEN(elements); i++) {
        PyObject *step = ITEM(elements, i), *inside = ITEM(step, 3);
        if (a->nodes[node].kind != A_ARR) { /* an object is its own one element, unnumbered */
            done = admits(w, node, step);
            done = done > 0 ? walk(w, node, inside) : done == 0 ? 1 : -1;
            continue;
        }
        Py_ssize_t index = 0;
        for (int element = a->nodes[node].first; done > 0 && element >= 0;
             element = a->nodes[element].next, index++) {
            if ((done = admits(w, element, step)) <= 0) {
                done = done < 0 ? -1 : 1;
                continue;
            }
            int own = a->nodes[element].kind == A_OBJ ? member(a, element, NULL, "index") : -1;
            long long number = own >= 0 && a->nodes[own].kind == A_INT ? a->nodes[own].integer
                                                                        : (long long)index;
            Py_ssize_t saved = w->size;
            int count = w->count;
            if ((done = push_index(w, index, number)) > 0) done = walk(w, element, inside);
            w->size = saved;
            w->count = count;
        }
    }
    return done;
}

/* Append the ids of the JSON object b[start:end] (the table checked; nodes in a) to the list
 * into: 1, 0 (not vouched for: nothing appended) or -1 (an error). */
static int ids_of(const unsigned char *b, Py_ssize_t start, Py_ssize_t end, PyObject *table,
                  Arena *a, Memo *memo, PyObject *into) {
    Scan s = {b, b + start, b + end, 1, 0, 0};
    Walk w;
    PyObject *roots = ITEM(table, 2);
    a->count = 0; /* the caller's arena (its memory reused from call to call), emptied */
    int vouched = expect(&s, '{') && container(&s, ITEM(table, 0), a, '}') == 0;
    if (vouched) skip_ws(&s);
    if (PyErr_Occurred()) return -1;
    if (!vouched || s.p != s.end) return 0;
    Py_ssize_t before = PyList_GET_SIZE(into);
    w.arena = a, w.buffer = b, w.size = 0, w.count = 0, w.memo = memo, w.found = into;
    w.numbered = ITEM(table, 3) == Py_True;
    for (Py_ssize_t i = 0; i < LEN(roots) && w.count == 0; i++) { /* an event's call */
        int root = member(a, 0, ITEM(roots, i), NULL);
        if (root >= 0 && a->nodes[root].kind == A_INT)
            w.numbers[w.count++] = a->nodes[root].integer;
    }
    int walked = walk(&w, 0, ITEM(table, 1));
    if (walked == 0 && PyList_SetSlice(into, before, PyList_GET_SIZE(into), NULL) < 0) return -1;
    return walked;
}

static PyObject *id_spans(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer view;
    if (nargs != 2) return reject(PyExc_TypeError, "id_spans(document, table)"), NULL;
    if (!check_table(args[1]) || get_buffer(args[0], &view, "document") < 0) return NULL;
    Arena a = {NULL, 0, 0};
    Memo memo = {{NULL}, NULL, 0};
    PyObject *result = PyList_New(0);
    int vouched = result ? ids_of(view.buf, 0, view.len, args[1], &a, &memo, result) : -1;
    if (vouched <= 0) Py_XSETREF(result, vouched == 0 ? Py_NewRef(Py_None) : NULL);
    memo_clear(&memo);
    PyMem_Free(a.nodes);
    PyBuffer_Release(&view);
    return result;
}

/* --- the marker words: first_marker, and event_ids' search -------------------------------- */
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

/* The words, searched for in groups: the words of a group share their first `shortest` bytes
 * (the shortest word's size, at most 8), and the group's stem (the prefix all its words share)
 * is searched for once, its words tested where it is found and followed by a byte that follows
 * the stem in one of them (after: a bit per byte value; all, when the stem is a word). What
 * each group's search found is kept (next, found): a later search from further on does not
 * search those bytes again. */
typedef struct {
    const unsigned char *words[MAX_MARKERS];
    Py_ssize_t sizes[MAX_MARKERS], stems[MAX_MARKERS], next[MAX_MARKERS];
    int group_of[MAX_MARKERS], first[MAX_MARKERS], found[MAX_MARKERS], count, groups;
    unsigned char after[MAX_MARKERS][32];
} Words;

/* 1, or 0 with TypeError. */
static int words_from(Words *m, PyObject *words) {
    Py_ssize_t shortest = 8;
    int ok = PyTuple_CheckExact(words) && LEN(words) >= 1 && LEN(words) <= MAX_MARKERS;
    m->count = ok ? (int)LEN(words) : 0, m->groups = 0;
    for (int i = 0; ok && i < m->count; i++) {
        PyObject *word = ITEM(words, i);
        if (!(ok = PyBytes_CheckExact(word) && PyBytes_GET_SIZE(word) >= 1)) break;
        m->words[i] = (const unsigned char *)PyBytes_AS_STRING(word);
        if ((m->sizes[i] = PyBytes_GET_SIZE(word)) < shortest) shortest = m->sizes[i];
    }
    if (!ok) return reject(PyExc_TypeError, "words: a tuple of 1 to 64 non-empty bytes");
    for (int i = 0, g; i < m->count; i++) {
        for (g = 0; g < m->groups && memcmp(m->words[m->first[g]], m->words[i], shortest); g++) {}
        if (g == m->groups) /* a new group */
            m->first[g] = i, m->stems[g] = m->sizes[i], m->next[g] = -1, m->groups++;
        Py_ssize_t common = 0; /* at least shortest */
        while (common < m->stems[g] && common < m->sizes[i] &&
               m->words[i][common] == m->words[m->first[g]][common])
            common++;
        m->stems[g] = common, m->group_of[i] = g;
    }
    memset(m->after, 0, sizeof(m->after[0]) * m->groups);
    for (int i = 0; i < m->count; i++) {
        unsigned char *after = m->after[m->group_of[i]], next;
        Py_ssize_t stem = m->stems[m->group_of[i]];
        if (m->sizes[i] == stem) memset(after, 0xff, sizeof(m->after[0]));
        else next = m->words[i][stem], after[next >> 3] |= (unsigned char)(1u << (next & 7));
    }
    return 1;
}

/* Where the first word of group g at or after from starts in b[:n] if before `before`, else
 * -1. from never decreases from one call to the next: no hit of the group starts in
 * [from, next[g]) when next[g] >= from, and found[g] says whether one starts at next[g]. */
static Py_ssize_t group_hit(Words *m, int g, const unsigned char *b, Py_ssize_t n,
                            Py_ssize_t from, Py_ssize_t before) {
    if (m->next[g] >= from) {
        if (m->found[g] || m->next[g] >= before)
            return m->found[g] && m->next[g] < before ? m->next[g] : -1;
        from = m->next[g];
    }
    const unsigned char *stem = m->words[m->first[g]], *at;
    Py_ssize_t size = m->stems[g], stop = before <= n - size ? before + size - 1 : n;
    for (; (at = find_word(b + from, stop - from, stem, size)) != NULL; from = at - b + 1) {
        const unsigned char *next = at + size; /* no word of g goes on with it: not a hit */
        if (next < b + n && !(m->after[g][*next >> 3] >> (*next & 7) & 1)) continue;
        for (int i = 0; i < m->count; i++)
            if (m->group_of[i] == g && m->sizes[i] <= n - (at - b) &&
                memcmp(at, m->words[i], m->sizes[i]) == 0)
                return m->found[g] = 1, m->next[g] = at - b;
    }
    m->found[g] = 0;
    return m->next[g] = before, -1;
}

/* Where the first word at or after from starts in b[:n], or -1 (from never decreases). */
static Py_ssize_t next_hit(Words *m, const unsigned char *b, Py_ssize_t from, Py_ssize_t n) {
    Py_ssize_t best = n, hit; /* only hits before the best so far are searched for */
    for (int g = 0; g < m->groups; g++)
        if ((hit = group_hit(m, g, b, n, from, best)) >= 0) best = hit;
    return best < n ? best : -1;
}

static PyObject *first_marker(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs) {
    Words m;
    Py_buffer view;
    if (nargs != 2) return reject(PyExc_TypeError, "first_marker(data, words)"), NULL;
    if (!words_from(&m, args[1]) || get_buffer(args[0], &view, "data") < 0) return NULL;
    Py_ssize_t hit = next_hit(&m, view.buf, 0, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(hit);
}

/* --- event_ids: the events of an SSE stream with LF line endings, and their ids ------------ */
/* Where the first "\n\n" (an event's end) starts in [p, end), or NULL: most events' first LF. */
static const unsigned char *blank_line(const unsigned char *p, const unsigned char *end) {
    while ((p = memchr(p, '\n', end - p)) != NULL && end - p >= 2 && p[1] != '\n') p++;
    return p != NULL && end - p >= 2 ? p : NULL;
}

/* Where the data of the event [line, last + 2) starts, or -1 (toolid/sse_events.py: data_line). */
static Py_ssize_t data_line(const unsigned char *b, Py_ssize_t line, Py_ssize_t last) {
    for (const unsigned char *lf; (lf = memchr(b + line, '\n', last - line)); line = lf - b + 1)
        if (lf - (b + line) >= 4 && memcmp(b + line, "data", 4) == 0) return -1;
    return last - line >= 6 && memcmp(b + line, "data: ", 6) == 0 ? line + 6 : -1;
}

/* Whether item (a new reference, or NULL) was appended to list; its reference is given up. */
static int appended(PyObject *list, PyObject *item) {
    int done = item != NULL && PyList_Append(list, item) == 0;
    Py_XDECREF(item);
    return done;
}

static PyObject *event_ids(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    Words m;
    Py_buffer view;
    int overflow;
    if (nargs != 4 || !PyLong_CheckExact(args[2]))
        return reject(PyExc_TypeError, "event_ids(data, words, limit: int, table)"), NULL;
    long long limit = PyLong_AsLongLongAndOverflow(args[2], &overflow);
    if (overflow < 0 || (!overflow && limit < 0)) return reject(PyExc_ValueError, "limit"), NULL;
    if (overflow > 0) limit = LLONG_MAX;
    if (!words_from(&m, args[1]) || !check_table(args[3]) || get_buffer(args[0], &view, "data") < 0)
        return NULL;
    const unsigned char *b = view.buf;
    Py_ssize_t n = view.len, start = 0;
    Arena a = {NULL, 0, 0}; /* the nodes of each event's parse, reused */
    Memo memo = {{NULL}, NULL, 0};
    PyObject *rows = PyList_New(0), *unread = PyList_New(0), *groups = PyList_New(0);
    int read = !(rows && unread && groups) ? -1 : memchr(b, '\r', n) ? 0 : 1; /* on, a CR, failed */
    while (read == 1) {
        Py_ssize_t hit = next_hit(&m, b, start, n), blank = (hit < 0 ? n : hit) - 2;
        while (blank >= start && (b[blank] != '\n' || b[blank + 1] != '\n')) blank--;
        if (blank >= start) { /* whole events without a marker: a run of k LFs ends k / 2 */
            Py_ssize_t first = blank;
            while (first > start && b[first - 1] == '\n') first--;
            start = first + (blank + 2 - first) / 2 * 2;
        }
        const unsigned char *ends = hit < 0 ? NULL : blank_line(b + start, b + n);
        if (ends == NULL) break;
        Py_ssize_t end = ends - b + 2, before = PyList_GET_SIZE(rows); /* [start, end): marked */
        Py_ssize_t at = end - start <= limit ? data_line(b, start, end - 2) : -1;
        int vouched = at >= 0 ? ids_of(b, at, end - 2, args[3], &a, &memo, rows) : 0;
        Py_ssize_t count = PyList_GET_SIZE(rows) - before;
        if (vouched < 0 ||
            (vouched == 0 && !appended(unread, Py_BuildValue("(nnn)", start, end, before))) ||
            (count > 1 && !appended(groups, Py_BuildValue("(nn)", before, count))))
            read = -1;
        start = end;
    }
    PyObject *result = read < 0    ? NULL
                       : read == 0 ? Py_NewRef(Py_None) /* a CR: not this function's */
                                   : Py_BuildValue("(nOOO)", start, rows, unread, groups);
    Py_XDECREF(rows), Py_XDECREF(unread), Py_XDECREF(groups);
    memo_clear(&memo);
    PyMem_Free(a.nodes);
    PyBuffer_Release(&view);
    return result;
}

/* --- splice --------------------------------------------------------------------------------- */
/* An edit's offset: an int (no __index__ is called) in [0, size], or -1 with an exception. */
static Py_ssize_t offset(PyObject *number, Py_ssize_t size) {
    int overflow = 0;
    long long at = PyLong_Check(number) ? PyLong_AsLongLongAndOverflow(number, &overflow) : -1;
    if (!PyLong_Check(number)) reject(PyExc_TypeError, "an edit's start and end are ints");
    else if (overflow || at < 0 || at > size)
        reject(PyExc_ValueError, "an edit is outside the document");
    return PyErr_Occurred() ? -1 : (Py_ssize_t)at;
}

static PyObject *splice(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyBytes_Check(args[0]) ||
        !(PyList_CheckExact(args[1]) || PyTuple_CheckExact(args[1])))
        return reject(PyExc_TypeError, "splice(document: bytes, edits: list | tuple)"), NULL;
    PyObject *edits = args[1], *result;
    const char *document = PyBytes_AS_STRING(args[0]);
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]), count = PySequence_Fast_GET_SIZE(edits);
    Py_ssize_t total = size, at = 0;
    for (Py_ssize_t i = 0; i < count; i++) { /* check everything before writing anything */
        PyObject *edit = PySequence_Fast_GET_ITEM(edits, i);
        if (!PyTuple_Check(edit) || LEN(edit) != 3 || !PyBytes_Check(ITEM(edit, 2)))
            return reject(PyExc_TypeError, "an edit is (start: int, end: int, text: bytes)"), NULL;
        Py_ssize_t start = offset(ITEM(edit, 0), size);
        Py_ssize_t end = start < 0 ? -1 : offset(ITEM(edit, 1), size);
        if (end < 0) return NULL;
        if (start < at || end < start)
            return reject(PyExc_ValueError, "edits must be sorted and apart"), NULL;
        /* total >= end - start here: total - (end - start) >= 0, and text is added to it */
        if (PyBytes_GET_SIZE(ITEM(edit, 2)) > PY_SSIZE_T_MAX - (total - (end - start)))
            return reject(PyExc_ValueError, "the spliced document would be too large"), NULL;
        total += PyBytes_GET_SIZE(ITEM(edit, 2)) - (end - start);
        at = end;
    }
    /* Nothing from the check to the end runs Python code (a bytes object is not tracked by
     * the garbage collector): the edits are as checked. */
    if ((result = PyBytes_FromStringAndSize(NULL, total)) == NULL) return NULL;
    char *out = PyBytes_AS_STRING(result);
    at = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *edit = PySequence_Fast_GET_ITEM(edits, i), *text = ITEM(edit, 2);
        Py_ssize_t start = PyLong_AsSsize_t(ITEM(edit, 0));
        memcpy(out, document + at, start - at);
        memcpy(out += start - at, PyBytes_AS_STRING(text), PyBytes_GET_SIZE(text));
        out += PyBytes_GET_SIZE(text);
        at = PyLong_AsSsize_t(ITEM(edit, 1));
    }
    memcpy(out, document + at, size - at);
    return result;
}

/* --- the module ----------------------------------------------------------------------------- */
#define METHOD(name, doc) {#name, (PyCFunction)(void (*)(void))name, METH_FASTCALL, doc}
static PyMethodDef methods[] = {
    METHOD(id_spans, "id_spans(document, table) -> list | None: see toolid/prune.py."),
    METHOD(event_ids, "event_ids(data, words, limit, table) -> (end, rows, unread, groups) | None: "
                      "see toolid/sse_events.py."),
    METHOD(first_marker, "first_marker(data, words) -> int: see toolid/markers.py."),
    METHOD(splice, "splice(document, edits) -> bytes: see toolid/body.py (apply)."),
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot slots[] = {
#ifdef Py_mod_multiple_interpreters
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
    {0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "toolid._native", .m_methods = methods, .m_slots = slots,
    .m_doc = "Pure primitives over bytes: id_spans, event_ids, first_marker, splice (native.py)."};

PyMODINIT_FUNC PyInit__native(void) { return PyModuleDef_Init(&module); }
