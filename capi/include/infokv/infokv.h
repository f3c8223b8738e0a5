/*
 * infokv — embeddable LLM inference with an InfoKV-compressed paged KV cache. The public C API.
 *
 * Conventions (all functions):
 *  - Every fallible function returns an int32_t status: IKV_OK (0) or a negative IKV_ERR_* value. Values are stable
 *    and never renumbered. ikv_status_string() gives static text for a status; ikv_last_error_message() gives the
 *    calling thread's message for its latest failure (never NULL; "" when there is none).
 *  - Output parameters come first. They are initialised at the top of every call (to NULL / 0), so on failure they
 *    hold those values; nothing is returned half-made.
 *  - Handles are opaque values, not addresses: compare them, never dereference them. A freed handle is never
 *    handed out again, so it stays invalid for good (even after many more objects are made): every call given a
 *    handle that is not live (already freed, never made by this library, or of another kind) returns
 *    IKV_ERR_BAD_HANDLE without touching anything, and destroy functions do nothing for it (a double free is
 *    harmless). Destroy functions accept NULL.
 *  - Thread safety: an ikv_model may be shared by any number of threads and sessions (it is immutable after load);
 *    so may an ikv_config. An ikv_session and an ikv_sampler must be used by one thread at a time (callers lock if
 *    they share one). That rule is checked, not trusted: a call that finds another thread inside a call on the same
 *    session or sampler returns IKV_ERR_BUSY at once, changing nothing (it does not wait); retry after the other
 *    call returns. Calls that take a session or sampler may therefore return IKV_ERR_BUSY in addition to the
 *    statuses they list. The thread inside a call may call back in (ikv_generate's callback may read the session).
 *    Freeing a session or sampler while another thread is inside a call on it is still a caller bug, but a safe
 *    one: the handle is invalid at once and the object goes when that call returns.
 *    The status/version functions may be called from any thread at any time.
 *  - Errors never change state: a failed decode leaves the KV cache, lengths and logits as they were.
 */
#ifndef INFOKV_INFOKV_H
#define INFOKV_INFOKV_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#  if defined(INFOKV_BUILDING_LIBRARY)
#    define IKV_API __declspec(dllexport)
#  else
#    define IKV_API __declspec(dllimport)
#  endif
#else
#  define IKV_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- versions ---- */
#define IKV_VERSION_MAJOR 0
#define IKV_VERSION_MINOR 1
#define IKV_VERSION_PATCH 0
#define IKV_VERSION_STRING "0.1.0"
/* MAJOR * 10000 + MINOR * 100 + PATCH */
#define IKV_VERSION_NUMBER (IKV_VERSION_MAJOR * 10000 + IKV_VERSION_MINOR * 100 + IKV_VERSION_PATCH)

/** The library's version as text ("0.1.0"); static storage. Thread-safe. */
IKV_API const char *ikv_version_string(void);
/** The library's IKV_VERSION_NUMBER at run time (compare with the macro to detect a header/library mismatch). */
IKV_API int32_t ikv_version_number(void);

/* ---- status codes (stable values) ---- */
#define IKV_OK 0
#define IKV_ERR_INVALID_ARGUMENT (-1)  /* a NULL pointer, a negative size, a bad option value */
#define IKV_ERR_IO (-2)                /* a file could not be opened, read or written */
#define IKV_ERR_BAD_MODEL (-3)         /* a model file is malformed, truncated or inconsistent */
#define IKV_ERR_UNSUPPORTED (-4)       /* a valid file or request this version does not implement */
#define IKV_ERR_OUT_OF_MEMORY (-5)
#define IKV_ERR_KV_FULL (-6)           /* the KV pool cannot hold the step's tokens (and no policy could free room) */
#define IKV_ERR_OUT_OF_RANGE (-7)      /* a token id outside the vocabulary, a length beyond the sequence */
#define IKV_ERR_CANCELLED (-8)         /* a callback asked to stop */
#define IKV_ERR_BAD_SNAPSHOT (-9)      /* a snapshot is corrupt */
#define IKV_ERR_WRONG_MODEL (-10)      /* a snapshot was made with another model, tokenizer or cache layout */
#define IKV_ERR_VERSION (-11)          /* a file needs a newer reader */
#define IKV_ERR_BAD_CONFIG (-12)       /* a config is malformed or has an out-of-range value */
#define IKV_ERR_NO_DEVICE (-13)        /* the requested device is not available */
#define IKV_ERR_BUFFER_TOO_SMALL (-14) /* the caller's buffer is too small; the needed size was stored */
#define IKV_ERR_NOT_FOUND (-15)        /* no such sequence */
#define IKV_ERR_BAD_STATE (-16)        /* the call is not valid now (e.g. logits before any decode) */
#define IKV_ERR_BAD_HANDLE (-17)       /* a NULL, freed or foreign handle */
#define IKV_ERR_BUSY (-18)             /* another thread is inside a call on the same session or sampler */
#define IKV_ERR_INTERNAL (-100)        /* a bug: please report it with the message */

/** Static text for a status ("KV full", ...); "unknown status" for values this version does not know. */
IKV_API const char *ikv_status_string(int32_t status);
/** The calling thread's message for its latest failed call; never NULL, valid until its next infokv call. */
IKV_API const char *ikv_last_error_message(void);

/* ---- devices ---- */

/**
 * Number of usable CUDA devices. Never fails for a missing GPU, driver or CUDA build: *out is then 0 (the
 * reason is in `infokv info --json`, "devices"). Thread-safe.
 * @param out  receives the count (0 in a build without CUDA).
 * @return IKV_OK; IKV_ERR_INVALID_ARGUMENT when out is NULL.
 */
IKV_API int32_t ikv_device_count(int32_t *out);

/**
 * Name of CUDA device `index` (e.g. "NVIDIA H200") into the caller's buffer, NUL-terminated. Thread-safe.
 * @param out      buffer of `capacity` bytes (may be NULL when capacity is 0 to query the size).
 * @param out_len  receives the length without the terminating NUL.
 * @return IKV_OK; IKV_ERR_BUFFER_TOO_SMALL when capacity < *out_len + 1 (nothing written but the size);
 *         IKV_ERR_NO_DEVICE when index is not below ikv_device_count(); IKV_ERR_INVALID_ARGUMENT (NULL out_len).
 */
IKV_API int32_t ikv_device_name(char *out, size_t capacity, size_t *out_len, int32_t index);

/* ---- handles ---- */
typedef struct ikv_model ikv_model;
typedef struct ikv_session ikv_session;
typedef struct ikv_sampler ikv_sampler;

#ifdef __cplusplus
}
#endif

/* One header per object, all part of this API and included here in this order (same directory as this header):
 * models, sessions, samplers and generation, configs (ikv_config), snapshots (save/restore), chat, the engine (many
 * conversations over one pool). Include this header, not those. */
#include "model.h"
#include "session.h"
#include "sampler.h"
#include "config.h"
#include "snapshot.h"
#include "chat.h"
#include "engine.h"

#endif /* INFOKV_INFOKV_H */
