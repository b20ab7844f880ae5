/* A libFuzzer target for toolid/_native.c, built with AddressSanitizer and
 * UndefinedBehaviorSanitizer by tests/fuzz/native_fuzz.py (which documents how to run it).
 *
 * The extension's source is compiled into this program (so it is instrumented with it) and
 * its module is loaded into an embedded interpreter whose objects live in malloc's heap
 * (PYMEM_ALLOCATOR_MALLOC: ASan sees every object's bounds). TOOLID_FUZZ_TARGET picks the
 * primitive each input goes to:
 *
 * parse        byte 0 picks one of toolid.prune.SCHEMAS (or, from 0xF0 on, a schema built by
 *              schema_from from the next bytes, well formed or not), the rest is the document,
 *              given as a memoryview of libFuzzer's own buffer (a read past it is caught).
 *              It must give None, a pruned document that check_parse vouches for, or (for a
 *              built schema only) TypeError or ValueError.
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

enum { PARSE, FIRST_MARKER, SPLICE };
static int target;
static PyObject *schemas, *schema_from, *check_parse; /* from HELPERS */

/* Python helpers (stdlib only). */
static const char HELPERS[] =
    "import json, os, sys\n"
    "os.environ['TOOLID_NATIVE'] = 'off'\n"
    "sys.path.insert(0, os.environ['TOOLID_ROOT'])\n"
    "from toolid.prune import SCHEMAS\n"
    "schemas = tuple(SCHEMAS[key] for key in sorted(SCHEMAS, key=str))\n"
    "class Str(str): pass\n"
    "def schema_from(data):\n"
    "    at = [0]\n"
    "    def byte():\n"
    "        at[0] += 1\n"
    "        return data[at[0] - 1] if at[0] <= len(data) else 0\n"
    "    keys = [b'id', b'type', b'index', b'tool_calls', b'messages', b'content', b'\\xc3\\xa9']\n"
    "    def spec(depth):\n"
    "        b = byte()\n"
    "        if b < 96 or depth > 6: return (0, 1, 2, -1, True, 2**80, None, 0.0)[b % 8]\n"
    "        return node(depth + 1)\n"
    "    def member(depth):\n"
    "        raw = keys[byte() % len(keys)]\n"
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
    "def check_parse(document, pruned, spans):\n"
    "    full = json.loads(document.decode('utf-8'))\n"
    "    objects = {}\n"
    "    def walk(kept, value):\n"
    "        if isinstance(kept, dict):\n"
    "            assert type(value) is dict and kept.keys() <= value.keys(), (kept, value)\n"
    "            objects[id(kept)] = (kept, value)\n"
    "            for key, item in kept.items(): walk(item, value[key])\n"
    "        elif isinstance(kept, list):\n"
    "            assert type(value) is list and len(kept) == len(value), (kept, value)\n"
    "            for item, each in zip(kept, value): walk(item, each)\n"
    "        elif kept is not None:\n"
    "            assert type(kept) is type(value) and kept == value, (kept, value)\n"
    "    walk(pruned, full)\n"
    "    for (address, key), (start, end) in spans.items():\n"
    "        kept, value = objects[address]\n"
    "        literal = json.loads(document[start:end].decode('utf-8'))\n"
    "        assert literal == kept[key] == value[key], (literal, kept[key], value[key])\n";

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
    if (strcmp(name, "parse") == 0) target = PARSE;
    else if (strcmp(name, "first_marker") == 0) target = FIRST_MARKER;
    else if (strcmp(name, "splice") == 0) target = SPLICE;
    else fail("TOOLID_FUZZ_TARGET: parse, first_marker, splice, canary-asan or canary-ubsan");

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
    schemas = helper(globals, "schemas");
    schema_from = helper(globals, "schema_from");
    check_parse = helper(globals, "check_parse");
    return 0;
}

static PyObject *call(const char *function, PyObject *a, PyObject *b) {
    static PyObject *module;
    if (module == NULL && (module = PyImport_ImportModule("_native")) == NULL)
        fail("import _native");
    return PyObject_CallMethod(module, function, "OO", a, b);
}

static void fuzz_parse(const uint8_t *data, size_t size) {
    if (size < 1) return;
    int built = data[0] >= 0xF0;
    PyObject *schema;
    if (built) {
        size_t bytes = size > 64 ? 64 : size - 1;
        PyObject *source = PyBytes_FromStringAndSize((const char *)data + 1, (Py_ssize_t)bytes);
        schema = source ? PyObject_CallOneArg(schema_from, source) : NULL;
        Py_XDECREF(source);
        data += bytes, size -= bytes;
    } else {
        schema = Py_XNewRef(PyTuple_GetItem(schemas, data[0] % PyTuple_GET_SIZE(schemas)));
    }
    if (schema == NULL) fail("no schema");
    PyObject *view = PyMemoryView_FromMemory((char *)data + 1, (Py_ssize_t)size - 1, PyBUF_READ);
    if (view == NULL) fail("memoryview");
    PyObject *result = call("parse", view, schema);
    if (result == NULL) {
        if (!built || !refused()) fail("parse raised");
    } else if (result != Py_None) {
        if (!PyTuple_Check(result) || PyTuple_GET_SIZE(result) != 2) fail("parse: not a pair");
        PyObject *document = PyBytes_FromStringAndSize((const char *)data + 1, (Py_ssize_t)size - 1);
        PyObject *checked = document ? PyObject_CallFunctionObjArgs(
                                           check_parse, document, PyTuple_GET_ITEM(result, 0),
                                           PyTuple_GET_ITEM(result, 1), NULL)
                                     : NULL;
        if (checked == NULL) fail("parse vouched for what the full parse does not read alike");
        Py_DECREF(checked);
        Py_DECREF(document);
    }
    Py_XDECREF(result);
    Py_DECREF(view);
    Py_DECREF(schema);
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
    if (target == PARSE) fuzz_parse(data, size);
    else if (target == FIRST_MARKER) fuzz_first_marker(data, size);
    else fuzz_splice(data, size);
    if (PyErr_Occurred()) fail("an exception was left set");
    return 0;
}
