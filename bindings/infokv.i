/*
 * infokv.i — the one SWIG interface for the Python, Java and Go bindings.
 *
 * Nothing here mirrors a C declaration by hand: the public headers are %included as they are, and every
 * function reaches the three languages through typemaps chosen by *parameter names*. A new C function that
 * follows the header's naming conventions needs no edit here; bindings/check_coverage.py (a ctest) fails when a
 * public IKV_API function is missing from a generated binding. The conventions:
 *
 *   handle outputs      T **out                                  (any opaque handle: model, session, config...)
 *   scalar outputs      int32_t/int64_t/uint32_t/uint64_t/size_t/double *out, *out_seq, *out_token, *out_len,
 *                       *out_count, *out_size, *out_value, *out_bytes, *out_id, *out_version, *out_status,
 *                       *out_blocks, *out_cost_per_block, *out_layers, *out_kept_tokens, *out_uniform_tokens,
 *                       *out_loss, *out_max_loss, *out_evidence, *out_budget, *out_alpha, *out_compressions,
 *                       *out_guides, *out_begin, *out_end, *out_budget_tokens, *out_slack_tokens,
 *                       *out_protected_tokens, *out_released_tokens, *out_question, *out_probe_seconds
 *   byte buffers out    (char *out, size_t capacity)  (void *out, size_t capacity)  (uint8_t *out, size_t capacity)
 *   token buffers out   (int32_t *out_tokens, size_t capacity)  (int32_t *out_ids|out_seqs, size_t capacity)
 *   float buffers out   (float *out, size_t capacity)
 *   number arrays out   (int32_t|int64_t|uint64_t|double *out, size_t capacity) — an `*out` followed by `capacity` is
 *                       always an array, never a scalar
 *   text/bytes in       (const char *text, size_t text_len|len)  (const char *json, size_t json_len)
 *                       (const void *bytes, size_t len|size)
 *                       (const void *data, size_t size|len)  (const uint8_t *data, size_t size|len)
 *                       (const void *buffer, size_t size|len)
 *   token arrays in     (const int32_t *tokens, size_t n_tokens)  (const int32_t *prompt, size_t n_prompt)
 *   batches in          (const int32_t *seq_ids, const int32_t *tokens, size_t n_items)
 *   callbacks           (ikv_token_callback callback, void *user_data)
 *   option structs      SWIG proxies of the versioned structs (fill them with ikv_*_options_init)
 *
 * Status codes stay int32_t return values at this level; each language's idiomatic layer turns them into its
 * native errors (Python exceptions, Java InfokvException, Go error values).
 *
 * The per-language shape of these typemaps (what the generated functions look like):
 *   Python: outputs are appended to the returned list [status, out1, out2...]; buffer outputs take the
 *           capacity (an int) and return bytes / numpy arrays; inputs take str/bytes and int sequences
 *           (NumPy through its Python API only: no NumPy C API, so no NumPy ABI to match).
 *   Java:   outputs are one-element arrays (long[] for handles and 64-bit/size_t values, int[] for int32);
 *           buffers are byte[]/int[]/float[] passed by the caller; callbacks are NativeTokenSink objects.
 *   Go:     outputs are pointers (*uintptr for handles, *int64, *int32, *uint64); buffers and arrays are slices;
 *           text is a string; callbacks are cgo.Handle values (uintptr, 0 for none).
 */
%module(package="infokv") capi

%{
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
%}

%include <stdint.i>

/* ====================================================================================================== */
#if defined(SWIGPYTHON)
/* ====================================================================================================== */
%{
/* NumPy through its Python API only (numpy.empty, numpy.asarray) and the buffer protocol, never its C API: the
 * extension has no NumPy ABI to match, so one build imports beside NumPy 1.x and 2.x alike. */
static PyObject *ikv_np = NULL;

/* A new 1-d numpy array of n elements of `dtype` and its writable buffer (release `view` after use). */
static PyObject *ikv_py_new_array(Py_ssize_t n, const char *dtype, Py_buffer *view) {
  PyObject *a = PyObject_CallMethod(ikv_np, "empty", "ns", n, dtype);
  if (a == NULL) return NULL;
  if (PyObject_GetBuffer(a, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0) { Py_DECREF(a); return NULL; }
  return a;
}

/* Any 1-d sequence of ints (or array) as a C-contiguous int32 numpy array, cast as numpy.asarray casts, and its
 * buffer (release `view` after use). Anything but one dimension is a ValueError naming `what`. */
static PyObject *ikv_py_int32_array(PyObject *obj, const char *what, Py_buffer *view) {
  PyObject *a = PyObject_CallMethod(ikv_np, "asarray", "Os", obj, "int32");
  if (a == NULL) return NULL;
  PyObject *nd = PyObject_GetAttrString(a, "ndim");
  long ndim = nd != NULL ? PyLong_AsLong(nd) : -1;
  Py_XDECREF(nd);
  if (ndim != 1) {
    Py_DECREF(a);
    if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "%s must be a 1-d sequence of ints (got %ld dimensions)", what, ndim);
    return NULL;
  }
  PyObject *c = PyObject_CallMethod(ikv_np, "ascontiguousarray", "O", a);
  Py_DECREF(a);
  if (c == NULL) return NULL;
  if (PyObject_GetBuffer(c, view, PyBUF_C_CONTIGUOUS) != 0) { Py_DECREF(c); return NULL; }
  return c;
}

/* Streaming callback: the Python callable is called with (token, bytes) and returns an int (non-zero stops).
 * The GIL is released around the C call (swig -threads), so it is re-taken here. A Python exception stops the
 * generation and is re-raised when the C call returns. */
typedef struct ikv_py_cb_ctx {
  PyObject *callable;
  PyObject *exc_type, *exc_value, *exc_tb;
} ikv_py_cb_ctx;

static int32_t ikv_py_token_trampoline(void *user_data, int32_t token, const char *text, size_t len) {
  ikv_py_cb_ctx *ctx = (ikv_py_cb_ctx *)user_data;
  int32_t stop = 1;
  PyGILState_STATE g = PyGILState_Ensure();
  if (ctx->exc_type == NULL) {
    PyObject *r = PyObject_CallFunction(ctx->callable, "iy#", (int)token, text, (Py_ssize_t)len);
    if (r == NULL) {
      PyErr_Fetch(&ctx->exc_type, &ctx->exc_value, &ctx->exc_tb);
      if (ctx->exc_type == NULL) { Py_INCREF(PyExc_RuntimeError); ctx->exc_type = PyExc_RuntimeError; }
    } else {
      stop = (r == Py_None) ? 0 : (int32_t)(PyObject_IsTrue(r) != 0);
      Py_DECREF(r);
    }
  }
  PyGILState_Release(g);
  return stop;
}
%}
%init %{
  ikv_np = PyImport_ImportModule("numpy");
  if (ikv_np == NULL) return NULL;
%}

