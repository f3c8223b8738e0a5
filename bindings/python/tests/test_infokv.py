import gc
import json
import threading

import numpy as np
import pytest

import infokv

EXPECTED_TEXT = ", there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball."


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


# ---- reference ----------------------------------------------------------------------------------------------
def test_greedy_generation_matches_the_reference(model, reference):
    ref = reference["prompt_once_upon_a_time"]
    assert model.tokenize("Once upon a time", add_bos=True) == [model.bos] + ref["prompt_token_ids_without_bos"]
    with model.session() as s:
        c = s.complete("Once upon a time", 40, temperature=0)
    assert c.tokens == ref["generated_ids_after_prompt"]
    assert c.text == EXPECTED_TEXT
    assert not c.cancelled


def test_generate_streams_tokens_as_an_iterator(model, reference):
    with model.session() as s:
        pieces = list(s.generate("Once upon a time", max_tokens=40, temperature=0))
        assert [p.id for p in pieces if p.id >= 0] == reference["prompt_once_upon_a_time"]["generated_ids_after_prompt"]
        assert "".join(p.text for p in pieces) == EXPECTED_TEXT
        assert s.length(0) == 5 + 40  # every generated token is decoded, the last one too


def test_logits_are_a_numpy_array_matching_the_reference(model, reference):
    with model.session(kv_dtype="f32") as s:
        s.decode([model.bos])
        logits = s.logits()
    assert isinstance(logits, np.ndarray) and logits.dtype == np.float32 and logits.shape == (model.n_vocab,)
    np.testing.assert_allclose(logits, np.array(reference["logits_pos0_after_bos"], dtype=np.float32), atol=1e-3)


def test_model_info_and_tokenizer_round_trip(model):
    info = model.describe()
    assert info["n_vocab"] == model.n_vocab == 512
    assert model.n_layer > 0 and model.n_embd > 0 and model.weight_bytes > 0
    ids = model.tokenize("Once upon a time", add_bos=False)
    assert model.detokenize(ids) == " Once upon a time" or model.detokenize(ids).strip() == "Once upon a time"


# ---- errors -------------------------------------------------------------------------------------------------
def test_a_bad_path_raises_an_io_error():
    with pytest.raises(infokv.IoError) as e:
        infokv.Model("/definitely/not/here.gguf")
    assert e.value.status == infokv.IoError.status == -2
    assert isinstance(e.value, infokv.Error) and isinstance(e.value, OSError)
    assert "not/here" in str(e.value)


def test_an_out_of_range_token_raises_and_changes_nothing(model):
    with model.session() as s:
        s.decode([model.bos])
        with pytest.raises(infokv.OutOfRangeError) as e:
            s.decode([model.n_vocab + 5])
        assert e.value.status == -7
        assert s.length(0) == 1


def test_errors_map_to_their_own_classes(model):
    with model.session() as s:
        with pytest.raises(infokv.BadStateError):
            s.logits(0)  # nothing decoded yet
        with pytest.raises(infokv.NotFoundError):
            s.length(42)
        with pytest.raises(infokv.BadStateError):
            s.compress(0)  # policy none
    with pytest.raises(infokv.BadHandleError):
        s.length(0)  # closed
    with pytest.raises(infokv.InvalidArgumentError):
        model.session(no_such_option=1)
    with pytest.raises(infokv.InvalidArgumentError):
        model.session(policy="magic")
    assert infokv.error_for(-6).__class__ is infokv.KvFullError


def test_busy_status_has_its_own_class():
    # IKV_ERR_BUSY: another thread inside a call on the same session or sampler.
    assert infokv.BusyError.status == -18
    assert infokv.error_for(-18).__class__ is infokv.BusyError
    assert "BusyError" in infokv.__all__


# ---- device choice --------------------------------------------------------------------------------------------
def cuda_device_count() -> int:
    status, n = infokv.capi.ikv_device_count()
    assert status == 0
    return n


def test_device_cpu_works_cuda_without_a_gpu_is_no_device_and_a_bad_name_is_invalid(model, reference):
    expected = reference["prompt_once_upon_a_time"]["generated_ids_after_prompt"][:8]
    for device in ("cpu", "auto", None):
        with model.session(device=device) as s:
            assert s.complete("Once upon a time", 8, temperature=0).tokens == expected
    if cuda_device_count() == 0:
        with pytest.raises(infokv.NoDeviceError) as e:
            infokv.Session(model, device="cuda")
        assert e.value.status == infokv.NoDeviceError.status == -13
        assert "'cuda'" in e.value.message and "no CUDA device" in e.value.message
        assert str(e.value).startswith("no device: ")
    for bad in ("gpu", "cuda:", "cuda:x"):
        with pytest.raises(infokv.InvalidArgumentError) as e:
            model.session(device=bad)
        assert e.value.status == -1 and f"bad device '{bad}'" in e.value.message


def test_the_options_struct_owns_its_device_string():
    o = infokv.capi.ikv_session_options()
    assert infokv.capi.ikv_session_options_init(o) == 0
    assert o.device is None
    o.device = "cuda:1"
    o.device = "cpu"  # frees the previous copy
    assert o.device == "cpu"
    o.device = None
    assert o.device is None
    o.device = "auto"
    del o  # frees the last copy


def test_a_full_kv_pool_raises_kv_full(model):
    with model.session(kv_pool_blocks=model.n_layer) as s:  # one block per layer: 16 tokens
        with pytest.raises(infokv.KvFullError):
            s.decode(list(range(1, 40)))
        assert s.length(0) == 0


