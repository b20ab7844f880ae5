/* A libFuzzer target for toolid/_native.c, built with AddressSanitizer and
 * UndefinedBehaviorSanitizer by tests/fuzz/native_fuzz.py (which documents how to run it).
 *
 * The extension's source is compiled into this program (so it is instrumented with it) and
 * its module is loaded into an embedded interpreter whose objects live in malloc's heap
 * (PYMEM_ALLOCATOR_MALLOC: ASan sees every object's bounds). TOOLID_FUZZ_TARGET picks the
 * primitive each input goes to:
 *
 * id_spans     byte 0 picks the table (below 0x80 one of toolid.prune.TABLES, to 0xF0 one's
 *              schema with another's tree, else one built by table_of from the next 64 bytes,
 *              well formed or not), the rest is the document, given as a memoryview of
 *              libFuzzer's own buffer (a read past it is caught). It must give None or ids
 *              (with a real table: find_ids' ids, each span its literal or, for a call
 *              lacking an id, what it holds: check_spans), or (for a built table only)
 *              TypeError or ValueError.
 * event_ids    a table as above (an event's), a byte for the words (an API's markers, or
 *              words spelled out), two bytes of limit (see event_args), the rest is the data
 *              (a view). The answer must be EventFramer.feed_marked's framing, the rows of each
 *              marked one-data-line event id_spans' of its data (the others unread), or None
 *              when the data holds a CR (check_events); wrong words or limits must give
 *              TypeError or ValueError, and a built table may.
 * first_marker byte 0 is the number of words, each word a size byte and its bytes, the rest
 *              is the data (a view, as above); the answer must be a naive search's, and words
 *              that are not 1 to 64 non-empty bytes must give TypeError or ValueError.
 * splice       edits built from the bytes, some of the wrong type or shape, out of range or out
 *              of order; the answer must be the naive splice's, or TypeError or ValueError
 *              exactly when an edit is wrong.
 * canary-asan, canary-ubsan
 *              a deliberate heap overflow, a deliberate signed overflow: the runner checks that
 *              each is reported, which proves the sanitizers are in the program.
 *
 * A wrong answer prints what was expected and aborts (libFuzzer then saves the input).
 */
#include "../../toolid/_native.c"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "detect_leaks=0:abort_on_error=0"; }
const char *__ubsan_default_options(void);
const char *__ubsan_default_options(void) { return "halt_on_error=1:print_stacktrace=1"; }

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { ID_SPANS, EVENT_IDS, FIRST_MARKER, SPLICE };
static int target;
static PyObject *table_of, *event_args, *check_spans, *check_events; /* from HELPERS */