/* handles out */
%typemap(in, numinputs=0, noblock=1) SWIGTYPE **out ($*1_ltype tmp = NULL) { $1 = &tmp; }
%typemap(argout, noblock=1) SWIGTYPE **out {
  $result = SWIG_Python_AppendOutput($result, SWIG_NewPointerObj(SWIG_as_voidptr(tmp$argnum), $*1_descriptor, 0));
}

/* scalar outs */
%define IKV_PY_SCALAR_OUT1(TYPE, NAME, FROM)
%typemap(in, numinputs=0, noblock=1) TYPE *NAME (TYPE tmp = 0) { $1 = &tmp; }
%typemap(argout, noblock=1) TYPE *NAME { $result = SWIG_Python_AppendOutput($result, FROM(tmp$argnum)); }
%enddef
%define IKV_PY_SCALAR_OUT(TYPE, FROM)
IKV_PY_SCALAR_OUT1(TYPE, out, FROM)
IKV_PY_SCALAR_OUT1(TYPE, out_seq, FROM)
IKV_PY_SCALAR_OUT1(TYPE, out_token, FROM)
IKV_PY_SCALAR_OUT1(TYPE, out_len, FROM)
IKV_PY_SCALAR_OUT1(TYPE, out_count, FROM)
IKV_PY_SCALAR_OUT1(TYPE, out_size, FROM)
IKV_PY_SCALAR_OUT1(TYPE, out_value, FROM)
IKV_PY_SCALAR_OUT1(TYPE, out_bytes, FROM)
IKV_PY_SCALAR_OUT1(TYPE, out_id, FROM)
IKV_PY_SCALAR_OUT1(TYPE, out_version, FROM)
IKV_PY_SCALAR_OUT1(TYPE, out_status, FROM)
IKV_PY_SCALAR_OUT1(TYPE, out_blocks, FROM)
IKV_PY_SCALAR_OUT1(TYPE, out_cost_per_block, FROM)
IKV_PY_SCALAR_OUT1(TYPE, out_layers, FROM)
IKV_PY_SCALAR_OUT1(TYPE, out_kept_tokens, FROM)
IKV_PY_SCALAR_OUT1(TYPE, out_uniform_tokens, FROM)
IKV_PY_SCALAR_OUT1(TYPE, out_loss, FROM)
IKV_PY_SCALAR_OUT1(TYPE, out_max_loss, FROM)
IKV_PY_SCALAR_OUT1(TYPE, out_evidence, FROM)
IKV_PY_SCALAR_OUT1(TYPE, out_budget, FROM)
IKV_PY_SCALAR_OUT1(TYPE, out_alpha, FROM)
IKV_PY_SCALAR_OUT1(TYPE, out_compressions, FROM)
IKV_PY_SCALAR_OUT1(TYPE, out_begin, FROM)
IKV_PY_SCALAR_OUT1(TYPE, out_end, FROM)
IKV_PY_SCALAR_OUT1(TYPE, out_guides, FROM)
IKV_PY_SCALAR_OUT1(TYPE, out_budget_tokens, FROM)
IKV_PY_SCALAR_OUT1(TYPE, out_slack_tokens, FROM)
IKV_PY_SCALAR_OUT1(TYPE, out_protected_tokens, FROM)
IKV_PY_SCALAR_OUT1(TYPE, out_released_tokens, FROM)
IKV_PY_SCALAR_OUT1(TYPE, out_question, FROM)
IKV_PY_SCALAR_OUT1(TYPE, out_probe_seconds, FROM)
%enddef
IKV_PY_SCALAR_OUT(int32_t, PyLong_FromLong)
IKV_PY_SCALAR_OUT(uint32_t, PyLong_FromUnsignedLong)
IKV_PY_SCALAR_OUT(int64_t, PyLong_FromLongLong)
IKV_PY_SCALAR_OUT(uint64_t, PyLong_FromUnsignedLongLong)
IKV_PY_SCALAR_OUT(size_t, PyLong_FromSize_t)
IKV_PY_SCALAR_OUT(double, PyFloat_FromDouble)

/* byte buffers out: the caller passes the capacity; the whole buffer comes back (slice it with the length). */
%define IKV_PY_BYTES_OUT(CTYPE)
%typemap(in, noblock=1) (CTYPE *out, size_t capacity) (PyObject *buf = NULL) {
  {
    Py_ssize_t cap = PyLong_AsSsize_t($input);
    if (cap < 0) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "capacity must be >= 0");
      SWIG_fail;
    }
    buf = PyBytes_FromStringAndSize(NULL, cap);
    if (buf == NULL) SWIG_fail;
    $1 = ($1_ltype)(cap > 0 ? PyBytes_AS_STRING(buf) : NULL);
    $2 = (size_t)cap;
  }
}
%typemap(argout, noblock=1) (CTYPE *out, size_t capacity) {
  Py_INCREF(buf$argnum);
  $result = SWIG_Python_AppendOutput($result, buf$argnum);
}
%typemap(freearg, noblock=1) (CTYPE *out, size_t capacity) { Py_XDECREF(buf$argnum); }
%enddef
IKV_PY_BYTES_OUT(char)
IKV_PY_BYTES_OUT(void)
IKV_PY_BYTES_OUT(uint8_t)