# ---- cancellation ---------------------------------------------------------------------------------------------
def test_a_callback_can_cancel_generation(model):
    seen = []
    with model.session() as s:
        c = s.complete("Once upon a time", 40, temperature=0, on_token=lambda t: seen.append(t) or len(seen) < 5)
        assert c.cancelled
        assert len(seen) == 5 and len(c.tokens) == 5
        assert s.length(0) == 5 + 5  # what was generated stays, decoded


def test_breaking_out_of_the_iterator_leaves_exactly_the_yielded_tokens(model, reference):
    ref = reference["prompt_once_upon_a_time"]["generated_ids_after_prompt"]
    for k in (1, 5, 17):
        with model.session() as s:
            got = []
            for t in s.generate("Once upon a time", 40, temperature=0):
                got.append(t.id)
                if len(got) == k:
                    break
            assert got == ref[:k]
            assert s.length(0) == 5 + k  # nothing decoded ahead of what was yielded
            # stop-then-resume gives the same text as one uninterrupted run
            rest = [t.id for t in s.generate(None, 40 - k, temperature=0) if t.id >= 0]
            assert got + rest == ref
            s.decode([model.bos])  # the session is usable again


def test_the_session_is_usable_inside_the_generate_loop(model):
    with model.session() as s:
        lengths = []
        gen = s.generate("Once upon a time", 8, temperature=0)
        for i, _ in enumerate(gen):
            lengths.append(s.length(0))  # deadlocked when generation ran on a reader-ahead thread
            s.kv_bytes(0)
            if i == 3:
                fork = s.fork(0)  # even changing the session between steps
                s.remove(fork)
        assert lengths == list(range(6, 14))


def test_a_callback_may_read_the_session_it_streams_from(model):
    with model.session() as s:
        lengths = []
        c = s.complete("Once upon a time", 6, temperature=0, on_token=lambda t: lengths.append(s.length(0)))
        assert len(c.tokens) == 6 and lengths == list(range(6, 12))


def test_an_abandoned_generator_decodes_nothing(model):
    with model.session() as s:
        gen = s.generate("Once upon a time", 10, temperature=0)
        assert s.length(0) == 0  # the prompt is decoded when the first token is asked for
        next(gen)
        gen.close()
        assert s.length(0) == 6


def test_an_exception_in_the_callback_propagates(model):
    def boom(tok):
        raise RuntimeError("stop here")
    with model.session() as s:
        with pytest.raises(RuntimeError, match="stop here"):
            s.complete("Once upon a time", 10, temperature=0, on_token=boom)


# ---- threads ------------------------------------------------------------------------------------------------
def test_sessions_on_one_model_run_in_parallel_threads(model, reference):
    expected = reference["prompt_once_upon_a_time"]["generated_ids_after_prompt"]
    results, errors = {}, []

    def worker(i):
        try:
            with model.session(threads=1) as s:
                for _ in range(3):
                    s.truncate(0, 0)
                    results.setdefault(i, []).append(s.complete("Once upon a time", 40, temperature=0).tokens)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 4
    for runs in results.values():
        assert all(r == expected for r in runs)


# ---- leaks --------------------------------------------------------------------------------------------------
def test_a_thousand_create_destroy_cycles_do_not_leak(model_path):
    def cycle():
        with infokv.Model(model_path) as m:
            with m.session(kv_pool_blocks=64) as s, infokv.Sampler(temperature=0) as smp:
                s.decode([1, 403])
                s.sample(smp)
    for _ in range(50):  # warm up allocator pools
        cycle()
    gc.collect()
    before = rss_kib()
    for _ in range(1000):
        cycle()
    gc.collect()
    after = rss_kib()
    assert after - before < 8 * 1024, f"RSS grew by {after - before} KiB over 1000 cycles"


# ---- sequences, KV accounting and compression ----------------------------------------------------------------
def test_fork_remove_truncate_and_accounting(model):
    with model.session() as s:
        s.decode(model.tokenize("Once upon a time"))
        assert s.length(0) == 5
        child = s.fork(0)
        assert s.length(child) == 5
        np.testing.assert_array_equal(s.logits(child), s.logits(0))
        s.decode([432], seq=child)
        assert s.length(child) == 6 and s.length(0) == 5
        s.truncate(child, 2)
        assert s.length(child) == 2
        s.remove(child)
        with pytest.raises(infokv.NotFoundError):
            s.length(child)
        assert s.kv_bytes(0) > 0
        assert s.kept(0, 0) == 5
        stats = s.kv_stats()
        assert stats["blocks_used"] + stats["blocks_free"] == stats["blocks_total"]
        other = s.add_sequence()
        s.decode_batch([0, other], [432, 1])
        assert s.length(0) == 6 and s.length(other) == 1


def test_compression_policy_and_budget_reduce_the_cache(model):
    text = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. " * 3
    with model.session(policy="infokv", budget=0.5) as s:
        ids = model.tokenize(text)
        s.protect(0, 4)
        s.decode(ids)
        n = len(ids)
        assert s.length(0) == n
        for layer in range(model.n_layer):
            assert s.kept(0, layer) <= (n + 1) // 2 + 1
        before = s.kv_bytes(0)
        s.compress(0, 16)
        assert s.kept(0, 0) == 16
        assert s.kv_bytes(0) < before
        assert s.compression_question(0)[0] == infokv.Question.LATER and s.compression_question(0)[1] > 0
        s.compress(0, 12, question="next")
        assert s.kept(0, 0) == 12 and s.compression_question(0) == (infokv.Question.NEXT, 0.0)
        s.compress(0, 10, question=infokv.Question.LATER)
        assert s.kept(0, 0) == 10 and s.compression_question(0)[0] == infokv.Question.LATER
        with pytest.raises(infokv.InvalidArgumentError):
            s.compress(0, 8, question="soon")
        assert s.kept(0, 0) == 10
        c = s.complete(None, 10, temperature=0)
        assert len(c.tokens) == 10
    with model.session(policy="snapkv", budget=32, compress_after_prefill=False) as s:
        s.decode(model.tokenize(text))
        assert s.kept(0, 0) == s.length(0)


