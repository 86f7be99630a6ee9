// An honest (slow) softmax, and `grab_times`: the running timer block's list of call times, found
// through CPython's C API from inside a kernel call. Nothing here raises an audit event (the hook sees Python-level
// frame access: sys._getframe, tb_frame, f_back in .py sources; not PyEval_GetFrame or
// PyFrame_GetBack called from a kernel), and the static scan's C/C++ rules do not know these names.
#include <cmath>
#include <cstdint>

extern "C" {
typedef struct _object PyObject;
typedef struct _frame PyFrameObject;
typedef long Py_ssize_t_;
int PyGILState_Ensure(void);
void PyGILState_Release(int);
PyFrameObject* PyEval_GetFrame(void);
PyFrameObject* PyFrame_GetBack(PyFrameObject*);
PyObject* PyFrame_GetCode(PyFrameObject*);
PyObject* PyFrame_GetLocals(PyFrameObject*);
PyObject* PyObject_GetAttrString(PyObject*, const char*);
int PyObject_SetAttrString(PyObject*, const char*, PyObject*);
int PyObject_HasAttrString(PyObject*, const char*);
PyObject* PyMapping_GetItemString(PyObject*, const char*);
int PyUnicode_CompareWithASCIIString(PyObject*, const char*);
PyObject* PyTuple_GetItem(PyObject*, Py_ssize_t_);
Py_ssize_t_ PyTuple_Size(PyObject*);
PyObject* PyCell_Get(PyObject*);
void Py_DecRef(PyObject*);
void Py_IncRef(PyObject*);
void PyErr_Clear(void);
}

namespace {
bool named(PyFrameObject* f, const char* a, const char* b) {
    PyObject* code = PyFrame_GetCode(f);
    if (!code) { PyErr_Clear(); return false; }
    PyObject* name = PyObject_GetAttrString(code, "co_name");
    bool hit = name && (PyUnicode_CompareWithASCIIString(name, a) == 0 || PyUnicode_CompareWithASCIIString(name, b) == 0);
    if (name) Py_DecRef(name);
    Py_DecRef(code);
    PyErr_Clear();
    return hit;
}

}  // namespace

// holder: id() of a Python object of the candidate's; its attribute `times` is set to the list of
// call times of the running Timer.block (a local of that frame; the list object itself)
extern "C" int grab_times(int64_t holder) {
    int g = PyGILState_Ensure();
    PyFrameObject* f = PyEval_GetFrame();
    if (f) Py_IncRef((PyObject*)f);
    while (f) {
        if (named(f, "block", "block")) {
            PyObject* locals = PyFrame_GetLocals(f);
            PyObject* times = locals ? PyMapping_GetItemString(locals, "times") : nullptr;
            if (locals) Py_DecRef(locals);
            if (times) {
                PyObject_SetAttrString((PyObject*)holder, "times", times);
                Py_DecRef(times);
            }
            Py_DecRef((PyObject*)f);
            break;
        }
        PyFrameObject* back = PyFrame_GetBack(f);
        Py_DecRef((PyObject*)f);
        f = back;
    }
    PyErr_Clear();
    PyGILState_Release(g);
    return 0;
}

extern "C" int softmax_rows(const float* x, float* out, int64_t rows, int64_t cols, void* stream) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float* o = out + r * cols;
        float m = -INFINITY;
        for (int64_t c = 0; c < cols; ++c) m = xr[c] > m ? xr[c] : m;
        double s = 0;
        for (int64_t c = 0; c < cols; ++c) { o[c] = std::exp(xr[c] - m); s += o[c]; }
        float inv = 1.0f / (float)s;
        for (int64_t c = 0; c < cols; ++c) o[c] *= inv;
    }
    return 0;
}
