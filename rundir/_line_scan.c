/* The history reader's fast path for a batch of step lines (rundir/history/ingest.py):
 * the JSON array that the reader makes of a batch of lines (its newlines turned into
 * commas), read straight into the step columns, with no Python object per line.
 *
 * It reads a subset of JSON on purpose: flat objects whose keys have no escapes, whose
 * values are numbers, strings without escapes, true, false and null. Anything else, and
 * anything the typed decode it stands in for (rundir/history/records.py) would refuse or
 * read another way (a key never seen, a value of another type, a duplicate key, a step
 * below 0, an integer past 18 digits, a number past a double's range, a key or a string
 * that is not ASCII, an element count that is not the batch's), makes it give up on the whole batch
 * (None): the caller then decodes it as before. So where it answers, it answers as the
 * typed decode does.
 *
 * Numbers are correctly rounded, as the typed decode's are: exactly, by one
 * multiplication or division, when the digits and the power of ten are exact in a double
 * (Clinger's fast path); else, on x86's 80-bit long double, when its one rounding cannot
 * have moved the result across a double's rounding boundary (its 11 extra bits are not
 * within one unit of a halfway point); else by Python's own correctly rounded parser.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

enum { K_STEP, K_TOKENS, K_ARM, K_LOSS, K_LR, K_GRAD_NORM, K_TIME, K_EVENT, K_OTHER, K_SERIES = 16 };
#define N_BASE 7           /* step .. time: one bit each in a line's "seen" mask */
#define MAX_KEYS 512
#define MAX_ARMS 4096
#define ARM_SLOTS (2 * MAX_ARMS)   /* the arms' hash table: a power of two, never over half full */

typedef struct {
    const char *name;
    Py_ssize_t len;
    int code;
} Key;

typedef struct {           /* an arm name, its index its place in the table */
    const char *name;      /* in the buffer: compared by bytes */
    Py_ssize_t len;
} Arm;

static const double POW10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                               1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
#if LDBL_MANT_DIG == 64
static const long double POW10L[] = {1e0L, 1e1L, 1e2L, 1e3L, 1e4L, 1e5L, 1e6L, 1e7L, 1e8L, 1e9L, 1e10L,
                                     1e11L, 1e12L, 1e13L, 1e14L, 1e15L, 1e16L, 1e17L, 1e18L, 1e19L,
                                     1e20L, 1e21L, 1e22L, 1e23L, 1e24L, 1e25L, 1e26L, 1e27L};
#endif

static inline const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

static inline int is_digit(char c) { return c >= '0' && c <= '9'; }

/* A JSON number at p: its end (NULL: not one). *is_int: no fraction and no exponent. */
static const char *number_end(const char *p, const char *end, int *is_int)
{
    if (p < end && *p == '-')
        p++;
    if (p >= end || !is_digit(*p))
        return NULL;
    if (*p == '0')
        p++;
    else
        while (p < end && is_digit(*p))
            p++;
    *is_int = 1;
    if (p < end && *p == '.') {
        p++;
        if (p >= end || !is_digit(*p))
            return NULL;
        while (p < end && is_digit(*p))
            p++;
        *is_int = 0;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || !is_digit(*p))
            return NULL;
        while (p < end && is_digit(*p))
            p++;
        *is_int = 0;
    }
    return p;
}

/* The integer in [s, e) (validated, no fraction or exponent); 0 when it has over 18 digits. */
static int parse_int(const char *s, const char *e, int64_t *out)
{
    int neg = *s == '-';
    if (neg)
        s++;
    if (e - s > 18)
        return 0;
    int64_t v = 0;
    for (; s < e; s++)
        v = v * 10 + (*s - '0');
    *out = neg ? -v : v;
    return 1;
}

/* The double nearest the number in [s, e) (validated); 0 when it is past a double's range
 * or Python's parser failed. */
