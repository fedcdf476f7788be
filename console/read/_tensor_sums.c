/* The checkpoint inspector's (console/read/checkpoint_inspect.py) fused passes: over a chunk of a
 * checkpoint's w, m and v (chunk_sums), every sum its statistics need in one read of each
 * value instead of numpy's eleven passes; over a chunk of two checkpoints' w and m
 * (pair_sums), the comparison's sums.
 *
 * The sums are taken in double lanes, so a sum comes out non-finite only when a value
 * is NaN or infinite (a float32 square cannot overflow a double; the update's terms are
 * float32, as numpy's, and a negative v or one past float32 is non-finite there too); the
 * caller then sums that array again, masked, in numpy. Built without -ffast-math on purpose: NaN and
 * infinity must propagate for that test to hold. The loops are vectorised by OpenMP's simd
 * reductions (-fopenmp-simd, no OpenMP runtime) and, with GCC on x86-64, compiled twice,
 * for AVX2 and for the baseline, the right one chosen when the module loads: a cluster's
 * login and GPU nodes need not share an instruction set.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>

typedef struct {
    double ww, v_sum, vv, mm, uu;
    float maxabs;
    long long dead;
} Sums;

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CLONES
#endif

/* Inlined twice, with_update a constant in each, so that each copy's loop is vectorised
 * without the other's work (a test inside one loop costs the division where it is not needed). */
static inline __attribute__((always_inline)) void
sum_chunk(const float *w, const float *m, const float *v, Py_ssize_t n,
          float eps2, float eps_scaled, const int with_update, Sums *out)
{
    double ww = 0, v_sum = 0, vv = 0, mm = 0, uu = 0;
    float maxabs = 0;
    long long dead = 0;
#pragma omp simd reduction(+ : ww, v_sum, vv, mm, uu, dead) reduction(max : maxabs)
    for (Py_ssize_t i = 0; i < n; i++) {
        const float wi = w[i], mi = m[i], vi = v[i];
        const float a = fabsf(wi);
        maxabs = a > maxabs ? a : maxabs;
        ww += (double)wi * wi;
        v_sum += vi;
        vv += (double)vi * vi;
        dead += vi < eps2;
        mm += (double)mi * mi;
        if (with_update) {
            /* m / (sqrt(v) + eps / c): the 1 / c and 1 / (1 - beta1^t) factors are
             * applied once, at the end, by the caller */
            const float u = mi / (sqrtf(vi) + eps_scaled);
            uu += (double)u * u;
        }
    }
    out->ww = ww;
    out->v_sum = v_sum;
    out->vv = vv;
    out->mm = mm;
    out->uu = uu;
    out->maxabs = maxabs;
    out->dead = dead;
}

CLONES static void
fused_sums(const float *w, const float *m, const float *v, Py_ssize_t n,
           float eps2, float eps_scaled, int with_update, Sums *out)
{
    if (with_update)
        sum_chunk(w, m, v, n, eps2, eps_scaled, 1, out);
    else
        sum_chunk(w, m, v, n, eps2, eps_scaled, 0, out);
}

static void
release_all(Py_buffer *views, int count)
{
    for (int k = 0; k < count; k++)
        PyBuffer_Release(&views[k]);
}

/* The sums comparing a chunk with the same chunk of another checkpoint: ||w - w'||^2
 * (the difference taken in double, so exact), ||w'||^2, m.m', ||m||^2 and ||m'||^2. */
CLONES static void
fused_pair_sums(const float *w, const float *m, const float *w_b, const float *m_b, Py_ssize_t n,
                double out[5])
{
    double dd = 0, ww_b = 0, mm_ab = 0, mm_a = 0, mm_b = 0;
#pragma omp simd reduction(+ : dd, ww_b, mm_ab, mm_a, mm_b)
    for (Py_ssize_t i = 0; i < n; i++) {
        const double d = (double)w[i] - w_b[i];
        dd += d * d;
        ww_b += (double)w_b[i] * w_b[i];
        mm_ab += (double)m[i] * m_b[i];
        mm_a += (double)m[i] * m[i];
        mm_b += (double)m_b[i] * m_b[i];
    }
    out[0] = dd;
    out[1] = ww_b;
    out[2] = mm_ab;
    out[3] = mm_a;
    out[4] = mm_b;
}

/* The first ``count`` arguments as C-contiguous float32 buffers of one length, into
 * ``views``. Returns their length in values; on failure, -1 with an exception set and
 * no buffer held. */