/* numeric buffers out: numpy arrays of the capacity */
%define IKV_PY_ARRAY_OUT(CTYPE, NPTYPE, NAME)
%typemap(in, noblock=1) (CTYPE *NAME, size_t capacity) (PyObject *arr = NULL, Py_buffer view, int have_view = 0) {
  {
    Py_ssize_t cap = PyLong_AsSsize_t($input);
    if (cap < 0) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "capacity must be >= 0");
      SWIG_fail;
    }
    arr = ikv_py_new_array(cap, NPTYPE, &view);
    if (arr == NULL) SWIG_fail;
    have_view = 1;
    $1 = ($1_ltype)(cap > 0 ? view.buf : NULL);
    $2 = (size_t)cap;
  }
}
%typemap(argout, noblock=1) (CTYPE *NAME, size_t capacity) {
  Py_INCREF(arr$argnum);
  $result = SWIG_Python_AppendOutput($result, arr$argnum);
}
%typemap(freearg, noblock=1) (CTYPE *NAME, size_t capacity) {
  if (have_view$argnum) PyBuffer_Release(&view$argnum);
  Py_XDECREF(arr$argnum);
}
%enddef
IKV_PY_ARRAY_OUT(int32_t, "int32", out_tokens)
IKV_PY_ARRAY_OUT(int32_t, "int32", out_ids)
IKV_PY_ARRAY_OUT(int32_t, "int32", out_seqs)
IKV_PY_ARRAY_OUT(float, "float32", out)
IKV_PY_ARRAY_OUT(float, "float32", out_logits)
IKV_PY_ARRAY_OUT(int32_t, "int32", out)
IKV_PY_ARRAY_OUT(int64_t, "int64", out)
IKV_PY_ARRAY_OUT(uint64_t, "uint64", out)
IKV_PY_ARRAY_OUT(double, "float64", out)

/* text and bytes in: str (encoded as UTF-8) or any bytes-like object */
%define IKV_PY_BYTES_IN(CTYPE, NAME, LEN)
%typemap(in, noblock=1) (CTYPE NAME, size_t LEN) (Py_buffer view, int have_view = 0) {
  if (PyUnicode_Check($input)) {
    Py_ssize_t n = 0;
    const char *s = PyUnicode_AsUTF8AndSize($input, &n);
    if (s == NULL) SWIG_fail;
    $1 = ($1_ltype)s;
    $2 = (size_t)n;
  } else {
    if (PyObject_GetBuffer($input, &view, PyBUF_SIMPLE) != 0) SWIG_fail;
    have_view = 1;
    $1 = ($1_ltype)view.buf;
    $2 = (size_t)view.len;
  }
}
%typemap(freearg, noblock=1) (CTYPE NAME, size_t LEN) { if (have_view$argnum) PyBuffer_Release(&view$argnum); }
%enddef
IKV_PY_BYTES_IN(const char *, text, text_len)
IKV_PY_BYTES_IN(const char *, text, len)
IKV_PY_BYTES_IN(const void *, bytes, len)
IKV_PY_BYTES_IN(const void *, bytes, size)
IKV_PY_BYTES_IN(const char *, json, json_len)
IKV_PY_BYTES_IN(const void *, data, size)
IKV_PY_BYTES_IN(const void *, data, len)
IKV_PY_BYTES_IN(const uint8_t *, data, size)
IKV_PY_BYTES_IN(const uint8_t *, data, len)
IKV_PY_BYTES_IN(const void *, buffer, size)
IKV_PY_BYTES_IN(const void *, buffer, len)

/* token arrays in: any sequence of ints or a numpy array (converted to int32), or None */
%define IKV_PY_INTS_IN(NAME, LEN)
%typemap(in, noblock=1) (const int32_t *NAME, size_t LEN) (PyObject *arr = NULL, Py_buffer view, int have_view = 0) {
  if ($input == Py_None) {
    $1 = NULL; $2 = 0;
  } else {
    arr = ikv_py_int32_array($input, "token ids", &view);
    if (arr == NULL) SWIG_fail;
    have_view = 1;
    $1 = ($1_ltype)view.buf;
    $2 = (size_t)(view.len / (Py_ssize_t)sizeof(int32_t));
    if ($2 == 0) $1 = NULL;
  }
}
%typemap(freearg, noblock=1) (const int32_t *NAME, size_t LEN) {
  if (have_view$argnum) PyBuffer_Release(&view$argnum);
  Py_XDECREF(arr$argnum);
}
%enddef
IKV_PY_INTS_IN(tokens, n_tokens)
IKV_PY_INTS_IN(prompt, n_prompt)
%typemap(in, noblock=1) (const int32_t *seq_ids, const int32_t *tokens, size_t n_items)
    (PyObject *a1 = NULL, PyObject *a2 = NULL, Py_buffer v1, Py_buffer v2, int have1 = 0, int have2 = 0) {
  {
    PyObject *s = NULL, *t = NULL;
    if (!PyArg_ParseTuple($input, "OO", &s, &t)) SWIG_fail;
    a1 = ikv_py_int32_array(s, "seq_ids", &v1);
    if (a1 == NULL) SWIG_fail;
    have1 = 1;
    a2 = ikv_py_int32_array(t, "tokens", &v2);
    if (a2 == NULL) SWIG_fail;
    have2 = 1;
    if (v1.len != v2.len) { PyErr_SetString(PyExc_ValueError, "seq_ids and tokens differ in length"); SWIG_fail; }
    $1 = (int32_t *)v1.buf;
    $2 = (int32_t *)v2.buf;
    $3 = (size_t)(v1.len / (Py_ssize_t)sizeof(int32_t));
  }
}
%typemap(freearg, noblock=1) (const int32_t *seq_ids, const int32_t *tokens, size_t n_items) {
  if (have1$argnum) PyBuffer_Release(&v1$argnum);
  if (have2$argnum) PyBuffer_Release(&v2$argnum);
  Py_XDECREF(a1$argnum); Py_XDECREF(a2$argnum);
}

