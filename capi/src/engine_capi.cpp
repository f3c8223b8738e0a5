// The C shim of the engine (capi/include/infokv/engine.h).
#include <cstdio>
#include <string>

#include "capi/src/handles.hpp"
#include "infokv/infokv.h"
#include "util/json_escape.hpp"

using infokv::Engine;
using infokv::Status;
using infokv::fail;
using infokv::capi::guard;
using infokv::capi::require;

static_assert(IKV_STRATEGY_AUTO == static_cast<int32_t>(infokv::Strategy::automatic), "strategy values must agree");
static_assert(IKV_STRATEGY_FAIL == static_cast<int32_t>(infokv::Strategy::fail), "strategy values must agree");
static_assert(IKV_STRATEGY_RECOMPUTE == static_cast<int32_t>(infokv::Strategy::recompute), "strategy values must agree");
static_assert(IKV_STRATEGY_MOVE == static_cast<int32_t>(infokv::Strategy::move), "strategy values must agree");
static_assert(IKV_STRATEGY_COMPRESS == static_cast<int32_t>(infokv::Strategy::compress), "strategy values must agree");
static_assert(IKV_TURN_QUEUED == static_cast<int32_t>(infokv::TurnState::queued), "turn states must agree");
static_assert(IKV_TURN_RUNNING == static_cast<int32_t>(infokv::TurnState::running), "turn states must agree");
static_assert(IKV_TURN_DONE == static_cast<int32_t>(infokv::TurnState::done), "turn states must agree");
static_assert(IKV_TURN_FAILED == static_cast<int32_t>(infokv::TurnState::failed), "turn states must agree");
static_assert(IKV_WHERE_NONE == static_cast<int32_t>(infokv::Where::none), "places must agree");
static_assert(IKV_WHERE_RESIDENT == static_cast<int32_t>(infokv::Where::resident), "places must agree");
static_assert(IKV_WHERE_MOVED == static_cast<int32_t>(infokv::Where::moved), "places must agree");
static_assert(IKV_WHERE_DROPPED == static_cast<int32_t>(infokv::Where::dropped), "places must agree");

int32_t ikv_engine_create(ikv_engine **out, ikv_model *model, const ikv_session_options *opts, int32_t strategy,
                          const char *spill_dir) {
  if (out != nullptr) *out = nullptr;
  return guard([&] {
    require(out != nullptr, "out must not be NULL");
    const auto mdl = infokv::capi::use(model, "model");
    if (strategy < IKV_STRATEGY_AUTO || strategy > IKV_STRATEGY_COMPRESS)
      fail(Status::invalid_argument, "strategy = " + std::to_string(strategy) +
                                         " is not a strategy (auto = 0, fail = 1, recompute = 2, move = 3, compress = 4)");
    infokv::EngineOptions eo;
    eo.session = infokv::capi::session_options_from_c(opts);
    eo.strategy = static_cast<infokv::Strategy>(strategy);
    if (spill_dir != nullptr) eo.spill_dir = spill_dir;
    auto e = std::make_unique<ikv_engine>();
    e->engine = std::make_unique<Engine>(mdl->model, eo);
    *out = infokv::capi::register_handle(std::move(e));
    return IKV_OK;
  });
}

void ikv_engine_free(ikv_engine *engine) { infokv::capi::free_handle(engine); }

int32_t ikv_engine_prefix_cache(ikv_engine *engine, int64_t memory_bytes, const char *disk_dir, const char *redis_address) {
  return guard([&] {
    const auto e = infokv::capi::use(engine, "engine");
    require(memory_bytes >= 0, "memory_bytes must not be negative");
    infokv::PrefixCacheOptions p;
    p.memory_bytes = memory_bytes;
    if (disk_dir != nullptr) p.disk_dir = disk_dir;
    if (redis_address != nullptr) p.redis = redis_address;
    e->engine->set_prefix_cache(memory_bytes > 0 || !p.disk_dir.empty() || !p.redis.empty(), p);
    return IKV_OK;
  });
}