static int parse_double(const char *s, const char *e, double *out)
{
    const char *p = s;
    int neg = *p == '-';
    if (neg)
        p++;
    uint64_t m = 0;
    int digits = 0, frac = 0, seen_dot = 0;
    long exp10 = 0;
    for (; p < e && *p != 'e' && *p != 'E'; p++) {
        if (*p == '.') {
            seen_dot = 1;
            continue;
        }
        if (digits == 0 && *p == '0') {       /* leading zeros carry no digit */
            frac += seen_dot;
            continue;
        }
        if (++digits > 19)
            break;
        m = m * 10 + (uint64_t)(*p - '0');
        frac += seen_dot;
    }
    if (digits <= 19 && p < e) {              /* the exponent */
        p++;
        int eneg = 0;
        if (*p == '+' || *p == '-')
            eneg = *p++ == '-';
        long x = 0;
        for (; p < e && x < 100000; p++)
            x = x * 10 + (*p - '0');
        exp10 = eneg ? -x : x;
        if (p < e)
            digits = 20;                      /* an exponent of over 5 digits: Python's parser */
    }
    if (digits <= 19) {
        long e10 = exp10 - frac;
        double r;
        if (m == 0) {
            if (neg)
                return 0;                     /* "-0": the typed decode's sign depends on its form */
            *out = 0.0;
            return 1;
        }
        if (m <= (UINT64_C(1) << 53) && e10 >= -22 && e10 <= 22) {
            r = e10 >= 0 ? (double)m * POW10[e10] : (double)m / POW10[-e10];
            *out = neg ? -r : r;
            return 1;
        }
#if LDBL_MANT_DIG == 64
        if (e10 >= -27 && e10 <= 27) {
            long double x = e10 >= 0 ? (long double)m * POW10L[e10] : (long double)m / POW10L[-e10];
            int bexp;
            uint64_t bits = (uint64_t)ldexpl(frexpl(x, &bexp), 64);
            unsigned low = (unsigned)(bits & 0x7FF);
            if ((low < 0x3FF || low > 0x401) && x >= (long double)DBL_MIN && x <= (long double)DBL_MAX) {
                r = (double)x;
                *out = neg ? -r : r;
                return 1;
            }
        }
#endif
    }
    char *stop = NULL;
    double r = PyOS_string_to_double(s, &stop, NULL);    /* NULL: past the range is +-inf, no error */
    if (r == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (stop != e || isinf(r))
        return 0;
    *out = r;
    return 1;
}

/* A string's closing quote (p after the opening one); NULL for an escape, a control
 * character or no end; *ascii: whether every byte is ASCII. */
static const char *string_end(const char *p, const char *end, int *ascii)
{
    int a = 1;
    for (; p < end; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"') {
            *ascii = a;
            return p;
        }
        if (c == '\\' || c < 0x20)
            return NULL;
        a &= c < 0x80;
    }
    return NULL;
}

/* Skips a scalar value that no column keeps: an ASCII string, true, false, null, or
 * (number_ok) a number. NULL for anything else (a string with other bytes: whether they are
 * valid UTF-8 is the typed decode's to say). */
static const char *skip_scalar(const char *p, const char *end, int number_ok)
{
    int flag;
    if (p >= end)
        return NULL;
    if (*p == '"') {
        const char *q = string_end(p + 1, end, &flag);
        return q && flag ? q + 1 : NULL;
    }
    if (end - p >= 4 && (!memcmp(p, "true", 4) || !memcmp(p, "null", 4)))
        return p + 4;
    if (end - p >= 5 && !memcmp(p, "false", 5))
        return p + 5;
    if (number_ok)
        return number_end(p, end, &flag);
    return NULL;
}

typedef struct {
    Key *keys;
    Py_ssize_t n_keys;
    int full;
    int64_t *step, *tokens;
    int32_t *arm;
    double *floats[4];           /* loss, lr, grad_norm, time */
    double *series;              /* n_series rows of n */
    Py_ssize_t n_series, n;
    Arm arms[MAX_ARMS];
    int n_arms;
    int arm_slots[ARM_SLOTS];    /* 1 + an arm's index, by its name's hash; 0: empty */
    uint32_t *seen_series;       /* the line that last set each series (duplicate keys) */
    Py_ssize_t order[64];        /* the key at each place of the last line: the next line's guess */
} Scan;

/* The code of the key `name`, the `place`-th of its line; -1 for a key not in the table.
 * Lines repeat their keys in the same order: the last line's key at this place is tried first. */