/* callbacks: a callable (token: int, text: bytes) -> int|bool|None (truthy stops), or None */
%typemap(in, noblock=1) (ikv_token_callback callback, void *user_data) (ikv_py_cb_ctx ctx) {
  memset(&ctx, 0, sizeof(ctx));
  if ($input == Py_None) {
    $1 = NULL; $2 = NULL;
  } else {
    if (!PyCallable_Check($input)) { PyErr_SetString(PyExc_TypeError, "callback must be callable or None"); SWIG_fail; }
    ctx.callable = $input;
    $1 = ikv_py_token_trampoline;
    $2 = &ctx;
  }
}
%typemap(argout, noblock=1) (ikv_token_callback callback, void *user_data) {
  if (ctx$argnum.exc_type != NULL) {
    PyErr_Restore(ctx$argnum.exc_type, ctx$argnum.exc_value, ctx$argnum.exc_tb);
    ctx$argnum.exc_type = ctx$argnum.exc_value = ctx$argnum.exc_tb = NULL;
    SWIG_fail;
  }
}

/* ====================================================================================================== */
#elif defined(SWIGJAVA)
/* ====================================================================================================== */
/* uint64_t by value (a seed) as a Java long, bit for bit, instead of SWIG's BigInteger */
%apply int64_t { uint64_t };
%pragma(java) jniclassclassmodifiers="final class"
%pragma(java) moduleclassmodifiers="final class"
%typemap(javaclassmodifiers) SWIGTYPE, SWIGTYPE *, SWIGTYPE &, SWIGTYPE [] "class"
%pragma(java) jniclasscode=%{
  static { NativeLoader.load(); }
%}

%{
/* Streaming callback for Java: calls NativeTokenSink.onToken(int, byte[]) on the calling thread. A Java exception
 * stops the generation and is rethrown when the C call returns. */
typedef struct ikv_java_cb_ctx {
  JNIEnv *env;
  jobject sink;
  jmethodID mid;
  jthrowable pending;
} ikv_java_cb_ctx;

static int32_t ikv_java_token_trampoline(void *user_data, int32_t token, const char *text, size_t len) {
  ikv_java_cb_ctx *ctx = (ikv_java_cb_ctx *)user_data;
  JNIEnv *jenv = ctx->env;
  if (ctx->pending != NULL) return 1;
  jbyteArray bytes = (*jenv)->NewByteArray(jenv, (jsize)len);
  if (bytes == NULL) { ctx->pending = (*jenv)->ExceptionOccurred(jenv); (*jenv)->ExceptionClear(jenv); return 1; }
  if (len > 0) (*jenv)->SetByteArrayRegion(jenv, bytes, 0, (jsize)len, (const jbyte *)text);
  jint r = (*jenv)->CallIntMethod(jenv, ctx->sink, ctx->mid, (jint)token, bytes);
  (*jenv)->DeleteLocalRef(jenv, bytes);
  if ((*jenv)->ExceptionCheck(jenv)) {
    ctx->pending = (*jenv)->ExceptionOccurred(jenv);
    (*jenv)->ExceptionClear(jenv);
    return 1;
  }
  return r != 0;
}
%}

/* handles out: long[1] receiving the address (the Java layer wraps it) */
%typemap(jni) SWIGTYPE **out "jlongArray"
%typemap(jtype) SWIGTYPE **out "long[]"
%typemap(jstype) SWIGTYPE **out "long[]"
%typemap(javain) SWIGTYPE **out "$javainput"
%typemap(in, noblock=1) SWIGTYPE **out ($*1_ltype tmp = NULL) {
  if (!$input || (*jenv)->GetArrayLength(jenv, $input) < 1) {
    SWIG_JavaThrowException(jenv, SWIG_JavaIllegalArgumentException, "output array must have one element");
    return $null;
  }
  $1 = &tmp;
}
%typemap(argout, noblock=1) SWIGTYPE **out {
  { jlong v = (jlong)(intptr_t)tmp$argnum; (*jenv)->SetLongArrayRegion(jenv, $input, 0, 1, &v); }
}