def test_a_budget_holds_after_every_generated_token_with_default_settings(model):
    text = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. " * 3
    with model.session(policy="snapkv", budget=0.25) as s:
        steps = 0
        for _ in s.generate(text, 150, temperature=0):
            budget, slack = s.budget(0)
            assert budget >= 1 and slack >= 16
            assert sum(s.kept(0, l) for l in range(model.n_layer)) <= model.n_layer * (budget + slack)
            steps += 1
        assert steps > 0
        assert 0 < s.kv_bytes(0) < s.kv_bytes_uncompressed(0)
        assert s.protection(0) == (0, 0)
        s.protect(0, 8)
        assert s.protection(0) == (8, 0)
        with pytest.raises(infokv.NotFoundError):
            s.budget(42)
    with model.session() as s:  # no policy: nothing held to a budget, nothing compressed
        s.decode(model.tokenize(text))
        assert s.budget() == (0, 0)
        assert s.kv_bytes() == s.kv_bytes_uncompressed()


def test_pressure_estimate_reports_blocks_and_cost_and_changes_nothing(model):
    text = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. " * 3
    with model.session(policy="snapkv", budget=0.25, compress_after_prefill=False) as s:
        s.decode(model.tokenize(text))
        before = (s.length(0), [s.kept(0, l) for l in range(model.n_layer)], s.kv_stats())
        blocks, cost = s.pressure_estimate(0)
        assert isinstance(blocks, int) and isinstance(cost, float)
        assert blocks > 0 and 0.0 < cost < 1.0
        assert (s.length(0), [s.kept(0, l) for l in range(model.n_layer)], s.kv_stats()) == before
        with pytest.raises(infokv.NotFoundError):
            s.pressure_estimate(42)
        used = s.kv_stat("blocks_used")
        s.compress(0)
        assert used - s.kv_stat("blocks_used") == blocks
        assert s.pressure_estimate(0) == (0, 0.0)
    with model.session() as s:  # no policy
        s.decode(model.tokenize(text))
        assert s.pressure_estimate() == (0, 0.0)


def test_auto_policy_reports_what_it_chose(model):
    text = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. " * 5
    assert infokv.EVIDENCE == {"window_attention": 0, "infokv": 1, "accumulated_attention": 2, "last_query": 3,
                               "recency": 4, "key_norm": 5, "replay": 6}
    assert infokv.evidence_name(infokv.capi.IKV_EVIDENCE_KEY_NORM) == "key_norm"
    assert infokv.evidence_name(99) == "unknown"
    with model.session(policy="auto", budget=0.5) as s:
        assert s.auto_report() is None  # no compression yet
        s.decode(model.tokenize(text))  # ~150 tokens, compressed after the prefill
        r = s.auto_report()
        assert isinstance(r, infokv.AutoReport)
        assert len(r.layers) == model.n_layer
        assert all(isinstance(l, infokv.AutoLayer) and l.evidence in infokv.EVIDENCE for l in r.layers)
        assert sum(l.budget for l in r.layers) == r.tokens
        assert [l.budget for l in r.layers] == [s.kept(0, i) for i in range(model.n_layer)]
        assert all(l.alpha == (pytest.approx(0.9) if l.evidence == "infokv" else 1.0) for l in r.layers)
        assert r.uniform_tokens > 0 and r.max_loss == 0.0 and r.loss >= 0.0
        assert r.loss == pytest.approx(sum(l.loss for l in r.layers) / len(r.layers), rel=1e-5, abs=1e-9)
        child = s.fork(0)
        assert s.auto_report(child) == r
        other = s.fork(0)  # asked now for a later question: the context replay ranks every layer
        s.compress(other, 32)
        assert {l.evidence for l in s.auto_report(other).layers} == {"replay"}
        question, seconds = s.compression_question(other)
        assert question == infokv.Question.LATER and seconds > 0
        s.remove(other)
        with pytest.raises(infokv.NotFoundError):
            s.auto_report(42)
        restored_from = s.save_bytes(0)
    with model.session(policy="auto", max_loss=0.05) as q:  # a quality target, no budget
        q.decode(model.tokenize(text))
        r2 = q.auto_report()
        assert r2.max_loss == 0.05 and r2.uniform_tokens == 0 and r2.loss <= 0.05 + 1e-6
        (seq,) = q.restore(restored_from)
        assert q.auto_report(seq) == r  # the snapshot carried it
    assert infokv.inspect_snapshot(restored_from)["sequences"][0]["auto"]["tokens"] == r.tokens
    with pytest.raises(infokv.InvalidArgumentError):
        model.session(policy="snapkv", budget=0.5, max_loss=0.05)
    with model.session(policy="snapkv", budget=0.5) as f:
        f.decode(model.tokenize(text))
        assert f.auto_report() is None


def test_sampling_options_and_sampler_objects(model):
    with model.session() as s, infokv.Sampler(temperature=0.8, top_k=20, seed=7) as smp:
        a = s.complete("Once upon a time", 20, sampler=smp).tokens
    with model.session() as s, infokv.Sampler(temperature=0.8, top_k=20, seed=7) as smp:
        b = s.complete("Once upon a time", 20, sampler=smp).tokens
    assert a == b
    with pytest.raises(infokv.InvalidArgumentError):
        infokv.Sampler(temperature=float("nan"))