/* Python helpers: toolid's pure-Python twins (TOOLID_NATIVE is off). */
static const char HELPERS[] =
    "import functools, json, os, sys\n"
    "os.environ['TOOLID_NATIVE'] = 'off'\n"
    "sys.path[:0] = [os.environ['TOOLID_ROOT'], *os.environ['TOOLID_SITE'].split(os.pathsep)]\n"
    "from operator import itemgetter\n"
    "from toolid.body import id_markers\n"
    "from toolid.sse_events import data_line\n"
    "from toolid.markers import Markers\n"
    "from toolid.positions import LABELS, LACKS, TYPE, find_ids, positions\n"
    "from toolid.value_spans import value_span\n"
    "from toolid.prune import TABLES\n"
    "from toolid.sse import EventFramer\n"
    "KEYS = sorted(TABLES, key=str)\n"
    "EVENTS = [i for i, key in enumerate(KEYS) if key[1] == 'event']\n"
    "NAMES = [b'id', b'type', b'index', b'tool_calls', b'messages', b'content', b'\\xc3\\xa9', b'call_id']\n"
    "class Str(str): pass\n"
    "markers_of = functools.lru_cache(maxsize=256)(Markers)\n"
    "def reader(data):\n"
    "    at = [0]\n"
    "    def byte():\n"
    "        at[0] += 1\n"
    "        return data[at[0] - 1] if at[0] <= len(data) else 0\n"
    "    return byte\n"
    "def schema_from(byte):\n"
    "    def spec(depth):\n"
    "        b = byte()\n"
    "        if b < 96 or depth > 6: return (0, 1, 2, -1, True, 2**80, None, 0.0)[b % 8]\n"
    "        return node(depth + 1)\n"
    "    def member(depth):\n"
    "        raw = NAMES[byte() % len(NAMES)]\n"
    "        shape = byte() % 16\n"
    "        text = (raw.decode(), Str(raw.decode()), 'x', raw, '\\ud800')[shape % 5 if shape > 10 else 0]\n"
    "        entry = (raw if shape != 7 else bytearray(raw), text, spec(depth))\n"
    "        return entry[:2] if shape == 8 else list(entry) if shape == 9 else entry\n"
    "    def node(depth):\n"
    "        shape = byte() % 20\n"
    "        members = tuple(member(depth) for _ in range(byte() % 5))\n"
    "        elements = node(depth + 1) if byte() % 3 == 0 and depth < 6 else None\n"
    "        if shape == 0: return [members, elements]\n"
    "        if shape == 1: return (members,)\n"
    "        if shape == 2: return (list(members), elements)\n"
    "        if shape == 3: return (members, elements, None)\n"
    "        if shape == 4: return (members, 0)\n"
    "        return (members, elements)\n"
    "    return node(0)\n"
    "def tree_from(byte):\n"
    "    names = [name.decode() for name in NAMES]\n"
    "    def leaf():\n"
    "        b, shape = byte(), byte()\n"
    "        name = names[b % len(names)]\n"
    "        return ((name, b % 4), (name,), (b'id', 0), (Str(name), 0), (name, 0.0))[0 if shape < 0xE0 else shape % 5]\n"
    "    def step(depth):\n"
    "        b = byte()\n"
    "        sets = (None, frozenset(['function_call', 'tool_use']), frozenset(names[:b % 4]), frozenset([1]), {'id'}, 'x')\n"
    "        types, needs = sets[b % 6 if b >= 0xE0 else b % 3], sets[byte() % 3]\n"
    "        bare = (False, True, 1)[byte() % 3 if b >= 0xE0 else b % 2]\n"
    "        whole = (types, needs, bare, tree(depth + 1))\n"
    "        return whole if byte() < 0xF0 else whole[:3]\n"
    "    def tree(depth):\n"
    "        shape = byte() % 24\n"
    "        leaves = tuple(leaf() for _ in range(byte() % 3))\n"
    "        members = tuple((names[byte() % len(names)], tree(depth + 1)) for _ in range(byte() % 3 if depth < 5 else 0))\n"
    "        if shape == 3: members = (('id',),)\n"
    "        elements = tuple(step(depth) for _ in range(byte() % 2 if depth < 5 else 0))\n"
    "        if shape == 0: return [leaves, members, elements]\n"
    "        if shape == 1: return (leaves, members)\n"
    "        if shape == 2: return (list(leaves), members, elements)\n"
    "        return (leaves, members, elements)\n"
    "    return tree(0)\n"
    "# (bytes read, table, its index in KEYS if a real one) from data's first bytes: below 0x80 a\n"
    "# real table, to 0xF0 one's schema with another's tree, else one built from the next 64 bytes.\n"
    "def table_of(data, events):\n"
    "    keys = EVENTS if events else range(len(KEYS))\n"
    "    first = data[0]\n"
    "    if first < 0x80:\n"
    "        index = keys[first % len(keys)]\n"
    "        return 1, TABLES[KEYS[index]], index\n"
    "    if first < 0xF0:\n"
    "        schema, tree = TABLES[KEYS[first % 9]], TABLES[KEYS[first // 9 % 9]]\n"
    "        return 1, (schema[0], tree[1], schema[2], schema[3]), None\n"
    "    byte = reader(data[1:65])\n"
    "    roots = (('index',), (), ('output_index', 'index'), ['index'], (b'index',), ('index',) * 65)\n"
    "    table = (schema_from(byte), tree_from(byte), roots[byte() % 6], (True, False, 1)[byte() % 3])\n"
    "    return 65, table[:3] if byte() >= 0xF0 else table, None\n"
    "# (bytes read, words, limit, table, index, whether words and limit are right): a table\n"
    "# (table_of), a byte for the words (below 0xC0 an API's markers, else as many words as it is\n"
    "# over 0xC0, or 64, 65 for 0xFE, 0xFF, each a size byte and its bytes), 2 bytes of limit (0xFFFF: 2**100, 0xFFFE: -1).\n"
    "def event_args(data):\n"
    "    at, table, index = table_of(data, True)\n"
    "    byte = reader(data[at:])\n"
    "    w, read, right = byte(), 1, True\n"
    "    if w < 0xC0:\n"
    "        api, doc = KEYS[EVENTS[w % 3]]\n"
    "        words = id_markers(api, doc).words\n"
    "    else:\n"
    "        words = []\n"
    "        for _ in range(w - 0xC0 if w < 0xFE else w - 0xBE):  # 0 to 61, 64, 65 words\n"
    "            size = byte() % 12\n"
    "            words.append(bytes(byte() for _ in range(size)))\n"
    "            read += 1 + size\n"
    "        words = tuple(words)\n"
    "        right = 1 <= len(words) <= 64 and b'' not in words\n"
    "    limit = byte() | byte() << 8\n"
    "    limit = 2**100 if limit == 0xFFFF else -1 if limit == 0xFFFE else limit\n"
    "    return at + read + 2, words, limit, table, index, right and limit >= 0\n"
    "# find_ids' ids; each call lacking one with the JSON text the document spells there.\n"
    "def twin(parsed, api, doc, document):\n"
    "    def kind(holder):\n"
    "        value = holder.get(TYPE)\n"
    "        return value if isinstance(value, str) else None\n"
    "    def value(f):\n"
    "        if f.role is not LACKS: return f.value\n"
    "        start, end = value_span(document, f.path)\n"
    "        return document[start:end].decode()\n"
    "    return [(f.key, value(f), f.path, f.role, f.call, f.kind, kind(f.holder)) for f in find_ids(parsed, api, doc)]\n"
    "# id_spans' answer: None, or rows (with a real table: find_ids' ids, each span its literal).\n"
    "def check_spans(document, index, spans):\n"
    "    if spans is None: return\n"
    "    assert type(spans) is list, spans\n"
    "    for row in spans:\n"
    "        assert type(row) is tuple and len(row) == 7, row\n"
    "        start, end, slot, call, path, holder_type, value = row\n"
    "        assert type(call) is tuple and type(path) is str and (holder_type is None or type(holder_type) is str), row\n"
    "        if index is not None and slot >= len(positions(*KEYS[index])):  # a call lacking an id\n"
    "            assert 0 <= start <= end <= len(document) and value == document[start:end].decode(), row\n"
    "            continue\n"
    "        assert 0 <= start < end <= len(document) and document[start] == document[end - 1] == 0x22, row\n"
    "        assert value == document[start + 1 : end - 1].decode(), row\n"
    "    if index is None: return\n"
    "    api, doc = KEYS[index]\n"
    "    entries = positions(api, doc)\n"
    "    spans = sorted(spans, key=itemgetter(2))\n"
    "    def entry(slot): return (entries + tuple(p for p in entries if p.required))[slot]\n"
    "    def role(slot): return LACKS if slot >= len(entries) else entries[slot].role\n"
    "    rows = [(entry(slot).key, value, path, role(slot), call,\n"
    "             entry(slot).kind, holder_type) for start, end, slot, call, path, holder_type, value in spans]\n"
    "    full = json.loads(document.decode('utf-8'))\n"
    "    assert rows == twin(full, api, doc, document), (rows, twin(full, api, doc, document))\n"
    "    # a history's labels are the values filters test: compared above, never marked\n"
    "    ids = [row for row in spans if role(row[2]) not in (LABELS, LACKS)]\n"
    "    distinct = sorted({row[:2] for row in ids})\n"
    "    marks = {span: b'\"@%d@\"' % i for i, span in enumerate(distinct)}\n"
    "    parts, at = [], 0\n"
    "    for start, end in distinct:\n"
    "        parts += [document[at:start], marks[(start, end)]]\n"
    "        at = end\n"
    "    marked = b''.join(parts + [document[at:]])\n"
    "    expected = [marks[row[:2]][1:-1].decode() for row in ids]\n"
    "    found = [row[1] for row in twin(json.loads(marked.decode('utf-8')), api, doc, marked) if row[3] not in (LABELS, LACKS)]\n"
    "    assert found == expected, 'a span is not its literal'\n"
    "# event_ids' answer: EventFramer.feed_marked's framing; the rows, in one list, of each marked\n"
    "# one-data-line event that id_spans vouches for, the other marked events unread.\n"
    "def check_events(data, words, limit, table, index, result):\n"
    "    import _native\n"
    "    if b'\\r' in data:\n"
    "        assert result is None, result\n"
    "        return\n"
    "    framer, rows, unread, groups, end = EventFramer(), [], [], [], 0\n"
    "    for piece, unmarked in framer.feed_marked(data, markers_of(words)):\n"
    "        start, end = end, end + len(piece)\n"
    "        if unmarked: continue\n"
    "        at = data_line(data, start, end) if end - start <= limit else -1\n"
    "        alone = None\n"
    "        if at >= 0:\n"
    "            alone = _native.id_spans(data[at:end - 2], table)\n"
    "            check_spans(data[at:end - 2], index, alone)\n"
    "        if alone is None:\n"
    "            unread.append((start, end, len(rows)))\n"
    "            continue\n"
    "        if len(alone) > 1: groups.append((len(rows), len(alone)))\n"
    "        rows += [(s + at, e + at, *rest) for s, e, *rest in alone]\n"
    "    assert end == len(data) - len(framer), end\n"
    "    assert type(result) is tuple and [type(part) for part in result] == [int, list, list, list], result\n"
    "    assert result == (end, rows, unread, groups), (result, rows, unread, groups)\n";