/* scalar outs: one-element arrays */
%define IKV_JAVA_SCALAR_OUT1(TYPE, NAME, JNIARR, JARR, JELEM, SETTER)
%typemap(jni) TYPE *NAME "JNIARR"
%typemap(jtype) TYPE *NAME "JARR"
%typemap(jstype) TYPE *NAME "JARR"
%typemap(javain) TYPE *NAME "$javainput"
%typemap(in, noblock=1) TYPE *NAME (TYPE tmp = 0) {
  if (!$input || (*jenv)->GetArrayLength(jenv, $input) < 1) {
    SWIG_JavaThrowException(jenv, SWIG_JavaIllegalArgumentException, "output array must have one element");
    return $null;
  }
  $1 = &tmp;
}
%typemap(argout, noblock=1) TYPE *NAME {
  { JELEM v = (JELEM)tmp$argnum; (*jenv)->SETTER(jenv, $input, 0, 1, &v); }
}
%enddef
%define IKV_JAVA_SCALAR_OUT(TYPE, JNIARR, JARR, JELEM, SETTER)
IKV_JAVA_SCALAR_OUT1(TYPE, out, JNIARR, JARR, JELEM, SETTER)
IKV_JAVA_SCALAR_OUT1(TYPE, out_seq, JNIARR, JARR, JELEM, SETTER)
IKV_JAVA_SCALAR_OUT1(TYPE, out_token, JNIARR, JARR, JELEM, SETTER)
IKV_JAVA_SCALAR_OUT1(TYPE, out_len, JNIARR, JARR, JELEM, SETTER)
IKV_JAVA_SCALAR_OUT1(TYPE, out_count, JNIARR, JARR, JELEM, SETTER)
IKV_JAVA_SCALAR_OUT1(TYPE, out_size, JNIARR, JARR, JELEM, SETTER)
IKV_JAVA_SCALAR_OUT1(TYPE, out_value, JNIARR, JARR, JELEM, SETTER)
IKV_JAVA_SCALAR_OUT1(TYPE, out_bytes, JNIARR, JARR, JELEM, SETTER)
IKV_JAVA_SCALAR_OUT1(TYPE, out_id, JNIARR, JARR, JELEM, SETTER)
IKV_JAVA_SCALAR_OUT1(TYPE, out_version, JNIARR, JARR, JELEM, SETTER)
IKV_JAVA_SCALAR_OUT1(TYPE, out_status, JNIARR, JARR, JELEM, SETTER)
IKV_JAVA_SCALAR_OUT1(TYPE, out_blocks, JNIARR, JARR, JELEM, SETTER)
IKV_JAVA_SCALAR_OUT1(TYPE, out_cost_per_block, JNIARR, JARR, JELEM, SETTER)
IKV_JAVA_SCALAR_OUT1(TYPE, out_layers, JNIARR, JARR, JELEM, SETTER)
IKV_JAVA_SCALAR_OUT1(TYPE, out_kept_tokens, JNIARR, JARR, JELEM, SETTER)
IKV_JAVA_SCALAR_OUT1(TYPE, out_uniform_tokens, JNIARR, JARR, JELEM, SETTER)
IKV_JAVA_SCALAR_OUT1(TYPE, out_loss, JNIARR, JARR, JELEM, SETTER)
IKV_JAVA_SCALAR_OUT1(TYPE, out_max_loss, JNIARR, JARR, JELEM, SETTER)
IKV_JAVA_SCALAR_OUT1(TYPE, out_evidence, JNIARR, JARR, JELEM, SETTER)
IKV_JAVA_SCALAR_OUT1(TYPE, out_budget, JNIARR, JARR, JELEM, SETTER)
IKV_JAVA_SCALAR_OUT1(TYPE, out_begin, JNIARR, JARR, JELEM, SETTER)
IKV_JAVA_SCALAR_OUT1(TYPE, out_end, JNIARR, JARR, JELEM, SETTER)
IKV_JAVA_SCALAR_OUT1(TYPE, out_budget_tokens, JNIARR, JARR, JELEM, SETTER)
IKV_JAVA_SCALAR_OUT1(TYPE, out_slack_tokens, JNIARR, JARR, JELEM, SETTER)
IKV_JAVA_SCALAR_OUT1(TYPE, out_protected_tokens, JNIARR, JARR, JELEM, SETTER)
IKV_JAVA_SCALAR_OUT1(TYPE, out_released_tokens, JNIARR, JARR, JELEM, SETTER)
IKV_JAVA_SCALAR_OUT1(TYPE, out_question, JNIARR, JARR, JELEM, SETTER)
IKV_JAVA_SCALAR_OUT1(TYPE, out_probe_seconds, JNIARR, JARR, JELEM, SETTER)
IKV_JAVA_SCALAR_OUT1(TYPE, out_alpha, JNIARR, JARR, JELEM, SETTER)
IKV_JAVA_SCALAR_OUT1(TYPE, out_compressions, JNIARR, JARR, JELEM, SETTER)
IKV_JAVA_SCALAR_OUT1(TYPE, out_guides, JNIARR, JARR, JELEM, SETTER)
%enddef
IKV_JAVA_SCALAR_OUT(int32_t, jintArray, int[], jint, SetIntArrayRegion)
IKV_JAVA_SCALAR_OUT(uint32_t, jlongArray, long[], jlong, SetLongArrayRegion)
IKV_JAVA_SCALAR_OUT(int64_t, jlongArray, long[], jlong, SetLongArrayRegion)
IKV_JAVA_SCALAR_OUT(uint64_t, jlongArray, long[], jlong, SetLongArrayRegion)
IKV_JAVA_SCALAR_OUT(size_t, jlongArray, long[], jlong, SetLongArrayRegion)
IKV_JAVA_SCALAR_OUT(double, jdoubleArray, double[], jdouble, SetDoubleArrayRegion)