static int lookup(Scan *sc, const char *name, Py_ssize_t len, int place)
{
    Py_ssize_t guess = place < 64 ? sc->order[place] : 0;
    if (guess < sc->n_keys && sc->keys[guess].len == len && !memcmp(sc->keys[guess].name, name, len))
        return sc->keys[guess].code;
    for (Py_ssize_t i = 0; i < sc->n_keys; i++)
        if (sc->keys[i].len == len && !memcmp(sc->keys[i].name, name, len)) {
            if (place < 64)
                sc->order[place] = i;
            return sc->keys[i].code;
        }
    return -1;
}

/* The index of the arm `name` in this batch's table, added if new; -1 past MAX_ARMS. The last
 * line's arm is tried first (a run draws one arm for many steps); else the name's FNV-1a hash
 * finds its slot, so a batch naming thousands of arms costs no search through them all. */
static int arm_index(Scan *sc, const char *name, Py_ssize_t len, int *last)
{
    if (*last >= 0 && sc->arms[*last].len == len && !memcmp(sc->arms[*last].name, name, len))
        return *last;
    uint64_t hash = 14695981039346656037ULL;
    for (Py_ssize_t k = 0; k < len; k++)
        hash = (hash ^ (unsigned char)name[k]) * 1099511628211ULL;
    size_t slot = (size_t)hash & (ARM_SLOTS - 1);
    for (int i; (i = sc->arm_slots[slot] - 1) >= 0; slot = (slot + 1) & (ARM_SLOTS - 1))
        if (sc->arms[i].len == len && !memcmp(sc->arms[i].name, name, len))
            return *last = i;
    if (sc->n_arms >= MAX_ARMS)
        return -1;
    sc->arms[sc->n_arms] = (Arm){name, len};
    sc->arm_slots[slot] = sc->n_arms + 1;
    return *last = sc->n_arms++;
}

/* The loss of a line that has none: a quiet NaN whose payload says so (ABSENT_LOSS_BITS of
   rundir/history/records.py), so that an absent loss is never counted as a non-finite one. */
static double absent_loss(void)
{
    const uint64_t bits = 0x7FF80000A85E0000ULL;
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

/* One step line (an object) at p, as row `row`: where it ends, or NULL to give up. */
static const char *scan_line(Scan *sc, const char *p, const char *end, Py_ssize_t row, int *last_arm)
{
    static const char EMPTY[] = "";
    int64_t step = -1, tokens = -1;
    double f[4] = {absent_loss(), NAN, NAN, NAN};   /* a line without "loss": absent, not non-finite */
    const char *arm_name = EMPTY;
    Py_ssize_t arm_len = 0;
    unsigned seen = 0;
    int place = 0;
    for (Py_ssize_t j = 0; j < sc->n_series; j++)
        sc->series[j * sc->n + row] = NAN;
    p = skip_ws(p, end);
    if (p >= end || *p != '{')
        return NULL;
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}')
        return NULL;                               /* no step */
    for (;;) {
        int ascii, is_int;
        if (p >= end || *p != '"')
            return NULL;
        const char *key = p + 1, *key_end = string_end(key, end, &ascii);
        if (!key_end || !ascii)
            return NULL;                           /* no key of ours has other bytes */
        int code = lookup(sc, key, key_end - key, place++);
        p = skip_ws(key_end + 1, end);
        if (p >= end || *p != ':')
            return NULL;
        p = skip_ws(p + 1, end);
        if (p >= end)
            return NULL;
        if (code < 0 || code == K_OTHER) {
            if (code < 0 && !sc->full)
                return NULL;                       /* a key never seen: the caller learns it */
            p = skip_scalar(p, end, code < 0);     /* an other key's number makes it a series */
            if (!p)
                return NULL;
        } else if (code == K_EVENT) {
            return NULL;
        } else if (code < N_BASE) {
            if (seen & (1u << code))
                return NULL;                       /* a duplicate key */
            seen |= 1u << code;
            if (code == K_ARM) {
                if (*p != '"')
                    return NULL;
                const char *s = p + 1, *e = string_end(s, end, &ascii);
                if (!e || !ascii)
                    return NULL;
                arm_name = s;
                arm_len = e - s;
                p = e + 1;
            } else if (code == K_LOSS && end - p >= 4 && !memcmp(p, "null", 4)) {
                p += 4;                            /* loss: null is NaN */
                f[0] = NAN;
            } else {
                const char *e = number_end(p, end, &is_int);
                if (!e)
                    return NULL;
                if (code == K_STEP || code == K_TOKENS) {
                    int64_t v;
                    if (!is_int || !parse_int(p, e, &v))
                        return NULL;
                    *(code == K_STEP ? &step : &tokens) = v;
                } else if (!parse_double(p, e, &f[code - K_LOSS])) {
                    return NULL;
                }
                p = e;
            }
        } else {                                   /* a series */
            Py_ssize_t j = code - K_SERIES;
            if (sc->seen_series[j] == (uint32_t)row + 1)
                return NULL;
            sc->seen_series[j] = (uint32_t)row + 1;
            if (end - p >= 4 && !memcmp(p, "null", 4)) {
                p += 4;
            } else {
                const char *e = number_end(p, end, &is_int);
                if (!e || !parse_double(p, e, &sc->series[j * sc->n + row]))
                    return NULL;
                p = e;
            }
        }
        p = skip_ws(p, end);
        if (p < end && *p == ',') {
            p = skip_ws(p + 1, end);
            continue;
        }
        if (p < end && *p == '}')
            break;
        return NULL;
    }
    if (step < 0)
        return NULL;
    int a = arm_index(sc, arm_name, arm_len, last_arm);
    if (a < 0)
        return NULL;
    sc->step[row] = step;
    sc->tokens[row] = tokens;
    sc->arm[row] = a;
    for (int i = 0; i < 4; i++)
        sc->floats[i][row] = f[i];
    return skip_ws(p + 1, end);
}