static Py_ssize_t
float32_buffers(PyObject *const *args, int count, const char *const *names, Py_buffer *views)
{
    for (int k = 0; k < count; k++) {
        Py_buffer *view = &views[k];
        if (PyObject_GetBuffer(args[k], view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
            release_all(views, k);
            return -1;
        }
        if (view->itemsize != 4 || view->format == NULL ||
                (strcmp(view->format, "f") != 0 && strcmp(view->format, "<f") != 0)) {
            PyErr_Format(PyExc_TypeError, "%s: expected a float32 buffer, got format %s",
                         names[k], view->format ? view->format : "B");
            release_all(views, k + 1);
            return -1;
        }
        if (view->len != views[0].len) {
            PyErr_Format(PyExc_ValueError, "%s differs in length from %s (%zd and %zd bytes)",
                         names[k], names[0], view->len, views[0].len);
            release_all(views, k + 1);
            return -1;
        }
    }
    return views[0].len / 4;
}

PyDoc_STRVAR(chunk_sums_doc,
"chunk_sums(w, m, v, eps2, eps_scaled, with_update, /)\n--\n\n"
"Sums of one chunk: (ww, maxabs, v_sum, vv, dead, mm, uu).\n\n"
"w, m and v are C-contiguous float32 buffers of one length. ww, vv, mm and uu are sums\n"
"of squares (uu of m / (sqrt(v) + eps_scaled), 0.0 unless with_update); maxabs is the\n"
"largest |w| (NaNs skipped); dead counts v < eps2. A sum is NaN or infinite exactly\n"
"when its array holds a NaN or an infinity. The GIL is released while summing.");

static PyObject *
chunk_sums(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "chunk_sums() takes 6 arguments (%zd given)", nargs);
        return NULL;
    }
    const double eps2 = PyFloat_AsDouble(args[3]), eps_scaled = PyFloat_AsDouble(args[4]);
    const int with_update = PyObject_IsTrue(args[5]);
    if (PyErr_Occurred() || with_update < 0)
        return NULL;
    static const char *const names[] = {"w", "m", "v"};
    Py_buffer views[3];
    const Py_ssize_t n = float32_buffers(args, 3, names, views);
    if (n < 0)
        return NULL;
    Sums s;
    Py_BEGIN_ALLOW_THREADS
    fused_sums(views[0].buf, views[1].buf, views[2].buf, n, (float)eps2, (float)eps_scaled, with_update, &s);
    Py_END_ALLOW_THREADS
    release_all(views, 3);
    return Py_BuildValue("(ddddLdd)", s.ww, (double)s.maxabs, s.v_sum, s.vv, s.dead, s.mm, s.uu);
}

PyDoc_STRVAR(pair_sums_doc,
"pair_sums(w, m, w_b, m_b, /)\n--\n\n"
"Sums comparing one chunk with another checkpoint's: (dd, ww_b, mm_ab, mm_a, mm_b) =\n"
"(||w - w_b||^2, ||w_b||^2, m . m_b, ||m||^2, ||m_b||^2), of C-contiguous float32 buffers of one\n"
"length. A sum is NaN or infinite exactly when a value it reads is. The GIL is released\n"
"while summing.");

static PyObject *
pair_sums(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "pair_sums() takes 4 arguments (%zd given)", nargs);
        return NULL;
    }
    static const char *const names[] = {"w", "m", "w_b", "m_b"};
    Py_buffer views[4];
    const Py_ssize_t n = float32_buffers(args, 4, names, views);
    if (n < 0)
        return NULL;
    double out[5];
    Py_BEGIN_ALLOW_THREADS
    fused_pair_sums(views[0].buf, views[1].buf, views[2].buf, views[3].buf, n, out);
    Py_END_ALLOW_THREADS
    release_all(views, 4);
    return Py_BuildValue("(ddddd)", out[0], out[1], out[2], out[3], out[4]);
}

static PyMethodDef methods[] = {
    {"chunk_sums", (PyCFunction)(void (*)(void))chunk_sums, METH_FASTCALL, chunk_sums_doc},
    {"pair_sums", (PyCFunction)(void (*)(void))pair_sums, METH_FASTCALL, pair_sums_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "console.read._tensor_sums",
    "The checkpoint inspector's fused passes over a chunk (chunk_sums, pair_sums).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__tensor_sums(void)
{
    return PyModule_Create(&module);
}