/* primitive arrays (in, out or both): the Java array's length is the C length/capacity; null is NULL/0 */
%define IKV_JAVA_ARRAY(CTYPE, NAME, LEN, JNIARR, JARR, JELEM, GET, RELEASE, MODE)
%typemap(jni) (CTYPE NAME, size_t LEN) "JNIARR"
%typemap(jtype) (CTYPE NAME, size_t LEN) "JARR"
%typemap(jstype) (CTYPE NAME, size_t LEN) "JARR"
%typemap(javain) (CTYPE NAME, size_t LEN) "$javainput"
%typemap(in, noblock=1) (CTYPE NAME, size_t LEN) (JELEM *elems = NULL) {
  if ($input) {
    $2 = (size_t)(*jenv)->GetArrayLength(jenv, $input);
    elems = (*jenv)->GET(jenv, $input, NULL);
    if (!elems) return $null;
    $1 = ($1_ltype)($2 > 0 ? (void *)elems : NULL);
  } else {
    $1 = NULL; $2 = 0;
  }
}
%typemap(freearg, noblock=1) (CTYPE NAME, size_t LEN) {
  if (elems$argnum) (*jenv)->RELEASE(jenv, $input, elems$argnum, MODE);
}
%typemap(argout) (CTYPE NAME, size_t LEN) ""
%enddef
IKV_JAVA_ARRAY(char *, out, capacity, jbyteArray, byte[], jbyte, GetByteArrayElements, ReleaseByteArrayElements, 0)
IKV_JAVA_ARRAY(void *, out, capacity, jbyteArray, byte[], jbyte, GetByteArrayElements, ReleaseByteArrayElements, 0)
IKV_JAVA_ARRAY(uint8_t *, out, capacity, jbyteArray, byte[], jbyte, GetByteArrayElements, ReleaseByteArrayElements, 0)
IKV_JAVA_ARRAY(int32_t *, out_tokens, capacity, jintArray, int[], jint, GetIntArrayElements, ReleaseIntArrayElements, 0)
IKV_JAVA_ARRAY(int32_t *, out_ids, capacity, jintArray, int[], jint, GetIntArrayElements, ReleaseIntArrayElements, 0)
IKV_JAVA_ARRAY(int32_t *, out_seqs, capacity, jintArray, int[], jint, GetIntArrayElements, ReleaseIntArrayElements, 0)
IKV_JAVA_ARRAY(float *, out, capacity, jfloatArray, float[], jfloat, GetFloatArrayElements, ReleaseFloatArrayElements, 0)
IKV_JAVA_ARRAY(float *, out_logits, capacity, jfloatArray, float[], jfloat, GetFloatArrayElements, ReleaseFloatArrayElements, 0)
IKV_JAVA_ARRAY(int32_t *, out, capacity, jintArray, int[], jint, GetIntArrayElements, ReleaseIntArrayElements, 0)
IKV_JAVA_ARRAY(int64_t *, out, capacity, jlongArray, long[], jlong, GetLongArrayElements, ReleaseLongArrayElements, 0)
IKV_JAVA_ARRAY(uint64_t *, out, capacity, jlongArray, long[], jlong, GetLongArrayElements, ReleaseLongArrayElements, 0)
IKV_JAVA_ARRAY(double *, out, capacity, jdoubleArray, double[], jdouble, GetDoubleArrayElements, ReleaseDoubleArrayElements, 0)
IKV_JAVA_ARRAY(const char *, text, text_len, jbyteArray, byte[], jbyte, GetByteArrayElements, ReleaseByteArrayElements, JNI_ABORT)
IKV_JAVA_ARRAY(const char *, json, json_len, jbyteArray, byte[], jbyte, GetByteArrayElements, ReleaseByteArrayElements, JNI_ABORT)
IKV_JAVA_ARRAY(const char *, text, len, jbyteArray, byte[], jbyte, GetByteArrayElements, ReleaseByteArrayElements, JNI_ABORT)
IKV_JAVA_ARRAY(const void *, bytes, len, jbyteArray, byte[], jbyte, GetByteArrayElements, ReleaseByteArrayElements, JNI_ABORT)
IKV_JAVA_ARRAY(const void *, bytes, size, jbyteArray, byte[], jbyte, GetByteArrayElements, ReleaseByteArrayElements, JNI_ABORT)
IKV_JAVA_ARRAY(const void *, data, size, jbyteArray, byte[], jbyte, GetByteArrayElements, ReleaseByteArrayElements, JNI_ABORT)
IKV_JAVA_ARRAY(const void *, data, len, jbyteArray, byte[], jbyte, GetByteArrayElements, ReleaseByteArrayElements, JNI_ABORT)
IKV_JAVA_ARRAY(const uint8_t *, data, size, jbyteArray, byte[], jbyte, GetByteArrayElements, ReleaseByteArrayElements, JNI_ABORT)
IKV_JAVA_ARRAY(const uint8_t *, data, len, jbyteArray, byte[], jbyte, GetByteArrayElements, ReleaseByteArrayElements, JNI_ABORT)
IKV_JAVA_ARRAY(const void *, buffer, size, jbyteArray, byte[], jbyte, GetByteArrayElements, ReleaseByteArrayElements, JNI_ABORT)
IKV_JAVA_ARRAY(const void *, buffer, len, jbyteArray, byte[], jbyte, GetByteArrayElements, ReleaseByteArrayElements, JNI_ABORT)
IKV_JAVA_ARRAY(const int32_t *, tokens, n_tokens, jintArray, int[], jint, GetIntArrayElements, ReleaseIntArrayElements, JNI_ABORT)
IKV_JAVA_ARRAY(const int32_t *, prompt, n_prompt, jintArray, int[], jint, GetIntArrayElements, ReleaseIntArrayElements, JNI_ABORT)

%typemap(jni) (const int32_t *seq_ids, const int32_t *tokens, size_t n_items) "jintArray"
%typemap(jtype) (const int32_t *seq_ids, const int32_t *tokens, size_t n_items) "int[]"
%typemap(jstype) (const int32_t *seq_ids, const int32_t *tokens, size_t n_items) "int[]"
%typemap(javain) (const int32_t *seq_ids, const int32_t *tokens, size_t n_items) "$javainput"
/* one interleaved array: seq0, tok0, seq1, tok1, ... (a multi-argument typemap has one Java parameter) */
%typemap(in, noblock=1) (const int32_t *seq_ids, const int32_t *tokens, size_t n_items) (int32_t *split = NULL) {
  {
    jsize n = $input ? (*jenv)->GetArrayLength(jenv, $input) : 0;
    if (n % 2 != 0) { SWIG_JavaThrowException(jenv, SWIG_JavaIllegalArgumentException, "batch array must hold (seq, token) pairs"); return $null; }
    jint *e = $input ? (*jenv)->GetIntArrayElements(jenv, $input, NULL) : NULL;
    split = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    if (!split) {
      if (e) (*jenv)->ReleaseIntArrayElements(jenv, $input, e, JNI_ABORT);
      SWIG_JavaThrowException(jenv, SWIG_JavaOutOfMemoryError, "out of memory");
      return $null;
    }
    for (jsize i = 0; i < n / 2; ++i) { split[i] = e[2 * i]; split[n / 2 + i] = e[2 * i + 1]; }
    if (e) (*jenv)->ReleaseIntArrayElements(jenv, $input, e, JNI_ABORT);
    $1 = n > 0 ? split : NULL; $2 = n > 0 ? split + n / 2 : NULL; $3 = (size_t)(n / 2);
  }
}
%typemap(freearg, noblock=1) (const int32_t *seq_ids, const int32_t *tokens, size_t n_items) { free(split$argnum); }