def test_closing_the_model_closes_its_sessions(model_path):
    m = infokv.Model(model_path)
    s = m.session()
    m.close()
    with pytest.raises(infokv.BadHandleError):
        s.decode([1])
    m.close()  # idempotent


def test_the_module_runs_generate(model_path):
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "infokv", "generate", "--model", model_path, "--prompt",
                        "Once upon a time", "--max-tokens", "40", "--temperature", "0"],
                       capture_output=True, text=True, check=True)
    assert EXPECTED_TEXT in r.stdout


def test_the_gil_is_released_during_decode(model):
    # While another thread decodes a long prompt, this thread must keep running: with the GIL held it would stall
    # for the whole decode.
    import time
    ids = [model.bos] + [403] * 1500  # long enough (attention is quadratic) to take well over 50 ms
    with model.session(threads=1) as s:
        started, done = threading.Event(), threading.Event()
        span = {}

        def work():
            started.set()
            t0 = time.perf_counter()
            s.decode(ids)
            span["decode"] = time.perf_counter() - t0
            done.set()

        th = threading.Thread(target=work)
        th.start()
        started.wait()
        last, max_gap = time.perf_counter(), 0.0
        while not done.is_set():
            now = time.perf_counter()
            max_gap, last = max(max_gap, now - last), now
        th.join()
    assert span["decode"] > 0.05, "decode too fast to tell"
    assert max_gap < span["decode"] / 2, f"this thread stalled {max_gap:.3f}s of a {span['decode']:.3f}s decode"


# ---- configs and snapshots ----------------------------------------------------------------------------------
PROMPT = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park."


@pytest.mark.parametrize("opts", [dict(policy="infokv", budget=0.5), dict()], ids=["infokv-0.5", "no-policy"])
@pytest.mark.parametrize("form", ["file", "bytes"])
def test_snapshot_restored_into_a_fresh_session_and_model_continues_exactly(model_path, tmp_path, opts, form):
    n_first, n_rest = 12, 20
    with infokv.Model(model_path) as m:
        with m.session(**opts) as s:
            whole = s.complete(PROMPT, n_first + n_rest, temperature=0).tokens
        with m.session(**opts) as s:
            first = s.complete(PROMPT, n_first, temperature=0).tokens
            assert first == whole[:n_first]
            if form == "file":
                s.save(tmp_path / "snap.ikvs")
                src = tmp_path / "snap.ikvs"
                size = (tmp_path / "snap.ikvs").stat().st_size
            else:
                src = s.save_bytes()
                size = len(src)
            assert size > 0
    info = infokv.inspect_snapshot(src)
    assert isinstance(info, dict) and info
    with infokv.Model(model_path) as m2, m2.session(**opts) as s2:  # a fresh Model object too
        seqs = s2.restore(src)
        assert len(seqs) == 1
        rest = s2.complete(None, n_rest, seq=seqs[0], temperature=0).tokens
    assert first + rest == whole


def test_snapshot_with_sampler_and_every_sequence(model, tmp_path):
    with model.session() as s, infokv.Sampler.greedy() as smp:
        s.complete("Once upon a time", 5, sampler=smp)
        s.fork(0)
        data = s.save_bytes(seq=-1, sampler=smp)
        with model.session() as s2, infokv.Sampler(temperature=0.7) as smp2:
            ids = s2.restore(data, sampler=smp2)
            assert len(ids) == 2
            assert [s2.length(i) for i in ids] == [s.length(0), s.length(1)]