static void fail(const char *what) {
    fprintf(stderr, "native_fuzz: %s\n", what);
    if (PyErr_Occurred()) PyErr_Print();
    abort();
}

static PyObject *helper(PyObject *globals, const char *name) {
    PyObject *found = PyDict_GetItemString(globals, name); /* borrowed */
    if (found == NULL) fail("a helper is missing");
    return Py_NewRef(found);
}

/* Whether the pending exception is a TypeError or a ValueError (it is cleared). */
static int refused(void) {
    int is = PyErr_ExceptionMatches(PyExc_TypeError) || PyErr_ExceptionMatches(PyExc_ValueError);
    if (is) PyErr_Clear();
    return is;
}

static void canary_asan(void) {
    char *volatile bytes = malloc(8);
    volatile char past = bytes[8]; /* heap-buffer-overflow */
    (void)past;
    free(bytes);
}

static void canary_ubsan(void) {
    volatile int most = INT_MAX;
    volatile int beyond = most + 1; /* signed-integer-overflow */
    (void)beyond;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *name = getenv("TOOLID_FUZZ_TARGET");
    if (name == NULL) name = "";
    if (strcmp(name, "canary-asan") == 0) canary_asan();
    if (strcmp(name, "canary-ubsan") == 0) canary_ubsan();
    if (strncmp(name, "canary", 6) == 0) {
        fprintf(stderr, "native_fuzz: the canary %s was not caught\n", name);
        exit(3);
    }
    if (strcmp(name, "id_spans") == 0) target = ID_SPANS;
    else if (strcmp(name, "event_ids") == 0) target = EVENT_IDS;
    else if (strcmp(name, "first_marker") == 0) target = FIRST_MARKER;
    else if (strcmp(name, "splice") == 0) target = SPLICE;
    else fail("TOOLID_FUZZ_TARGET: id_spans, event_ids, first_marker, splice or a canary");

    PyPreConfig preconfig;
    PyPreConfig_InitPythonConfig(&preconfig);
    preconfig.allocator = PYMEM_ALLOCATOR_MALLOC;
    if (PyStatus_Exception(Py_PreInitialize(&preconfig))) fail("Py_PreInitialize");
    if (PyImport_AppendInittab("_native", PyInit__native) < 0) fail("PyImport_AppendInittab");
    Py_Initialize();
    PyObject *main = PyImport_AddModule("__main__"); /* borrowed */
    PyObject *globals = main ? PyModule_GetDict(main) : NULL;
    PyObject *ran = globals ? PyRun_String(HELPERS, Py_file_input, globals, globals) : NULL;
    if (ran == NULL) fail("the helpers do not run");
    Py_DECREF(ran);
    table_of = helper(globals, "table_of");
    event_args = helper(globals, "event_args");
    check_spans = helper(globals, "check_spans");
    check_events = helper(globals, "check_events");
    return 0;
}