/* callbacks: a NativeTokenSink (or null) */
%typemap(jni) (ikv_token_callback callback, void *user_data) "jobject"
%typemap(jtype) (ikv_token_callback callback, void *user_data) "NativeTokenSink"
%typemap(jstype) (ikv_token_callback callback, void *user_data) "NativeTokenSink"
%typemap(javain) (ikv_token_callback callback, void *user_data) "$javainput"
%typemap(in, noblock=1) (ikv_token_callback callback, void *user_data) (ikv_java_cb_ctx ctx) {
  memset(&ctx, 0, sizeof(ctx));
  if ($input) {
    jclass cls = (*jenv)->GetObjectClass(jenv, $input);
    ctx.env = jenv;
    ctx.sink = $input;
    ctx.mid = (*jenv)->GetMethodID(jenv, cls, "onToken", "(I[B)I");
    if (!ctx.mid) return $null;
    $1 = ikv_java_token_trampoline;
    $2 = &ctx;
  } else {
    $1 = NULL; $2 = NULL;
  }
}
%typemap(freearg, noblock=1) (ikv_token_callback callback, void *user_data) {
  if (ctx$argnum.pending) (*jenv)->Throw(jenv, ctx$argnum.pending);
}

/* ====================================================================================================== */
#elif defined(SWIGGO)
/* ====================================================================================================== */
%{
/* Defined by //export in internal/capi/callback.go: dispatches to the Go function behind a cgo.Handle. */
extern int32_t ikvGoTokenTrampoline(void *user_data, int32_t token, char *text, size_t len);
%}

/* handles out: *uintptr receiving the address (the Go layer wraps it) */
%typemap(gotype) SWIGTYPE **out "*uintptr"
%typemap(imtype) SWIGTYPE **out "*uintptr"
%typemap(goin) SWIGTYPE **out "$result = $input"
%typemap(in, noblock=1) SWIGTYPE **out { $1 = ($1_ltype)$input; }
%typemap(argout) SWIGTYPE **out ""
%typemap(goargout) SWIGTYPE **out ""

%define IKV_GO_SCALAR_OUT(TYPE, GOTYPE)
%typemap(gotype) TYPE *out, TYPE *out_seq, TYPE *out_token, TYPE *out_len, TYPE *out_count, TYPE *out_size,
    TYPE *out_value, TYPE *out_bytes, TYPE *out_id, TYPE *out_version, TYPE *out_status,
    TYPE *out_blocks, TYPE *out_cost_per_block, TYPE *out_layers, TYPE *out_kept_tokens, TYPE *out_uniform_tokens,
    TYPE *out_loss, TYPE *out_max_loss, TYPE *out_evidence, TYPE *out_budget, TYPE *out_alpha,
    TYPE *out_compressions, TYPE *out_guides, TYPE *out_begin, TYPE *out_end,
    TYPE *out_budget_tokens, TYPE *out_slack_tokens, TYPE *out_protected_tokens, TYPE *out_released_tokens,
    TYPE *out_question, TYPE *out_probe_seconds "*GOTYPE"
%typemap(imtype) TYPE *out, TYPE *out_seq, TYPE *out_token, TYPE *out_len, TYPE *out_count, TYPE *out_size,
    TYPE *out_value, TYPE *out_bytes, TYPE *out_id, TYPE *out_version, TYPE *out_status,
    TYPE *out_blocks, TYPE *out_cost_per_block, TYPE *out_layers, TYPE *out_kept_tokens, TYPE *out_uniform_tokens,
    TYPE *out_loss, TYPE *out_max_loss, TYPE *out_evidence, TYPE *out_budget, TYPE *out_alpha,
    TYPE *out_compressions, TYPE *out_guides, TYPE *out_begin, TYPE *out_end,
    TYPE *out_budget_tokens, TYPE *out_slack_tokens, TYPE *out_protected_tokens, TYPE *out_released_tokens,
    TYPE *out_question, TYPE *out_probe_seconds "*GOTYPE"
%typemap(in, noblock=1) TYPE *out, TYPE *out_seq, TYPE *out_token, TYPE *out_len, TYPE *out_count, TYPE *out_size,
    TYPE *out_value, TYPE *out_bytes, TYPE *out_id, TYPE *out_version, TYPE *out_status,
    TYPE *out_blocks, TYPE *out_cost_per_block, TYPE *out_layers, TYPE *out_kept_tokens, TYPE *out_uniform_tokens,
    TYPE *out_loss, TYPE *out_max_loss, TYPE *out_evidence, TYPE *out_budget, TYPE *out_alpha,
    TYPE *out_compressions, TYPE *out_guides, TYPE *out_begin, TYPE *out_end,
    TYPE *out_budget_tokens, TYPE *out_slack_tokens, TYPE *out_protected_tokens, TYPE *out_released_tokens,
    TYPE *out_question, TYPE *out_probe_seconds { $1 = ($1_ltype)$input; }
%typemap(argout) TYPE *out, TYPE *out_seq, TYPE *out_token, TYPE *out_len, TYPE *out_count, TYPE *out_size,
    TYPE *out_value, TYPE *out_bytes, TYPE *out_id, TYPE *out_version, TYPE *out_status,
    TYPE *out_blocks, TYPE *out_cost_per_block, TYPE *out_layers, TYPE *out_kept_tokens, TYPE *out_uniform_tokens,
    TYPE *out_loss, TYPE *out_max_loss, TYPE *out_evidence, TYPE *out_budget, TYPE *out_alpha,
    TYPE *out_compressions, TYPE *out_guides, TYPE *out_begin, TYPE *out_end,
    TYPE *out_budget_tokens, TYPE *out_slack_tokens, TYPE *out_protected_tokens, TYPE *out_released_tokens,
    TYPE *out_question, TYPE *out_probe_seconds ""