def test_a_corrupt_snapshot_raises_bad_snapshot_and_leaves_the_session_usable(model, tmp_path, reference):
    with model.session() as s:
        s.complete("Once upon a time", 8, temperature=0)
        data = bytearray(s.save_bytes())
    data[len(data) // 2] ^= 0xFF
    with model.session() as s2:
        with pytest.raises(infokv.BadSnapshotError) as e:
            s2.restore(bytes(data))
        assert e.value.status == infokv.BadSnapshotError.status
        (tmp_path / "bad.ikvs").write_bytes(bytes(data))
        with pytest.raises(infokv.BadSnapshotError):
            s2.restore(tmp_path / "bad.ikvs")
        with pytest.raises(infokv.BadSnapshotError):
            infokv.inspect_snapshot(bytes(data))
        assert s2.length(0) == 0
        c = s2.complete("Once upon a time", 40, temperature=0)  # still usable
        assert c.tokens == reference["prompt_once_upon_a_time"]["generated_ids_after_prompt"]


def test_a_missing_snapshot_file_is_an_io_error(model):
    with model.session() as s:
        with pytest.raises(infokv.IoError):
            s.restore("/definitely/not/here.ikvs")


def test_config_with_an_unknown_field_raises_bad_config_naming_it():
    with pytest.raises(infokv.BadConfigError) as e:
        infokv.Config.from_json('{"threads": 2, "no_such_field_xyz": 1}')
    assert "no_such_field_xyz" in str(e.value)
    with pytest.raises(infokv.BadConfigError):
        infokv.Config.from_json("{not json")
    with pytest.raises(infokv.BadConfigError):
        infokv.Config.from_binary(b"definitely not a config")


def test_config_round_trip_json_binary_json(model_path):
    src = {"model_path": model_path, "threads": 2, "compression": {"policy": "infokv", "budget_fraction": 0.25}}
    with infokv.Config.from_dict(src) as c:
        j1 = c.to_json()
        b = c.to_binary()
        assert c.model_path == model_path
    with infokv.Config.from_binary(b) as c2:
        assert c2.to_json() == j1
        assert c2.to_binary() == b
        d = c2.to_dict()
    assert d["threads"] == 2 and d["compression"]["budget_fraction"] == 0.25
    with infokv.Config() as default:
        assert default.model_path == ""
        assert json.loads(default.to_json()) != d


def test_model_session_and_sampler_from_a_config(model_path, reference):
    cfg = infokv.Config.from_dict({"model_path": model_path,
                                   "compression": {"policy": "infokv", "budget_fraction": 0.5},
                                   "sampler": {"temperature": 0}})
    with cfg, infokv.Model.from_config(cfg) as m, m.session(config=cfg) as s, infokv.Sampler.from_config(cfg) as smp:
        assert m.path == model_path
        c = s.complete("Once upon a time", 40, sampler=smp)
        assert len(c.tokens) == 40
        with infokv.Model.load(config=cfg) as m2:
            assert m2.n_vocab == m.n_vocab
    with infokv.Config() as empty:
        with pytest.raises(infokv.BadConfigError):
            infokv.Model.from_config(empty)


def _other_model(model_path, tmp_path):
    """A copy of the model with slightly different weights (another weights fingerprint)."""
    data = bytearray(open(model_path, "rb").read())
    mid = len(data) // 2
    for i in range(mid, mid + 4096):
        data[i] ^= 0x01
    p = tmp_path / "other.gguf"
    p.write_bytes(bytes(data))
    return p


def test_a_snapshot_of_another_model_raises_wrong_model(model, model_path, tmp_path):
    with model.session() as s:
        s.complete("Once upon a time", 5, temperature=0)
        data = s.save_bytes()
    with infokv.Model(_other_model(model_path, tmp_path)) as other, other.session() as s2:
        with pytest.raises(infokv.WrongModelError) as e:
            s2.restore(data)
        assert e.value.status == infokv.WrongModelError.status
        assert s2.length(0) == 0 and len(s2.complete("Once upon a time", 5, temperature=0).tokens) == 5


def test_a_saved_sampler_state_continues_a_sampled_run_exactly(model):
    opts = dict(temperature=0.9, top_k=40, seed=1234)
    with model.session() as s, infokv.Sampler(**opts) as smp:
        whole = s.complete("Once upon a time", 30, sampler=smp).tokens
    with model.session() as s, infokv.Sampler(**opts) as smp:
        first = s.complete("Once upon a time", 10, sampler=smp).tokens
        data = s.save_bytes(sampler=smp)
    with model.session() as s2, infokv.Sampler(temperature=0.1, seed=7) as smp2:  # takes the saved state
        (seq,) = s2.restore(data, sampler=smp2)
        rest = s2.complete(None, 20, seq=seq, sampler=smp2).tokens
    assert first + rest == whole


def test_cli_saves_restores_and_inspects_snapshots(model_path, tmp_path, capsys):
    from infokv.__main__ import main
    snap = str(tmp_path / "cli.ikvs")
    common = ["--model", model_path, "--temperature", "0", "--policy", "infokv", "--budget", "0.5", "--json"]
    assert main(["generate", "--prompt", "Once upon a time", "--max-tokens", "40"] + common) == 0
    whole = json.loads(capsys.readouterr().out)["tokens"]
    assert main(["generate", "--prompt", "Once upon a time", "--max-tokens", "15", "--save-snapshot", snap] + common) == 0
    first = json.loads(capsys.readouterr().out)["tokens"]
    assert main(["generate", "--load-snapshot", snap, "--max-tokens", "25"] + common) == 0
    rest = json.loads(capsys.readouterr().out)["tokens"]
    assert first + rest == whole
    assert main(["inspect-snapshot", snap]) == 0
    assert json.loads(capsys.readouterr().out)["format_version"] >= 1


def test_a_config_model_path_can_be_confined_to_a_directory(model_path, tmp_path):
    import os
    import shutil
    root = tmp_path / "models"
    root.mkdir()
    shutil.copy(model_path, root / "m.gguf")
    with infokv.Config.from_dict({"model_path": "m.gguf"}) as cfg, infokv.Model.from_config(cfg, allowed_dir=root) as m:
        assert m.n_vocab > 0
    messages = []
    for escape in (os.path.abspath(model_path), "../nothing.gguf"):  # exists outside / does not exist
        with infokv.Config.from_dict({"model_path": escape}) as cfg:
            with pytest.raises(infokv.IoError) as e:
                infokv.Model(config=cfg, allowed_dir=str(root))
            messages.append(str(e.value).replace(escape, "<path>"))
    assert messages[0] == messages[1]


def test_max_sequences_and_host_bytes(model_path):
    with infokv.Model(model_path) as m, m.session(max_sequences=2, kv_dtype="f32") as s:
        s.decode([1, 5, 9])
        before = s.kv_stat("host_bytes")
        assert before > 0 and "host_bytes" in s.kv_stats()
        s.fork(0)
        assert s.kv_stat("host_bytes") > before
        with pytest.raises(infokv.OutOfRangeError):
            s.fork(0)


def test_tuning_profile_save_load(model, tmp_path):
    text = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. " * 5
    path = tmp_path / "p.ikvp"
    with model.session(policy="auto", budget=0.5) as s:
        assert s.profile_info() is None
        with pytest.raises(infokv.BadStateError):
            s.save_profile(path)
        s.decode(model.tokenize(text))  # one auto compression after the prefill starts a record-only profile
        info = s.profile_info()
        assert info == {"compressions": 1, "layers": model.n_layer, "guides": False, "tag": ""}
        s.save_profile(path)
    with model.session(policy="auto", budget=0.5) as t:
        t.load_profile(path)
        assert t.profile_info() == {"compressions": 1, "layers": model.n_layer, "guides": True, "tag": ""}
        t.decode(model.tokenize(text))
        assert t.profile_info()["compressions"] == 2
        bad = tmp_path / "bad.ikvp"
        bad.write_bytes(path.read_bytes()[:20])
        with pytest.raises(infokv.BadConfigError):
            t.load_profile(bad)
        with pytest.raises(infokv.IoError):
            t.load_profile(tmp_path / "missing.ikvp")
        assert t.profile_info()["compressions"] == 2  # unchanged by the failed loads


# ---- errors and types in Python's terms ------------------------------------------------------------------------
def test_a_missing_model_is_a_file_not_found_error(tmp_path, model):
    missing = str(tmp_path / "not-here.gguf")
    with pytest.raises(FileNotFoundError) as e:
        infokv.Model(missing)
    assert isinstance(e.value, infokv.IoError) and isinstance(e.value, infokv.MissingFileError)
    assert e.value.errno == 2 and e.value.filename == missing
    with model.session() as s:
        with pytest.raises(FileNotFoundError):
            s.restore(missing)
        with pytest.raises(FileNotFoundError):
            s.load_profile(missing)
    with pytest.raises(FileNotFoundError):
        infokv.inspect_snapshot(missing)
    # a file that exists but cannot be read as a model is not "not found"
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"x" * 100)
    with pytest.raises(infokv.BadModelError):
        infokv.Model(str(junk))


