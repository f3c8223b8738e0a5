/*
 * infokv snapshots: the state of one sequence or a whole session (tokens, logical length, the kept tokens of every
 * layer with their K/V, importance state, protected spans, logits) and optionally a sampler's state, saved to a
 * file or a caller's buffer and restored into a fresh session of the same model — in another process or on
 * another machine — to continue exactly as if never stopped. Only kept tokens are stored, so a cache compressed
 * to a quarter gives about a quarter of the bytes. The format is described in schemas/snapshot.fbs.
 * Included by infokv.h; the conventions at the top of infokv.h apply.
 *
 * Restore is all or nothing: the container, checksums, FlatBuffers verifier, version, model fingerprints and
 * every semantic check pass before anything changes; otherwise the session and sampler are untouched.
 * The restoring session may use another KV dtype (values are converted; exact continuation needs the same dtype)
 * or block size. Its compression policy is its own: create it with the snapshot's policy (ikv_snapshot_inspect
 * shows it) to continue exactly as the saving session would have.
 *
 * A snapshot holds what the session has decoded. ikv_generate decodes every token it returns, the last one too, so a
 * snapshot saved right after it continues exactly where generation stopped. Forked sequences saved together are
 * stored separately (no sharing).
 */
#ifndef INFOKV_SNAPSHOT_H
#define INFOKV_SNAPSHOT_H

#ifndef INFOKV_INFOKV_H
#error "include <infokv/infokv.h>, not <infokv/snapshot.h>"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Saves sequence `seq` (or every sequence when seq is -1) and, when `sampler` is not NULL, its parameters, RNG
 * state and history, to `path`. The bytes go to a unique temporary file in path's directory (never a link planted
 * there; mode 0666 & ~umask), which is fsynced and renamed over `path`, then the directory is fsynced: a reader of
 * `path` sees the old file or the complete new one, saves to one path from several threads or processes leave one
 * complete file, and a failure removes the temporary. A process killed mid-save leaves nothing behind where the
 * file system supports O_TMPFILE (Linux: ext4, xfs, btrfs, tmpfs), else a `.<name>.<random>.tmp` file.
 * @return IKV_OK; IKV_ERR_BAD_HANDLE; IKV_ERR_INVALID_ARGUMENT (NULL path, seq < -1); IKV_ERR_NOT_FOUND;
 *         IKV_ERR_IO; IKV_ERR_OUT_OF_MEMORY. The session is not changed.
 */
IKV_API int32_t ikv_session_save_file(const ikv_session *session, int32_t seq, const ikv_sampler *sampler, const char *path);

/**
 * Saves into the caller's buffer. Call with out NULL and capacity 0 to learn the size (*out_len).
 * @return IKV_OK; IKV_ERR_BUFFER_TOO_SMALL (only *out_len set); the statuses of ikv_session_save_file but IKV_ERR_IO.
 */
IKV_API int32_t ikv_session_save_buffer(void *out, size_t capacity, size_t *out_len, const ikv_session *session, int32_t seq,
                                        const ikv_sampler *sampler);

/**
 * Restores a snapshot's sequences into `session` as new sequences (existing ones are kept). When `sampler` is not
 * NULL and the snapshot holds sampler state, the sampler takes that state (parameters, RNG, history).
 * @param out_seqs   buffer for `capacity` ids of the restored sequences, in saved order (may be NULL when
 *                   capacity is 0 and the snapshot holds one sequence or the ids are not wanted).
 * @param out_count  receives how many sequences the snapshot holds (set even on IKV_ERR_BUFFER_TOO_SMALL).
 * @return IKV_OK; IKV_ERR_BAD_SNAPSHOT (corrupt, truncated or inconsistent); IKV_ERR_VERSION (needs a newer
 *         reader); IKV_ERR_WRONG_MODEL (another model, tokenizer or head layout); IKV_ERR_KV_FULL (the pool cannot
 *         hold it: checked from each sequence's kept counts before its K/V is read, so a snapshot too large for
 *         the pool is refused without reading its bulk); IKV_ERR_OUT_OF_RANGE (the session's sequences plus the
 *         snapshot's would pass its max_sequences: checked from the header); IKV_ERR_BUFFER_TOO_SMALL (capacity below the sequence
 *         count while out_seqs is not NULL); IKV_ERR_IO (also for a path that is not a regular file: a FIFO or
 *         device is refused without blocking); IKV_ERR_BAD_HANDLE; IKV_ERR_INVALID_ARGUMENT;
 *         IKV_ERR_OUT_OF_MEMORY. On any failure neither the session nor the sampler changed.
 */
IKV_API int32_t ikv_session_restore_file(int32_t *out_seqs, size_t capacity, size_t *out_count, ikv_session *session,
                                         ikv_sampler *sampler, const char *path);

/** As ikv_session_restore_file, from `len` bytes at `bytes` (the caller keeps them; they are not retained). Zero bytes
 * (whatever `bytes` is) is IKV_ERR_BAD_SNAPSHOT ("the snapshot is empty"); NULL with len > 0 is IKV_ERR_INVALID_ARGUMENT. */
IKV_API int32_t ikv_session_restore_buffer(int32_t *out_seqs, size_t capacity, size_t *out_count, ikv_session *session,
                                           ikv_sampler *sampler, const void *bytes, size_t len);

/**
 * Checks a snapshot file without a model and describes it as JSON (header, policy, sizes, per-layer kept counts),
 * NUL-terminated, with the size-query protocol.
 * @return IKV_OK; IKV_ERR_BUFFER_TOO_SMALL; IKV_ERR_BAD_SNAPSHOT; IKV_ERR_VERSION; IKV_ERR_IO;
 *         IKV_ERR_INVALID_ARGUMENT.
 */
IKV_API int32_t ikv_snapshot_inspect(char *out, size_t capacity, size_t *out_len, const char *path);

#ifdef __cplusplus
}
#endif

#endif /* INFOKV_SNAPSHOT_H */