%enddef
IKV_GO_SCALAR_OUT(int32_t, int32)
IKV_GO_SCALAR_OUT(uint32_t, uint32)
IKV_GO_SCALAR_OUT(int64_t, int64)
IKV_GO_SCALAR_OUT(uint64_t, uint64)
IKV_GO_SCALAR_OUT(size_t, uint64)
IKV_GO_SCALAR_OUT(double, float64)

/* slices: the slice's length is the C length/capacity */
%define IKV_GO_SLICE(CTYPE, NAME, LEN, GOTYPE)
%typemap(gotype) (CTYPE NAME, size_t LEN) "GOTYPE"
%typemap(imtype) (CTYPE NAME, size_t LEN) "GOTYPE"
%typemap(in, noblock=1) (CTYPE NAME, size_t LEN) {
  $1 = ($1_ltype)($input.len > 0 ? $input.array : NULL);
  $2 = (size_t)$input.len;
}
%typemap(argout) (CTYPE NAME, size_t LEN) ""
%enddef
IKV_GO_SLICE(char *, out, capacity, []byte)
IKV_GO_SLICE(void *, out, capacity, []byte)
IKV_GO_SLICE(uint8_t *, out, capacity, []byte)
IKV_GO_SLICE(int32_t *, out_tokens, capacity, []int32)
IKV_GO_SLICE(int32_t *, out_ids, capacity, []int32)
IKV_GO_SLICE(int32_t *, out_seqs, capacity, []int32)
IKV_GO_SLICE(float *, out, capacity, []float32)
IKV_GO_SLICE(float *, out_logits, capacity, []float32)
IKV_GO_SLICE(int32_t *, out, capacity, []int32)
IKV_GO_SLICE(int64_t *, out, capacity, []int64)
IKV_GO_SLICE(uint64_t *, out, capacity, []uint64)
IKV_GO_SLICE(double *, out, capacity, []float64)
IKV_GO_SLICE(const void *, data, size, []byte)
IKV_GO_SLICE(const void *, data, len, []byte)
IKV_GO_SLICE(const uint8_t *, data, size, []byte)
IKV_GO_SLICE(const uint8_t *, data, len, []byte)
IKV_GO_SLICE(const void *, buffer, size, []byte)
IKV_GO_SLICE(const void *, buffer, len, []byte)
IKV_GO_SLICE(const void *, bytes, len, []byte)
IKV_GO_SLICE(const void *, bytes, size, []byte)
IKV_GO_SLICE(const int32_t *, tokens, n_tokens, []int32)
IKV_GO_SLICE(const int32_t *, prompt, n_prompt, []int32)

/* text in: a Go string (not copied; only read during the call) */
%typemap(gotype) (const char *text, size_t text_len), (const char *json, size_t json_len), (const char *text, size_t len) "string"
%typemap(in, noblock=1) (const char *text, size_t text_len), (const char *json, size_t json_len), (const char *text, size_t len) {
  $1 = ($1_ltype)$input.p;
  $2 = (size_t)$input.n;
}

/* batches: two slices of equal length */
%typemap(gotype) (const int32_t *seq_ids, const int32_t *tokens, size_t n_items) "[]int32"
%typemap(in, noblock=1) (const int32_t *seq_ids, const int32_t *tokens, size_t n_items) (int32_t *split = NULL) {
  /* interleaved (seq, token) pairs, split on the C side; an odd or empty slice gives n_items 0 (rejected by C) */
  $1 = NULL; $2 = NULL; $3 = 0;
  {
    intgo n = $input.len;
    const int32_t *e = (const int32_t *)$input.array;
    if (n % 2 == 0 && n > 0) {
      split = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
      if (split) {
        for (intgo i = 0; i < n / 2; ++i) { split[i] = e[2 * i]; split[n / 2 + i] = e[2 * i + 1]; }
        $1 = split; $2 = split + n / 2; $3 = (size_t)(n / 2);
      }
    }
  }
}
%typemap(freearg, noblock=1) (const int32_t *seq_ids, const int32_t *tokens, size_t n_items) { free(split$argnum); }

/* callbacks: a cgo.Handle (uintptr) of a Go TokenFunc, 0 for none */
%typemap(gotype) (ikv_token_callback callback, void *user_data) "uintptr"
%typemap(in, noblock=1) (ikv_token_callback callback, void *user_data) {
  $1 = $input ? (ikv_token_callback)ikvGoTokenTrampoline : NULL;
  $2 = (void *)(uintptr_t)$input;
}

#endif

/* ====================================================================================================== */
/* String fields of the options structs (ikv_session_options.device), all three languages. The library copies
 * the string during the create call, so the struct only has to keep it until then. SWIG's default setter for a
 * `const char *` field mallocs a copy and never frees it (warning 451); here the proxy owns its copy instead:
 * setting the field frees the previous copy, and deleting the proxy frees the last one. So such a field of a
 * proxy holds NULL or a copy made here, never caller memory (ikv_*_options_init writes NULL over it: call init
 * before setting it, as the language layers do). A struct that gains a string field adds it to its destructor. */
%typemap(memberin, noblock=1) const char * {
  free((char *)$1);
  $1 = NULL;
  if ($input) {
    size_t ikv_len = strlen((const char *)$input) + 1;
    char *ikv_copy = (char *)malloc(ikv_len);
    if (ikv_copy) memcpy(ikv_copy, $input, ikv_len);
    $1 = ikv_copy;
  }
}
%extend ikv_session_options {
  ~ikv_session_options() {
    free((char *)$self->device);
    free($self);
  }
}

/* ====================================================================================================== */
/* The public headers, as they are (generated list: every capi/include/infokv/*.h, the umbrella first). */
/* GCC attributes (IKV_API's visibility) mean nothing to SWIG. */
#define __attribute__(x)
%include "infokv_headers.i"