static PyObject *call(const char *function, PyObject *a, PyObject *b) {
    static PyObject *module;
    if (module == NULL && (module = PyImport_ImportModule("_native")) == NULL)
        fail("import _native");
    return PyObject_CallMethod(module, function, "OO", a, b);
}

/* A view of libFuzzer's own buffer (a read past it is caught), and a copy of its bytes. */
static PyObject *view_of(const uint8_t *data, size_t size, PyObject **copy) {
    PyObject *view = PyMemoryView_FromMemory((char *)data, (Py_ssize_t)size, PyBUF_READ);
    *copy = PyBytes_FromStringAndSize((const char *)data, (Py_ssize_t)size);
    if (view == NULL || *copy == NULL) fail("memoryview");
    return view;
}

/* What a helper reads off data's first bytes (a tuple; item 0: how many it read, in *read). */
static PyObject *header(PyObject *helper, const uint8_t *data, size_t size, size_t *read) {
    PyObject *head = PyBytes_FromStringAndSize((const char *)data, (Py_ssize_t)size);
    PyObject *got = head == NULL       ? NULL
                    : helper == table_of ? PyObject_CallFunction(helper, "Oi", head, 0)
                                         : PyObject_CallOneArg(helper, head);
    Py_XDECREF(head);
    if (got == NULL || !PyTuple_Check(got)) fail("a header helper failed");
    *read = PyLong_AsSize_t(PyTuple_GET_ITEM(got, 0));
    if (*read > size) *read = size;
    return got;
}

