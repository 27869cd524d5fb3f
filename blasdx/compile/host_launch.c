/* blasdx's launch call: cuLaunchKernel from one C function, so a launch from Python costs one
 * call with plain integer arguments instead of a cuda.bindings call that converts each of
 * them to an object. Built once per machine and Python by blasdx.launch.native; the driver's
 * entry points come in as addresses from cuda.bindings (cuGetProcAddress), so nothing here
 * links against libcuda and the per-thread default stream setting is the one cuda.bindings uses.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef int (*launch_kernel_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                               unsigned, void *, void **, void **);
typedef int (*context_push_t)(void *);
typedef int (*context_pop_t)(void **);
typedef int (*context_device_t)(int *);

static launch_kernel_t launch_kernel = NULL;
static context_push_t context_push = NULL;
static context_pop_t context_pop = NULL;
static context_device_t context_device = NULL;

/* The arguments as unsigned integers (addresses, counts) into out: 0, or -1 with a Python error set. */
static int read_args(PyObject *const *args, Py_ssize_t given, Py_ssize_t wanted, const char *name,
                     unsigned long long *out) {
    if (given != wanted) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd integer arguments (%zd given)", name, wanted, given);
        return -1;
    }
    for (Py_ssize_t i = 0; i < wanted; ++i) {
        out[i] = PyLong_AsUnsignedLongLongMask(args[i]);
        if (out[i] == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Format(PyExc_TypeError, "%s(): argument %zd must be an int", name, i);
            return -1;
        }
    }
    return 0;
}

static int ready(void) {
    if (launch_kernel == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "set_entry_points() has not been called");
        return 0;
    }
    return 1;
}

/* set_entry_points(cuLaunchKernel, cuCtxPushCurrent, cuCtxPopCurrent, cuCtxGetDevice): the driver's functions
 * by address. */
static PyObject *set_entry_points(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    unsigned long long v[4];
    if (read_args(args, nargs, 4, "set_entry_points", v) < 0) return NULL;
    launch_kernel = (launch_kernel_t)(uintptr_t)v[0];
    context_push = (context_push_t)(uintptr_t)v[1];
    context_pop = (context_pop_t)(uintptr_t)v[2];
    context_device = (context_device_t)(uintptr_t)v[3];
    Py_RETURN_NONE;
}

/* launch(function, grid_x, grid_y, block_x, block_y, block_z, shared, stream, params) -> CUresult */
static PyObject *launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    unsigned long long v[9];
    if (read_args(args, nargs, 9, "launch", v) < 0 || !ready()) return NULL;
    int err;
    Py_BEGIN_ALLOW_THREADS  /* a launch waits while the stream's queue is full: other threads run meanwhile */
    err = launch_kernel((void *)(uintptr_t)v[0], (unsigned)v[1], (unsigned)v[2], 1, (unsigned)v[3],
                        (unsigned)v[4], (unsigned)v[5], (unsigned)v[6], (void *)(uintptr_t)v[7],
                        (void **)(uintptr_t)v[8], NULL);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(err);
}

/* The launch of launch_pointers' arguments v (function, grid_x, block_x, block_y, block_z, shared, stream, params,
 * slots, p0, p1, p2): the three pointers written into the first three 8-byte slots, then cuLaunchKernel. */
static int pointers_launch(const unsigned long long *v) {
    uint64_t *slots = (uint64_t *)(uintptr_t)v[8];
    slots[0] = v[9];
    slots[1] = v[10];
    slots[2] = v[11];
    return launch_kernel((void *)(uintptr_t)v[0], (unsigned)v[1], 1, 1, (unsigned)v[2], (unsigned)v[3],
                         (unsigned)v[4], (unsigned)v[5], (void *)(uintptr_t)v[6], (void **)(uintptr_t)v[7], NULL);
}

/* launch_pointers(function, grid_x, block_x, block_y, block_z, shared, stream, params, slots, p0, p1, p2)
 * -> CUresult */
static PyObject *launch_pointers(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    unsigned long long v[12];
    if (read_args(args, nargs, 12, "launch_pointers", v) < 0 || !ready()) return NULL;
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = pointers_launch(v);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(err);
}

/* launch_pointers_on(device, context, <launch_pointers' arguments>) -> CUresult: launch_pointers with ``device``
 * current: as it is when a context of it is current, else with ``context`` (its primary context) pushed on the
 * thread's context stack for the launch, popped after. */
static PyObject *launch_pointers_on(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    unsigned long long v[14];
    if (read_args(args, nargs, 14, "launch_pointers_on", v) < 0 || !ready()) return NULL;
    int err = 0;
    Py_BEGIN_ALLOW_THREADS  /* the context stack is the calling thread's own */
    int current = -1;
    int pushed = context_device(&current) != 0 || current != (int)v[0];
    if (pushed) err = context_push((void *)(uintptr_t)v[1]);
    if (!err) {
        err = pointers_launch(v + 2);
        if (pushed) {  /* the launch's result is what counts: a launch that ran must not be retried */
            void *popped = NULL;
            context_pop(&popped);
        }
    }
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(err);
}

static PyMethodDef methods[] = {
    {"set_entry_points", (PyCFunction)(void (*)(void))set_entry_points, METH_FASTCALL,
     "set_entry_points(cuLaunchKernel, cuCtxPushCurrent, cuCtxPopCurrent, cuCtxGetDevice): the driver's functions "
     "by address."},
    {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL,
     "launch(function, grid_x, grid_y, block_x, block_y, block_z, shared, stream, params) -> CUresult"},
    {"launch_pointers", (PyCFunction)(void (*)(void))launch_pointers, METH_FASTCALL,
     "launch_pointers(function, grid_x, block_x, block_y, block_z, shared, stream, params, slots, p0, p1, p2) "
     "-> CUresult"},
    {"launch_pointers_on", (PyCFunction)(void (*)(void))launch_pointers_on, METH_FASTCALL,
     "launch_pointers_on(device, context, function, grid_x, block_x, block_y, block_z, shared, stream, params, "
     "slots, p0, p1, p2) -> CUresult"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_blasdx_host_launch", NULL, -1, methods};

PyMODINIT_FUNC PyInit__blasdx_host_launch(void) { return PyModule_Create(&module); }