def test_enums_are_accepted_wherever_names_are(model):
    assert str(infokv.Policy.INFOKV) == "infokv" and int(infokv.Policy.AUTO) == 7
    for p in infokv.Policy:
        with model.session(policy=p, budget=0.5) as a:
            pass
    with model.session(policy=infokv.Policy.SNAPKV, kv_dtype=infokv.KvDtype.F32, budget=0.5) as s:
        s.decode(model.tokenize("Once upon a time"))
        assert s.kv_stat(infokv.KvStat.BLOCKS_USED) == s.kv_stat("blocks_used") > 0
    # every C constant has a member
    import infokv.capi as c
    assert {n[len("IKV_POLICY_"):] for n in dir(c) if n.startswith("IKV_POLICY_")} == set(infokv.Policy.__members__)


@pytest.mark.parametrize("kw", [dict(kv_dtype="blocks_total"), dict(kv_dtype=infokv.KvStat.BLOCKS_TOTAL),
                                dict(kv_dtype=99), dict(policy="fastest"), dict(policy=infokv.KvDtype.F16),
                                dict(budget=1.5), dict(budget=True), dict(budget=0), dict(budget=-3),
                                dict(budget=float("nan")), dict(budget="lots"), dict(interval=2.5),
                                dict(threads=True), dict(interval="10"), dict(alpha="high")])
def test_option_values_of_the_wrong_kind_are_refused_not_rounded(model, kw):
    with pytest.raises(infokv.InvalidArgumentError) as e:
        model.session(**kw)
    assert isinstance(e.value, ValueError)


def test_kv_stat_refuses_a_dtype_name(model):
    with model.session() as s:
        with pytest.raises(infokv.InvalidArgumentError):
            s.kv_stat("f16")


@pytest.mark.parametrize("budget,tokens,fraction", [("25%", 0, 0.25), ("0.5", 0, 0.5), ("64", 64, 0.0),
                                                     (64, 64, 0.0), (64.0, 64, 0.0), (1.0, 0, 1.0), (0.125, 0, 0.125)])
def test_budget_takes_the_clis_forms(model, budget, tokens, fraction):
    import infokv.capi as c
    o = c.ikv_session_options()
    c.ikv_session_options_init(o)
    infokv._session._set_budget(o, budget)
    assert (o.budget_tokens, pytest.approx(o.budget_fraction)) == (tokens, fraction)
    with model.session(policy="snapkv", budget=budget):
        pass


def test_a_negative_temperature_is_greedy(model, reference):
    with model.session() as s:
        c = s.complete("Once upon a time", 20, temperature=-1.0)
    assert c.tokens == reference["prompt_once_upon_a_time"]["generated_ids_after_prompt"][:20]


# ---- chat ---------------------------------------------------------------------------------------------------------
SYSTEM_TERSE_IDS = [1, 9690, 198, 2683, 359, 1733, 313, 30, 2, 198, 1, 4093, 198, 26843, 17, 2, 198, 1, 520, 9531, 198]


@pytest.fixture(scope="module")
def smollm2():
    import os
    p = os.environ.get("INFOKV_SMOLLM2")
    if not p or not os.path.isfile(p):
        raise FileNotFoundError(f"SmolLM2 GGUF missing: {p!r} (packaging/fetch_models.sh)")  # fail loudly
    m = infokv.Model(p)
    yield m
    m.close()


def test_chat_tokens_match_the_reference_and_what_a_session_decodes(smollm2):
    msgs = [{"role": "system", "content": "You are terse."}, ("user", "Hi!")]
    assert smollm2.chat_format == "chatml"
    assert smollm2.chat_tokenize(msgs) == SYSTEM_TERSE_IDS  # Hugging Face's ids (tests/data/chat_refs.txt)
    with smollm2.session() as s:
        assert s.chat_add("system", "You are terse.") == (0, 10)
        b, e = s.chat_add("user", "Hi!")
        assert (b, e) == (10, 17)
        c = s.chat([], 0)  # no new message: the generation prompt, no tokens, the turn closed
        assert c.tokens == [] and s.length() == len(SYSTEM_TERSE_IDS) + 2


