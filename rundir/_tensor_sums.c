/* One fused pass over a chunk of a checkpoint's w, m and v: every sum the inspector
 * (rundir/inspect.py) takes, in one read of each value instead of numpy's eleven.
 *
 * The sums are taken in double lanes, so a sum comes out non-finite only when a value
 * is NaN or infinite (a float32 square cannot overflow a double); the caller then sums
 * that array again, masked, in numpy. Built without -ffast-math on purpose: NaN and
 * infinity must propagate for that test to hold. The loop is vectorised by OpenMP's simd
 * reductions (-fopenmp-simd, no OpenMP runtime) and compiled twice, for AVX2 and
 * for the baseline, the right one chosen when the module loads: a cluster's login and
 * GPU nodes need not share an instruction set.
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

PyDoc_STRVAR(chunk_sums_doc,
"chunk_sums(w, m, v, eps2, eps_scaled, with_update, /)\n--\n\n"
"Sums of one chunk: (ww, maxabs, v_sum, vv, dead, mm, uu).\n\n"
"w, m and v are C-contiguous float32 buffers of one length. ww, vv, mm and uu are sums\n"
"of squares (uu of m / (sqrt(v) + eps_scaled), 0.0 unless with_update); maxabs is the\n"
"largest |w| (NaNs skipped); dead counts v < eps2. A sum is NaN or infinite exactly\n"
"when its array holds a NaN or an infinity. The GIL is released while summing.");

static int
float32_buffer(PyObject *obj, Py_buffer *view, const char *name)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    if (view->itemsize != 4 || view->format == NULL || (strcmp(view->format, "f") != 0 && strcmp(view->format, "<f") != 0)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a float32 buffer, got format %s",
                     name, view->format ? view->format : "B");
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *
chunk_sums(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "chunk_sums() takes 6 arguments (%zd given)", nargs);
        return NULL;
    }
    double eps2 = PyFloat_AsDouble(args[3]), eps_scaled = PyFloat_AsDouble(args[4]);
    int with_update = PyObject_IsTrue(args[5]);
    if (PyErr_Occurred() || with_update < 0)
        return NULL;
    Py_buffer w, m, v;
    if (float32_buffer(args[0], &w, "w") < 0)
        return NULL;
    if (float32_buffer(args[1], &m, "m") < 0) {
        PyBuffer_Release(&w);
        return NULL;
    }
    if (float32_buffer(args[2], &v, "v") < 0) {
        PyBuffer_Release(&w);
        PyBuffer_Release(&m);
        return NULL;
    }
    PyObject *result = NULL;
    if (w.len != m.len || w.len != v.len) {
        PyErr_Format(PyExc_ValueError, "w, m and v differ in length (%zd, %zd, %zd bytes)", w.len, m.len, v.len);
    } else {
        Sums s;
        Py_BEGIN_ALLOW_THREADS
        fused_sums(w.buf, m.buf, v.buf, w.len / 4, (float)eps2, (float)eps_scaled, with_update, &s);
        Py_END_ALLOW_THREADS
        result = Py_BuildValue("(ddddLdd)", s.ww, (double)s.maxabs, s.v_sum, s.vv, s.dead, s.mm, s.uu);
    }
    PyBuffer_Release(&w);
    PyBuffer_Release(&m);
    PyBuffer_Release(&v);
    return result;
}

static PyMethodDef methods[] = {
    {"chunk_sums", (PyCFunction)(void (*)(void))chunk_sums, METH_FASTCALL, chunk_sums_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "rundir._tensor_sums",
    "The checkpoint inspector's fused pass over a chunk (see chunk_sums).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__tensor_sums(void)
{
    return PyModule_Create(&module);
}