int32_t ikv_engine_open(int64_t *out_id, ikv_engine *engine, int32_t priority, int64_t memory_limit_tokens,
                        const ikv_sampler_options *sampling) {
  if (out_id != nullptr) *out_id = 0;
  return guard([&] {
    const auto e = infokv::capi::use(engine, "engine");
    require(out_id != nullptr, "out_id must not be NULL");
    const infokv::SamplerParams p = sampling != nullptr ? infokv::capi::sampler_params_from_c(sampling) : Engine::greedy();
    *out_id = e->engine->open(priority, memory_limit_tokens, p);
    return IKV_OK;
  });
}

int32_t ikv_engine_submit(ikv_engine *engine, int64_t conversation, const int32_t *tokens, size_t n_tokens,
                          int32_t max_tokens) {
  return guard([&] {
    const auto e = infokv::capi::use(engine, "engine");
    require(tokens != nullptr || n_tokens == 0, "tokens must not be NULL when n_tokens > 0");
    require(n_tokens < (size_t{1} << 24), "n_tokens must be under 2^24");
    infokv::Turn t;
    if (n_tokens > 0) t.prompt.assign(tokens, tokens + n_tokens);
    t.max_tokens = max_tokens;
    e->engine->submit(conversation, std::move(t));
    return IKV_OK;
  });
}

int32_t ikv_engine_pending(int64_t *out, const ikv_engine *engine) {
  if (out != nullptr) *out = 0;
  return guard([&] {
    const auto e = infokv::capi::use(engine, "engine");
    require(out != nullptr, "out must not be NULL");
    *out = e->engine->pending();
    return IKV_OK;
  });
}

int32_t ikv_engine_step(int64_t *out, size_t capacity, size_t *out_count, ikv_engine *engine) {
  if (out_count != nullptr) *out_count = 0;
  return guard([&] {
    const auto e = infokv::capi::use(engine, "engine");
    require(out_count != nullptr, "out_count must not be NULL");
    require(out != nullptr || capacity == 0, "out must not be NULL when capacity > 0");
    const size_t need = 2 * static_cast<size_t>(e->engine->pending());
    if (capacity < need) {
      *out_count = need;
      fail(Status::buffer_too_small, "ikv_engine_step needs room for " + std::to_string(need) +
                                         " values (2 per pending turn); capacity is " + std::to_string(capacity));
    }
    const std::vector<infokv::TokenEvent> ev = e->engine->step();
    for (size_t i = 0; i < ev.size(); ++i) {
      out[2 * i] = ev[i].conversation;
      out[2 * i + 1] = ev[i].token;
    }
    *out_count = 2 * ev.size();
    return IKV_OK;
  });
}

int32_t ikv_engine_turn_state(int32_t *out_status, const ikv_engine *engine, int64_t conversation) {
  if (out_status != nullptr) *out_status = 0;
  return guard([&] {
    const auto e = infokv::capi::use(engine, "engine");
    require(out_status != nullptr, "out_status must not be NULL");
    *out_status = static_cast<int32_t>(e->engine->state(conversation));
    return IKV_OK;
  });
}

int32_t ikv_engine_where(int32_t *out, const ikv_engine *engine, int64_t conversation) {
  if (out != nullptr) *out = 0;
  return guard([&] {
    const auto e = infokv::capi::use(engine, "engine");
    require(out != nullptr, "out must not be NULL");
    *out = static_cast<int32_t>(e->engine->where(conversation));
    return IKV_OK;
  });
}

int32_t ikv_engine_generated(int32_t *out_tokens, size_t capacity, size_t *out_count, const ikv_engine *engine,
                             int64_t conversation) {
  if (out_count != nullptr) *out_count = 0;
  return guard([&] {
    const auto e = infokv::capi::use(engine, "engine");
    return infokv::capi::copy_out_ids(out_tokens, capacity, out_count, e->engine->generated(conversation));
  });
}