static void fuzz_id_spans(const uint8_t *data, size_t size) {
    if (size < 1) return;
    size_t at;
    PyObject *head = header(table_of, data, size, &at), *document;
    PyObject *view = view_of(data + at, size - at, &document);
    PyObject *result = call("id_spans", view, PyTuple_GET_ITEM(head, 1));
    if (result == NULL) {
        if (data[0] < 0xF0 || !refused()) fail("id_spans raised");
    } else {
        PyObject *checked = PyObject_CallFunctionObjArgs(check_spans, document,
                                                         PyTuple_GET_ITEM(head, 2), result, NULL);
        if (checked == NULL) fail("id_spans is not find_ids");
        Py_DECREF(checked);
    }
    Py_XDECREF(result);
    Py_DECREF(view);
    Py_DECREF(document);
    Py_DECREF(head);
}

static void fuzz_event_ids(const uint8_t *data, size_t size) {
    if (size < 1) return;
    size_t at;
    PyObject *head = header(event_args, data, size, &at), *bytes;
    PyObject *words = PyTuple_GET_ITEM(head, 1), *limit = PyTuple_GET_ITEM(head, 2);
    PyObject *table = PyTuple_GET_ITEM(head, 3), *index = PyTuple_GET_ITEM(head, 4);
    PyObject *view = view_of(data + at, size - at, &bytes);
    PyObject *module = PyImport_ImportModule("_native");
    if (module == NULL) fail("import _native");
    PyObject *result = PyObject_CallMethod(module, "event_ids", "OOOO", view, words, limit, table);
    int right = PyTuple_GET_ITEM(head, 5) == Py_True;
    if (result == NULL) {
        if ((right && data[0] < 0xF0) || !refused()) fail("event_ids raised");
    } else {
        if (!right) fail("event_ids took words or a limit it must refuse");
        PyObject *checked = PyObject_CallFunctionObjArgs(check_events, bytes, words, limit, table,
                                                         index, result, NULL);
        if (checked == NULL) fail("event_ids is not the framer");
        Py_DECREF(checked);
    }
    Py_XDECREF(result);
    Py_DECREF(module);
    Py_DECREF(view);
    Py_DECREF(bytes);
    Py_DECREF(head);
}

static void fuzz_first_marker(const uint8_t *data, size_t size) {
    if (size < 2) return;
    int count = data[0] % 72, good = count >= 1 && count <= MAX_MARKERS, as_str = data[1] == 0xFF;
    size_t at = 2;
    const uint8_t *word[80];
    size_t length[80];
    PyObject *words = PyTuple_New(count);
    if (words == NULL) fail("tuple");
    for (int i = 0; i < count; i++) {
        length[i] = at < size ? data[at++] % 12 : 1;
        if (length[i] > size - at) length[i] = size - at;
        word[i] = data + at;
        at += length[i];
        good = good && length[i] > 0;
        PyObject *item = as_str && i == count - 1
                             ? PyUnicode_FromStringAndSize("w", 1)
                             : PyBytes_FromStringAndSize((const char *)word[i], (Py_ssize_t)length[i]);
        if (item == NULL) fail("word");
        PyTuple_SET_ITEM(words, i, item);
    }
    good = good && !as_str;
    const uint8_t *hay = data + at;
    size_t n = size - at;
    PyObject *view = PyMemoryView_FromMemory((char *)hay, (Py_ssize_t)n, PyBUF_READ);
    if (view == NULL) fail("memoryview");
    PyObject *result = call("first_marker", view, words);
    if (!good) {
        if (result != NULL || !refused()) fail("first_marker took words it must refuse");
    } else {
        long expected = -1;
        for (size_t start = 0; start < n && expected < 0; start++)
            for (int i = 0; i < count && expected < 0; i++)
                if (length[i] <= n - start && memcmp(hay + start, word[i], length[i]) == 0)
                    expected = (long)start;
        if (result == NULL || PyLong_AsLong(result) != expected) {
            fprintf(stderr, "expected %ld\n", expected);
            fail("first_marker is not the naive search");
        }
    }
    Py_XDECREF(result);
    Py_DECREF(view);
    Py_DECREF(words);
}