/* The writable buffer `obj` as `count` items of `itemsize` bytes, or -1. */
static int get_out(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, Py_ssize_t count)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (view->len < itemsize * count) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "an output column is too short");
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(scan_doc,
"scan(buf, start, end, n, keys, codes, full, events, outputs)\n\n"
"The n elements of the JSON array buf[start:end + 1] read into the columns `outputs`\n"
"(step, tokens: int64; arm: int32; loss, lr, grad_norm, time: float64; series: float64,\n"
"one row of n per series), skipping the event elements (`events`: (before, after)\n"
"separator offsets, in order). `keys` (bytes) and `codes` (int) say what each key is;\n"
"`full`: unknown keys are skipped, not refused. Returns (step lines, the element index\n"
"of each event, the arm names: arm holds indices into them), or None to give up.");

static PyObject *scan(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    Py_ssize_t start, end, n;
    PyObject *keys, *codes, *events, *outputs;
    int full;
    if (!PyArg_ParseTuple(args, "y*nnnO!O!pO!O!", &buf, &start, &end, &n, &PyTuple_Type, &keys, &PyTuple_Type,
                          &codes, &full, &PyTuple_Type, &events, &PyTuple_Type, &outputs))
        return NULL;
    PyObject *result = NULL, *event_rows = NULL, *names = NULL;
    Py_buffer out[8];
    int got = 0;
    Scan *sc = NULL;
    Key keyv[MAX_KEYS];
    Py_ssize_t n_keys = PyTuple_GET_SIZE(keys);
    if (start < 0 || end >= buf.len || start >= end || n < 0 || PyTuple_GET_SIZE(codes) != n_keys ||
        PyTuple_GET_SIZE(outputs) != 8) {
        PyErr_SetString(PyExc_ValueError, "scan: bad arguments");
        goto done;
    }
    if (n_keys > MAX_KEYS) {                   /* more keys than the reader keeps: not ours to read */
        result = Py_NewRef(Py_None);
        goto done;
    }
    for (Py_ssize_t i = 0; i < n_keys; i++) {
        PyObject *k = PyTuple_GET_ITEM(keys, i);
        if (!PyBytes_Check(k)) {
            PyErr_SetString(PyExc_TypeError, "scan: keys must be bytes");
            goto done;
        }
        keyv[i] = (Key){PyBytes_AS_STRING(k), PyBytes_GET_SIZE(k), (int)PyLong_AsLong(PyTuple_GET_ITEM(codes, i))};
    }
    if (PyErr_Occurred())
        goto done;
    sc = PyMem_Malloc(sizeof(Scan));          /* the arms are written before they are read */
    if (!sc) {
        PyErr_NoMemory();
        goto done;
    }
    sc->n_arms = 0;
    memset(sc->arm_slots, 0, sizeof(sc->arm_slots));
    sc->seen_series = NULL;
    memset(sc->order, 0, sizeof(sc->order));
    sc->keys = keyv;
    sc->n_keys = n_keys;
    sc->full = full;
    sc->n = n;
    const Py_ssize_t sizes[8] = {8, 8, 4, 8, 8, 8, 8, 8};
    for (; got < 8; got++) {
        Py_ssize_t count = got == 7 ? 0 : n;
        if (get_out(PyTuple_GET_ITEM(outputs, got), &out[got], sizes[got], count) < 0)
            goto done;
    }
    sc->step = out[0].buf;
    sc->tokens = out[1].buf;
    sc->arm = out[2].buf;
    for (int i = 0; i < 4; i++)
        sc->floats[i] = out[3 + i].buf;
    sc->series = out[7].buf;
    sc->n_series = n ? out[7].len / 8 / n : 0;
    sc->seen_series = PyMem_Calloc(sc->n_series + 1, sizeof(uint32_t));
    if (!sc->seen_series) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n_keys; i++)
        if (keyv[i].code >= K_SERIES && keyv[i].code - K_SERIES >= sc->n_series) {
            PyErr_SetString(PyExc_ValueError, "scan: a series without its column");
            goto done;
        }

    const char *base = buf.buf, *stop = base + end + 1;
    Py_ssize_t n_events = PyTuple_GET_SIZE(events), ev = 0, element = 0, rows = 0;
    Py_ssize_t sep = start;                    /* "[" or the "," before the next element */
    int last_arm = -1, ok = base[start] == '[' && base[end] == ']';
    event_rows = PyList_New(0);
    if (!event_rows)
        goto done;
    while (ok) {
        const char *p;
        PyObject *span = ev < n_events ? PyTuple_GET_ITEM(events, ev) : NULL;
        if (span && PyLong_AsSsize_t(PyTuple_GET_ITEM(span, 0)) == sep) {
            Py_ssize_t after = PyLong_AsSsize_t(PyTuple_GET_ITEM(span, 1));
            if (after <= sep || after > end)
                break;
            PyObject *at = PyLong_FromSsize_t(element);
            if (!at || PyList_Append(event_rows, at) < 0) {
                Py_XDECREF(at);
                goto done;
            }
            Py_DECREF(at);
            ev++;
            p = base + after;
        } else {
            if (element >= n)
                break;
            p = scan_line(sc, base + sep + 1, stop, rows, &last_arm);
            if (!p)
                break;
            rows++;
        }
        element++;
        if (p >= stop)
            break;
        if (*p == ']') {
            ok = p == stop - 1 && element == n && ev == n_events;
            if (ok) {
                names = PyList_New(sc->n_arms);
                if (!names)
                    goto done;
                for (int i = 0; i < sc->n_arms; i++) {
                    PyObject *s = PyUnicode_DecodeASCII(sc->arms[i].name, sc->arms[i].len, NULL);
                    if (!s)
                        goto done;
                    PyList_SET_ITEM(names, i, s);
                }
                result = Py_BuildValue("nOO", rows, event_rows, names);
            }
            break;
        }
        if (*p != ',')
            break;
        sep = p - base;
    }
    if (!result && !PyErr_Occurred())
        result = Py_NewRef(Py_None);
done:
    Py_XDECREF(event_rows);
    Py_XDECREF(names);
    for (int i = 0; i < got; i++)
        PyBuffer_Release(&out[i]);
    if (sc)
        PyMem_Free(sc->seen_series);
    PyMem_Free(sc);
    PyBuffer_Release(&buf);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, scan_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_line_scan",
                                    "The history reader's fast path for step lines (see rundir/_line_scan.c).",
                                    -1, methods};

PyMODINIT_FUNC PyInit__line_scan(void) { return PyModule_Create(&module); }