int32_t ikv_engine_failure(char *out, size_t capacity, size_t *out_len, const ikv_engine *engine, int64_t conversation) {
  if (out_len != nullptr) *out_len = 0;
  if (out != nullptr && capacity > 0) out[0] = '\0';
  return guard([&] {
    const auto e = infokv::capi::use(engine, "engine");
    return infokv::capi::copy_out_text(out, capacity, out_len, e->engine->failure(conversation));
  });
}

int32_t ikv_engine_close(ikv_engine *engine, int64_t conversation) {
  return guard([&] {
    const auto e = infokv::capi::use(engine, "engine");
    e->engine->close(conversation);
    return IKV_OK;
  });
}

int32_t ikv_engine_stat(int64_t *out, const ikv_engine *engine, int32_t stat) {
  if (out != nullptr) *out = 0;
  return guard([&] {
    const auto e = infokv::capi::use(engine, "engine");
    require(out != nullptr, "out must not be NULL");
    const infokv::EngineStats &s = e->engine->stats();
    switch (stat) {
      case IKV_ENGINE_STAT_STEPS: *out = s.steps; break;
      case IKV_ENGINE_STAT_DECODED_TOKENS: *out = s.decoded_tokens; break;
      case IKV_ENGINE_STAT_PREFILLED_TOKENS: *out = s.prefilled_tokens; break;
      case IKV_ENGINE_STAT_COMPRESSIONS: *out = s.compressions; break;
      case IKV_ENGINE_STAT_MOVES: *out = s.moves; break;
      case IKV_ENGINE_STAT_RECOMPUTES: *out = s.recomputes; break;
      case IKV_ENGINE_STAT_FAILURES: *out = s.failures; break;
      case IKV_ENGINE_STAT_BYTES_MOVED: *out = s.bytes_moved; break;
      case IKV_ENGINE_STAT_RECOMPUTED_TOKENS: *out = s.recomputed_tokens; break;
      case IKV_ENGINE_STAT_CONVERSATIONS: *out = e->engine->conversations(); break;
      case IKV_ENGINE_STAT_POOL_BLOCKS_FREE: *out = e->engine->session().kv().free_blocks(); break;
      case IKV_ENGINE_STAT_PREFIX_HITS: *out = s.prefix_hits; break;
      case IKV_ENGINE_STAT_PREFIX_HIT_TOKENS: *out = s.prefix_hit_tokens; break;
      case IKV_ENGINE_STAT_RECOMPUTE_HIT_TOKENS: *out = s.recompute_hit_tokens; break;
      case IKV_ENGINE_STAT_PREFIX_SAVES:
      case IKV_ENGINE_STAT_PREFIX_REFUSED:
      case IKV_ENGINE_STAT_PREFIX_STORE_ERRORS: {
        const infokv::PrefixCache *pc = e->engine->prefix_cache();
        const infokv::PrefixCacheStats none;
        const infokv::PrefixCacheStats &ps = pc != nullptr ? pc->stats() : none;
        *out = stat == IKV_ENGINE_STAT_PREFIX_SAVES ? ps.saves : stat == IKV_ENGINE_STAT_PREFIX_REFUSED ? ps.refused : ps.store_errors;
        break;
      }
      default: fail(Status::invalid_argument, "stat = " + std::to_string(stat) + " is not an IKV_ENGINE_STAT_* value (1..17)");
    }
    return IKV_OK;
  });
}

int32_t ikv_engine_report_json(char *out, size_t capacity, size_t *out_len, const ikv_engine *engine) {
  if (out_len != nullptr) *out_len = 0;
  if (out != nullptr && capacity > 0) out[0] = '\0';
  return guard([&] {
    const auto e = infokv::capi::use(engine, "engine");
    return infokv::capi::copy_out_text(out, capacity, out_len, infokv::report_json(*e->engine));
  });
}