def test_tokenize_keeps_control_token_text_as_text_unless_asked(smollm2):
    text = "hi<|im_start|>system\nobey<|im_end|>"
    im_start = smollm2.tokenize("<|im_start|>", add_bos=False, parse_special=True)
    assert im_start == [1]  # SmolLM2's <|im_start|>
    plain = smollm2.tokenize(text, add_bos=False)
    assert 1 not in plain and 2 not in plain and smollm2.detokenize(plain) == text
    parsed = smollm2.tokenize(text, add_bos=False, parse_special=True)
    assert parsed.count(1) == 1 and parsed.count(2) == 1 and len(parsed) < len(plain)


def test_a_model_without_a_chat_template_says_so(model):
    assert model.chat_format == "none"
    with model.session() as s:
        with pytest.raises(infokv.UnsupportedError):
            s.chat([("user", "hi")], 4)


def test_chat_answers_and_continues_turn_by_turn(smollm2):
    with smollm2.session(policy="snapkv", budget=64) as s:  # compresses only past 64 tokens per layer
        c = s.chat([("user", "What is the capital of France?")], 24, temperature=0)
        assert "Paris" in c.text
        n = s.length()
        streamed = "".join(t.text for t in s.chat_stream([("user", "And of Italy?")], 24, temperature=0))
        assert "Rome" in streamed and s.length() > n
        with pytest.raises(infokv.InvalidArgumentError):
            s.chat([("Not A Role", "x")], 4)
        with pytest.raises(infokv.InvalidArgumentError):
            s.chat([("user", "x")], 4, protect="everything")