/* Edits: a header byte (count, container), then per edit 4 bytes: start, end, text size and
 * a flag byte that may spoil it; the document is what is left. */
static void fuzz_splice(const uint8_t *data, size_t size) {
    if (size < 1) return;
    int count = data[0] % 16, container = data[0] / 16 % 4;
    size_t at = 1;
    struct { size_t start, end, text_size; const uint8_t *text; } edit[16];
    int good = container != 3, flags[16];
    PyObject *edits = container == 1 ? PyTuple_New(count) : PyList_New(count);
    if (edits == NULL) fail("edits");
    for (int i = 0; i < count; i++) {
        uint8_t b[4] = {0, 0, 0, 0};
        for (int k = 0; k < 4 && at < size; k++) b[k] = data[at++];
        edit[i].start = b[0], edit[i].end = b[1], edit[i].text_size = b[2] % 8;
        flags[i] = b[3] < 0xE0 ? 0 : b[3] & 7;
        if (edit[i].text_size > size - at) edit[i].text_size = size - at;
        edit[i].text = data + at;
        at += edit[i].text_size;
    }
    const uint8_t *document = data + at;
    size_t n = size - at, last = 0, total = n;
    for (int i = 0; i < count; i++) {
        good = good && !flags[i] && last <= edit[i].start && edit[i].start <= edit[i].end &&
               edit[i].end <= n;
        if (good) total += edit[i].text_size - (edit[i].end - edit[i].start);
        last = edit[i].end;
        PyObject *start = flags[i] == 1   ? PyFloat_FromDouble((double)edit[i].start)
                          : flags[i] == 2 ? PyLong_FromString("123456789012345678901234", NULL, 10)
                                          : PyLong_FromSize_t(edit[i].start);
        PyObject *end = flags[i] == 3 ? PyLong_FromLong(-1) : PyLong_FromSize_t(edit[i].end);
        PyObject *text = flags[i] == 4 ? PyUnicode_FromString("x")
                         : flags[i] == 5 ? PyByteArray_FromStringAndSize("x", 1)
                                         : PyBytes_FromStringAndSize((const char *)edit[i].text,
                                                                     (Py_ssize_t)edit[i].text_size);
        PyObject *item = start && end && text
                             ? flags[i] == 6 ? PyTuple_Pack(2, start, end)
                               : flags[i] == 7 ? PyList_New(0)
                                               : PyTuple_Pack(3, start, end, text)
                             : NULL;
        Py_XDECREF(start);
        Py_XDECREF(end);
        Py_XDECREF(text);
        if (item == NULL) fail("edit");
        if (container == 1) PyTuple_SET_ITEM(edits, i, item);
        else PyList_SET_ITEM(edits, i, item);
    }
    PyObject *given = container == 3 ? PyDict_New() : Py_NewRef(edits); /* 3: not a sequence */
    PyObject *bytes = PyBytes_FromStringAndSize((const char *)document, (Py_ssize_t)n);
    if (given == NULL || bytes == NULL) fail("arguments");
    PyObject *result = call("splice", bytes, given);
    if (!good) {
        if (result != NULL || !refused()) fail("splice took edits it must refuse");
    } else {
        char *expected = malloc(total + 1), *out = expected;
        size_t from = 0;
        if (expected == NULL) fail("malloc");
        for (int i = 0; i < count; i++) {
            memcpy(out, document + from, edit[i].start - from);
            out += edit[i].start - from;
            memcpy(out, edit[i].text, edit[i].text_size);
            out += edit[i].text_size;
            from = edit[i].end;
        }
        memcpy(out, document + from, n - from);
        if (result == NULL || !PyBytes_Check(result) || (size_t)PyBytes_GET_SIZE(result) != total ||
            memcmp(PyBytes_AS_STRING(result), expected, total) != 0)
            fail("splice is not the naive splice");
        free(expected);
    }
    Py_XDECREF(result);
    Py_DECREF(bytes);
    Py_DECREF(given);
    Py_DECREF(edits);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (target == ID_SPANS) fuzz_id_spans(data, size);
    else if (target == EVENT_IDS) fuzz_event_ids(data, size);
    else if (target == FIRST_MARKER) fuzz_first_marker(data, size);
    else fuzz_splice(data, size);
    if (PyErr_Occurred()) fail("an exception was left set");
    return 0;
}