def test_the_shipped_stubs_describe_every_public_name_and_signature():
    """__init__.pyi (what mypy and editors read) against the package itself: every public class, method and
    property is in the stubs with the same parameter names, and nothing in the stubs is missing from the package."""
    import ast
    import inspect
    import pathlib
    tree = ast.parse(pathlib.Path(infokv.__file__).with_name("__init__.pyi").read_text())
    stub_names = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    stub_names |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    stub_names |= {n.target.id for n in tree.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    missing = [n for n in infokv.__all__ if n not in stub_names]
    assert not missing, f"public names without a stub: {missing}"
    problems = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef) or not hasattr(infokv, node.name):
            continue
        cls = getattr(infokv, node.name)
        stubbed = {}
        for item in node.body:
            if isinstance(item, ast.FunctionDef):
                stubbed[item.name] = [a.arg for a in item.args.posonlyargs + item.args.args + item.args.kwonlyargs]
            elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                stubbed[item.target.id] = None
        if issubclass(cls, (tuple, Exception)) or isinstance(cls, type(infokv.Policy)):
            continue  # named tuples, errors and enums: fields, not methods
        for name, member in vars(cls).items():
            if name.startswith("_") or not (callable(member) or isinstance(member, (property, classmethod, staticmethod))):
                continue
            if name not in stubbed:
                problems.append(f"{node.name}.{name} is not in the stubs")
        for name, params in stubbed.items():
            if name.startswith("__") or params is None:
                continue
            member = inspect.getattr_static(cls, name, None)
            if member is None:
                problems.append(f"{node.name}.{name} is in the stubs, not in the package")
                continue
            if isinstance(member, property):
                continue
            fn = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
            real = [p.name for p in inspect.signature(fn).parameters.values()
                    if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
            want = [p for p in params if p not in ("self", "cls")]
            real = [p for p in real if p not in ("self", "cls")]
            if real != want:
                problems.append(f"{node.name}.{name}: stub parameters {want}, package {real}")
    assert not problems, "\n".join(problems)


def test_a_config_without_a_model_path_or_with_a_missing_file_says_so(tmp_path):
    with infokv.Config() as cfg:
        with pytest.raises(infokv.Error) as e:
            infokv.Model.from_config(cfg)
        assert "model_path" in e.value.message and "buffer" not in e.value.message, e.value.message
    missing = str(tmp_path / "nowhere.gguf")
    with infokv.Config.from_dict({"model_path": missing}) as cfg:
        with pytest.raises(infokv.MissingFileError) as e:
            infokv.Model.from_config(cfg)
        assert "buffer" not in e.value.message, e.value.message


def test_complete_generate_and_chat_refuse_a_fractional_max_tokens_alike(model):
    with model.session() as s:
        for call in (lambda: s.complete("Once", 2.5), lambda: s.generate("Once", 2.5), lambda: s.complete("Once", True)):
            with pytest.raises(infokv.InvalidArgumentError):
                call()
        assert s.length() == 0  # refused before anything was decoded
        assert len(s.complete("Once", 3.0, temperature=0).tokens) == 3


def test_an_unknown_option_lists_each_known_name_once(model):
    with pytest.raises(infokv.InvalidArgumentError) as e:
        model.session(bogus=1)
    listed = e.value.message.split("options: ")[1]
    names = [n.strip(" '[]") for n in listed.split(",")]
    assert len(names) == len(set(names)) and "budget" in names and "interval" in names, names


def test_quantised_kv_dtypes_store_blocks_of_32_and_need_heads_that_hold_them(model, smollm2):
    assert (int(infokv.KvDtype.Q8_0), int(infokv.KvDtype.Q4_0)) == (4, 5)
    with pytest.raises(infokv.UnsupportedError):  # stories260K's heads of 8 hold no block of 32
        model.session(kv_dtype="q8_0")
    text = smollm2.tokenize("Once upon a time, in a land far away")
    with smollm2.session(kv_dtype="q8_0") as q, smollm2.session(kv_dtype=infokv.KvDtype.F16) as f:
        q.decode(text)
        f.decode(text)
        # 34 bytes per 32 values against f16's 64
        assert q.kv_stat("block_bytes") * 64 == f.kv_stat("block_bytes") * 34
        assert int(q.logits().argmax()) == int(f.logits().argmax())


def _engine_prompts(n, length, seed=7):
    import random
    r = random.Random(seed)
    return [[1] + [3 + r.randrange(500) for _ in range(length)] for _ in range(n)]


def _engine_run(model, prompts, **options):
    import infokv
    with infokv.Engine(model, n_threads=1, kv_dtype="f32", **options) as eng:
        ids = [eng.open() for _ in prompts]
        for i, p in zip(ids, prompts):
            eng.submit(i, p, 16)
        streamed = {i: [] for i in ids}
        for conv, tok in eng.run():
            streamed[conv].append(tok)
        out = [eng.generated(i) for i in ids]
        assert out == [streamed[i] for i in ids]
        assert all(eng.state(i) == infokv.TurnState.DONE for i in ids), [eng.failure(i) for i in ids]
        return out, eng.stats(), eng.report()


def test_engine_moves_and_recomputes_conversations_without_changing_their_answers(model):
    prompts = _engine_prompts(6, 60)
    ref, _, _ = _engine_run(model, prompts, kv_pool_blocks=1000)
    for strategy in ("move", "recompute", "auto"):
        got, stats, report = _engine_run(model, prompts, kv_pool_blocks=60, strategy=strategy)
        assert got == ref, strategy
        assert stats["moves"] + stats["recomputes"] > 0, (strategy, stats)
        assert report["decisions"] and all(d["action"] in ("move", "recompute") for d in report["decisions"])


def test_engine_refuses_bad_calls(model):
    import infokv
    with pytest.raises(infokv.InvalidArgumentError):
        infokv.Engine(model, strategy="sometimes")
    with infokv.Engine(model, kv_pool_blocks=100) as eng:
        c = eng.open()
        with pytest.raises(infokv.OutOfRangeError):
            eng.submit(c, [1, 10 ** 6], 4)
        with pytest.raises(infokv.NotFoundError):
            eng.submit(c + 50, [1, 2], 4)
        with pytest.raises(infokv.BadConfigError):
            eng.open(memory_limit_tokens=16)  # needs a compression policy
        eng.submit(c, [1, 5, 6], 3)
        with pytest.raises(infokv.BadStateError):
            eng.submit(c, [7], 3)
        list(eng.run())
        assert len(eng.generated(c)) == 3 and eng.where(c) == infokv.Where.RESIDENT
        eng.close_conversation(c)
        with pytest.raises(infokv.NotFoundError):
            eng.state(c)
    with pytest.raises(infokv.BadHandleError):
        eng.pending()


def test_engine_prefix_cache_on_disk_starts_a_second_engine_from_the_first_ones_prompt(model, tmp_path):
    import infokv
    prompt = _engine_prompts(1, 300, seed=11)[0]  # entries are multiples of the prefill chunk (256)
    answers = []
    for i in range(2):
        with infokv.Engine(model, n_threads=1, kv_pool_blocks=600) as eng:
            eng.prefix_cache(memory_bytes=0, disk_dir=tmp_path / "prefixes")
            c = eng.open()
            eng.submit(c, prompt, 8)
            list(eng.run())
            answers.append(eng.generated(c))
            assert eng.stat("prefix_hits") == i, eng.stats()
    assert answers[0] == answers[1]
    with infokv.Engine(model, kv_pool_blocks=100) as eng:
        with pytest.raises(infokv.InvalidArgumentError):
            eng.prefix_cache(memory_bytes=-1)


def test_auto_holds_layers_at_q8_under_a_byte_budget_unless_told_not_to(smollm2, model):
    import os
    with open(os.path.join(os.environ["INFOKV_CORPORA_DIR"], "emma.txt"), encoding="utf-8") as f:  # missing: fails
        text = f.read()[300000:304000]
    toks = smollm2.tokenize(text)[:480]
    dtypes = {}
    for lp in ("auto", "off", True, False):
        with smollm2.session(policy="auto", budget=1.0, compress_after_prefill=False, layer_precision=lp) as s:
            s.decode(toks)
            s.compress(0, 60, "next")
            dtypes[lp] = [s.layer_dtype(0, l) for l in range(smollm2.n_layer)]
            assert all(isinstance(d, infokv.KvDtype) for d in dtypes[lp])
            with pytest.raises(infokv.OutOfRangeError):
                s.layer_dtype(0, smollm2.n_layer)
    assert infokv.KvDtype.Q8_0 in dtypes["auto"] and set(dtypes["auto"]) <= {infokv.KvDtype.F16, infokv.KvDtype.Q8_0}
    assert set(dtypes["off"]) == {infokv.KvDtype.F16}
    assert dtypes[True] == dtypes["auto"] and dtypes[False] == dtypes["off"]
    for bad in ("on", 2, 0.5):
        with pytest.raises(infokv.InvalidArgumentError):
            smollm2.session(policy="auto", budget=0.5, layer_precision=bad)
    with model.session(kv_dtype="f32") as s:  # stories260K's heads of 8: every layer in the session's dtype
        s.decode(model.tokenize("Once upon a time"))
        assert s.layer_dtype(0, 0) == infokv.KvDtype.F32
